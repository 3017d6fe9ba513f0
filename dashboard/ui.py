"""Shared page furniture: bootstrap (store, stamp, filters, freshness, refresh), the
decision banner, gate tiles, evidence links and the findings table.

Everything from the data is shown as text (Streamlit elements or escaped Markdown),
never as HTML.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from replaygate.api import (
    BY_ID,
    NOT_EXERCISED,
    Decision,
    Status,
    display_bound,
    display_status,
    display_threshold,
    display_value,
    escape,
    named,
)

from . import data, fmt, state
from .model import detectors_for, gates_for
from .state import Filters

# How often an open page checks whether the data changed (then it reruns, filters kept).
REFRESH_SECONDS = float(os.environ.get("REPLAYGATE_REFRESH_SECONDS", "15"))
# Data whose newest record is older than this is called stale.
STALE_AFTER = timedelta(minutes=float(os.environ.get("REPLAYGATE_STALE_MINUTES", "15")))
DECISION_ELEMENT = {
    Decision.PROCEED: st.success,
    Decision.HOLD: st.warning,
    Decision.ROLLBACK: st.error,
}
DECISION_ICON = {
    Decision.PROCEED: ":material/check_circle:",
    Decision.HOLD: ":material/pause_circle:",
    Decision.ROLLBACK: ":material/undo:",
}
BadgeColor = Literal["green", "red", "orange", "gray"]
# Streamlit's colour names by an outcome's tone (queries/outcome.py).
TONE_BADGE: dict[str, BadgeColor] = {
    "good": "green",
    "bad": "red",
    "warn": "orange",
    "muted": "gray",
}
STATUS_ICON = {
    Status.PASS: ":material/check:",
    Status.FAIL: ":material/close:",
    Status.INSUFFICIENT: ":material/hourglass_empty:",
    Status.NOT_APPLICABLE: ":material/remove:",
}
STATUS_BADGE = {s: (TONE_BADGE[s.tone], STATUS_ICON[s]) for s in Status}
PAGE_FILES = {
    "overview": "views/overview.py",
    "findings": "views/findings.py",
    "inspector": "views/inspector.py",
}


@dataclass
class Ctx:
    stamp: str
    current: bool
    filters: Filters
    options: dict
    preset: str = "all"
    windows: dict = field(default_factory=dict)

    def query(self, **extra) -> dict[str, str]:
        """The URL query of the current filters plus page-specific values."""
        q = state.to_query(self.filters, self.preset)
        q.update({k: v for k, v in extra.items() if v})
        return q


def bootstrap() -> Ctx:
    """Everything a page needs; stops the page with a clear message when the DB is busy."""
    s = data.store()
    try:
        stamp, current = s.stamp()
        options = data.filter_options(stamp)
        stages = data.stages(stamp)
    except data.DatabaseBusy:
        st.info(
            "An ingest is writing the database right now. The dashboard will show the "
            "new data as soon as it finishes."
        )
        st.button("Try again", key="busy_retry")
        auto_refresh("busy")
        st.stop()
    except Exception as exc:  # noqa: BLE001 - a missing or foreign DB gets one clear line
        why = (str(exc).splitlines() or [type(exc).__name__])[0]
        st.error(
            f"Cannot read {fmt.md_text(s.path)}: {fmt.md_text(why)}. Run `replaygate ingest` first."
        )
        st.stop()
    if not current:
        st.warning(
            "Findings are older than the data or the configuration. Run "
            "`replaygate findings` (or restart `replaygate dashboard`) to refresh them."
        )
    windows = {
        r.stage: (
            r.start_ts.to_pydatetime(),
            None if pd.isna(r.end_ts) else r.end_ts.to_pydatetime(),
        )
        for r in stages.itertuples()
    }
    filters, preset = sidebar_filters(options, windows)
    sidebar_freshness(stamp)
    auto_refresh(stamp)
    return Ctx(stamp, current, filters, options, preset, windows)


@dataclass
class GatePage:
    """A page of gate tiles (Streams, Sessions, Dispatch) as it starts: the page's gates
    (`-- page:` of their SQL) measured under the filters, and its detectors' findings."""

    page: str
    ctx: Ctx
    detectors: tuple[str, ...]
    shown: tuple[str, ...]  # the page's gates, in display order
    gates: dict[str, dict]  # every gate's measure under the filters, by id
    found: pd.DataFrame

    @property
    def counts(self) -> dict[str, int]:
        """Findings per detector under the filters."""
        return self.found.groupby("detector").size().to_dict() if not self.found.empty else {}

    def tiles(self, more: int = 0) -> list:
        """One tile per gate of the page, in a row with `more` columns after them, which
        are returned for the page's own tiles."""
        cols = st.columns(len(self.shown) + more)
        for col, gate_id in zip(cols, self.shown, strict=False):
            gate_metric(col, self.gates[gate_id], self.ctx)
        return cols[len(self.shown) :]

    def findings_section(self) -> None:
        findings_section(self.ctx, self.ctx.filters, self.detectors, self.found, self.page)


def gate_page(page: str, title: str, caption: str = "") -> GatePage:
    """Start a page of gate tiles: bootstrap, its title (and caption), and what it shows."""
    ctx = bootstrap()
    st.title(title)
    if caption:
        st.caption(caption)
    scope = stage_scope(ctx)
    detectors = detectors_for(page)
    return GatePage(
        page,
        ctx,
        detectors,
        gates_for(page),
        {g["id"]: g for g in data.gate_measures(ctx.stamp, ctx.filters, scope)},
        data.findings(ctx.stamp, ctx.filters, detectors),
    )


def auto_refresh(stamp: str) -> None:
    """Rerun the page when the data version changes; the filters live in the URL and the
    widgets' state, so they survive."""

    @st.fragment(run_every=REFRESH_SECONDS)
    def _check() -> None:
        try:
            new, _ = data.store().stamp()
        except Exception:  # noqa: BLE001 - busy or gone: check again next time
            return
        if new != stamp:
            st.rerun()

    _check()


def _widgets_to_url(lo, hi, windows: dict) -> None:
    """on_change of a filter widget: the widgets' values become the URL (the source of truth
    for the next run)."""
    ss = st.session_state
    stage = ss.get("flt_stage")
    stage = None if stage in (None, "(all)") else stage
    preset = ss.get("flt_range") or "all"
    start = end = None
    if preset == "custom" and "flt_time" in ss:
        start, end = ss["flt_time"]
        start = start if lo is None or start > lo else None
        end = end if hi is None or end < hi else None
    f = Filters(
        stage=stage,
        revisions=tuple(ss.get("flt_rev") or ()),
        servers=tuple(ss.get("flt_server") or ()),
        clients=tuple(ss.get("flt_client") or ()),
        start=start,
        end=end,
    )
    if preset == "stage" and stage is None:
        preset = "all"
    params = st.query_params.to_dict()
    keep = {k: v for k, v in params.items() if k not in state.KEYS}
    st.query_params.from_dict({**keep, **state.to_query(f, preset)})


def sidebar_filters(options: dict, windows: dict) -> tuple[Filters, str]:
    """The URL decides the filters on every run; a widget change rewrites the URL first."""
    params = st.query_params.to_dict()
    f, preset, notes = state.from_query(params, windows, options)
    for note in notes:
        st.info(note, icon=":material/info:")
    lo, hi = options["span"]
    ss = st.session_state
    ss["flt_stage"] = f.stage or "(all)"
    ss["flt_range"] = preset
    # every filter widget writes the URL
    wired: dict[str, Any] = {"on_change": _widgets_to_url, "args": (lo, hi, windows)}
    # Options are data: shown on one line with bidi and zero-width characters by code
    # point, so two stages (servers, clients) that differ only invisibly look different.
    as_data = {"format_func": escape.one_line, **wired}
    sb = st.sidebar
    sb.header("Filters")
    sb.selectbox("Stage", ["(all)", *windows], key="flt_stage", **as_data)
    for label, key, chosen, among in (
        ("Protocol revision", "flt_rev", f.revisions, options["revisions"]),
        ("Server instance", "flt_server", f.servers, options["servers"]),
        ("Client", "flt_client", f.clients, options["clients"]),
    ):
        ss[key] = list(chosen)
        sb.multiselect(label, among, key=key, **as_data)
    sb.segmented_control(
        "Time (UTC; “last” counts back from the newest record)",
        list(state.PRESETS),
        format_func=lambda p: state.PRESETS[p][0],
        key="flt_range",
        **wired,
    )
    if preset == "custom" and lo is not None and hi is not None and hi > lo:
        ss["flt_time"] = (f.start or lo, f.end or hi)
        sb.slider(
            "From – to",
            min_value=lo,
            max_value=hi,
            step=timedelta(minutes=1),
            format="MM-DD HH:mm",
            key="flt_time",
            **wired,
        )
    wanted = state.to_query(f, preset)
    keep = {k: v for k, v in params.items() if k not in state.KEYS}
    if {**keep, **wanted} != params:
        st.query_params.from_dict({**keep, **wanted})
    if f.start or f.end:
        sb.caption(
            f"Showing {fmt.when(f.start) or 'the start'} → {fmt.when(f.end) or 'the newest record'}"
        )
    sb.caption("Filters live in the URL: share the link to share this view.")
    return f, preset


def freshness_summary(stamp: str, now: datetime | None = None) -> dict:
    df = data.freshness(stamp)
    # Not the raw maximum: a record dated after the last ingest is no "newest record".
    newest = data.source_freshness(stamp)["as_of"]
    ingest = df.loc[df["source"] == "last ingest", "newest"]
    last_ingest = None if ingest.empty or pd.isna(ingest.iloc[0]) else ingest.iloc[0]
    now = now or datetime.now(UTC)
    return {
        "newest": newest,
        "last_ingest": None if last_ingest is None else last_ingest.to_pydatetime(),
        "stale": newest is None or now - newest > STALE_AFTER,
        "by_source": df,
    }


def sidebar_freshness(stamp: str) -> None:
    fr = freshness_summary(stamp)
    sb = st.sidebar
    sb.subheader("Data")
    if fr["newest"] is None:
        sb.warning("No records yet.")
        return
    text = f"Newest record {fmt.when(fr['newest'])} ({fmt.ago(fr['newest'])})"
    if fr["stale"]:
        sb.warning(f"Stale: {text}.", icon=":material/schedule:")
    else:
        sb.caption(text)
    if fr["last_ingest"] is not None:
        sb.caption(f"Last ingest {fmt.when(fr['last_ingest'])} ({fmt.ago(fr['last_ingest'])})")
    for warning in data.source_freshness(stamp)["warnings"]:
        sb.warning(fmt.md_text(warning), icon=":material/warning:")
    note = data.store().config_note
    if note:
        sb.caption(f"Configuration: {fmt.md_text(note)}")


DECISION_COLOR = {d: TONE_BADGE[d.tone] for d in Decision}


def decision_banner(decision: str, stage: str, note: str = "") -> None:
    """The decision as a coloured heading (not an alert: it is a verdict about the data)."""
    color = DECISION_COLOR[Decision(decision)]
    icon = DECISION_ICON[Decision(decision)]
    text = f"### :{color}-background[{icon} {decision}] stage {fmt.md_text(stage)}"
    st.markdown(text)
    if note:
        st.caption(fmt.md_text(note))


def status_box(ok: bool, text: str) -> None:
    """A verdict about the data (not an error of the app)."""
    color, icon = ("green", ":material/check_circle:") if ok else ("red", ":material/error:")
    with st.container(border=True):
        st.markdown(f":{color}[{icon} **{fmt.md_text(text)}**]")


def rollback_box(verified: bool, headline: str, meaning: str) -> None:
    """Another stage's rollback verification (fmt.rollback_note): green when verified;
    otherwise orange, not red, beside this stage's decision, with what it means for it."""
    color, icon = (
        ("green", ":material/check_circle:") if verified else ("orange", ":material/warning:")
    )
    with st.container(border=True):
        st.markdown(f":{color}[{icon} **{fmt.md_text(headline)}**]")
        st.caption(fmt.md_text(meaning))


def findings_query(ctx: Ctx, detectors, stage: str | None) -> dict[str, str]:
    """The Findings page's URL for these detectors in this stage, other filters kept."""
    q = state.to_query(ctx.filters.with_(stage=stage), ctx.preset)
    q["det"] = ",".join(detectors)
    return q


def evidence_link(
    ctx: Ctx, label: str, detectors, stage: str | None, icon=None, color: str | None = None
):
    text = fmt.md_text(label)
    st.page_link(
        PAGE_FILES["findings"],
        label=f":{color}[{text}]" if color else text,
        icon=icon,
        query_params=findings_query(ctx, detectors, stage),
        help="the findings behind this, on the Findings page",
    )


def count_differs(gate: dict, findings: int | None) -> str | None:
    """Why a counting gate's number and the findings behind its link differ, or None:
    a gate counts units (one duplicate dispatch), its detectors one finding per
    observation of a unit (each extra execution, each log line)."""
    g = BY_ID.get(gate["id"])
    value = gate.get("value")
    if g is None or not g.kind.counts or value is None or findings is None:
        return None
    if int(value) == findings:
        return None
    noun = g.failure_noun_one if int(value) == 1 else g.failure_noun
    return (
        f"{fmt.count(int(value))} {noun} in {fmt.count(findings)} "
        f"finding{'s' if findings != 1 else ''}: a finding per observation"
    )


def tile_metric(title: str, value: str, help: str) -> None:
    """A tile's title, on as many lines as it needs, over its value: a metric's own label
    is cut to one line at a tile's width ("Duplicate dispatc…"), so it is kept only for
    screen readers and tests."""
    st.markdown(f"**{fmt.md_text(title)}**", help=help)
    st.metric(title, value, label_visibility="collapsed")


def gate_tile(col, gate: dict, ctx: Ctx, stage: str | None) -> None:
    color, icon = STATUS_BADGE[gate["status"]]
    word = fmt.STATUS_WORDS[gate["status"]]
    if display_status(gate) == NOT_EXERCISED:
        # A pass on a sample of 0 judged nothing: grey, never green.
        color, icon, word = "gray", ":material/remove:", NOT_EXERCISED
    with col.container(border=True):
        st.badge(word, color=color, icon=icon)
        tile_metric(
            fmt.gate_title(gate["id"]),
            display_value(gate),
            fmt.md_text(f"{gate['id']}: {gate['reason']}"),
        )
        bound = display_bound(gate)
        st.caption(
            f"threshold {display_threshold(gate)} · {fmt.sample(gate)}"
            + (f" · 95 % bound {bound}" if bound != "—" else "")
        )
        meter = gate.get("meter")
        if meter and gate["min_sample"]:
            st.progress(min(1.0, gate["sample"] / gate["min_sample"]))
        detectors = gate.get("detectors") or gate.get("evidence", {}).get("detectors", [])
        n = gate.get("evidence", {}).get("count", gate.get("findings"))
        differs = count_differs(gate, n)
        if differs:
            st.caption(differs)
        if gate["status"] == Status.NOT_APPLICABLE and n:
            # Findings beside "not applicable": they are real, the gate does not judge them.
            st.caption(
                f"{fmt.md_text(gate['reason'].split(': ', 1)[-1])}; the findings are shown, "
                "not gated"
            )
        if detectors:
            st.page_link(
                PAGE_FILES["findings"],
                label=f"{fmt.count(n or 0)} finding{'s' if n != 1 else ''} ›",
                query_params=findings_query(ctx, detectors, stage),
                help="evidence: " + ", ".join(detectors),
            )


def inspector_query(ctx: Ctx, row) -> dict[str, str]:
    """The inspector's URL for one finding, the filters kept."""
    q = ctx.query()
    session = row.get("session_hmac")
    if isinstance(session, str) and session:
        q["session"] = session
        if isinstance(row.get("stream_id"), str):
            q["stream"] = row["stream_id"]
    else:
        for key in ("idempotency_key", "dispatch_id", "principal"):
            if isinstance(row.get(key), str) and row.get(key):
                q["subject"] = row[key]
                break
        else:
            # Nothing names it: the inspector shows the sessionless records of its moment.
            if row.get("ts") is not None and not pd.isna(row.get("ts")):
                q["at"] = pd.Timestamp(row["ts"]).isoformat()
    for key in ("detector", "event_id", "dispatch_id"):
        if isinstance(row.get(key), str) and row.get(key):
            q["f_" + key] = row[key]
    if row.get("ts") is not None and not pd.isna(row.get("ts")):
        q["f_ts"] = pd.Timestamp(row["ts"]).isoformat()
    return q


def inspector_url(ctx: Ctx, row) -> str | None:
    q = inspector_query(ctx, row)
    if not {"session", "subject", "at"} & set(q):
        return None
    return "inspector?" + urlencode(q)


def filter_note(query_name: str, f: Filters) -> None:
    """Say on a widget which active filters its data cannot follow."""
    ignored = named.get(query_name).ignored(f)
    if ignored:
        st.caption(f"Not filtered by {', '.join(ignored)}: this shows all of the data.")


def guide_link(detector: str) -> str:
    """The detector's entry on the Field guide page (docs/field-guide.md, in the app)."""
    return "guide?" + urlencode({"detector": detector})


def findings_section(
    ctx: Ctx, f: Filters, detectors: tuple[str, ...], found: pd.DataFrame, page: str
) -> None:
    """A page's closing "Findings" section: the per-detector summary, then the rows."""
    st.subheader("Findings")
    summary_table(data.finding_summary(ctx.stamp, f, detectors), key=f"{page}_summary")
    findings_table(found, key=f"{page}_findings", ctx=ctx)


# Pixel widths of the findings table's first columns: together within FINDINGS_VISIBLE,
# the width of the page's content beside the sidebar in a 1400 px wide window.
FINDINGS_WIDTHS = {
    "open": 64,
    "severity": 72,
    "detector": 215,
    "detail": 345,
    "guide": 100,
    "time (UTC)": 110,
}
FINDINGS_VISIBLE = 920


def table(rows: object, **kw: Any) -> None:
    """The one way data reaches a table on screen: every text cell and column name made
    one line with invisible characters shown (`escape.cell_frame`), then `st.dataframe`.
    `rows`: a DataFrame, a dict of columns or a list of rows."""
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
    st.dataframe(escape.cell_frame(frame), **kw)


def findings_table(df: pd.DataFrame, key: str, ctx: Ctx, height: int = 360) -> None:
    if df.empty:
        st.success("No findings for these filters.")
        return
    # What a reader needs first comes first, at widths that fit the page beside the
    # sidebar at 1400 px (FINDINGS_VISIBLE): the finding, its detail and its field guide
    # entry; the time, stage and the unit's ids follow (the table scrolls sideways).
    view = pd.DataFrame(
        {
            "open": [inspector_url(ctx, r) for r in df.to_dict("records")],
            "severity": df["severity"],
            "detector": df["detector"],
            "detail": df["detail"].map(fmt.detail),
            "guide": df["detector"].map(guide_link),
            "time (UTC)": df["ts"],
            "stage": [
                fmt.stage_label(s, b) for s, b in zip(df["stage"], df["baseline"], strict=True)
            ],
            "session": df["session_hmac"].map(state.short),
            "stream": df["stream_id"].map(fmt.blank),
            "event": df["event_id"].map(fmt.blank),
            "dispatch / key": [
                fmt.blank(d) + (" · " if fmt.blank(d) and fmt.blank(k) else "") + fmt.blank(k)
                for d, k in zip(df["dispatch_id"], df["idempotency_key"], strict=True)
            ],
            "revision": df["revision"].map(fmt.blank),
        }
    )
    w = FINDINGS_WIDTHS
    table(
        view,
        key=key,
        height=height,
        hide_index=True,
        width="stretch",
        column_config={
            "open": st.column_config.LinkColumn(
                "inspect",
                display_text="open ›",
                help="open this finding in the inspector",
                width=w["open"],
            ),
            "severity": st.column_config.TextColumn("severity", width=w["severity"]),
            "detector": st.column_config.TextColumn("detector", width=w["detector"]),
            "detail": st.column_config.TextColumn(
                "detail", width=w["detail"], help="the detector's evidence for this finding"
            ),
            "guide": st.column_config.LinkColumn(
                "guide",
                display_text="field guide ›",
                help="what it means and the usual fix",
                width=w["guide"],
            ),
            "time (UTC)": st.column_config.DatetimeColumn(
                "time (UTC)", format="MM-DD HH:mm:ss", width=w["time (UTC)"]
            ),
            "session": st.column_config.TextColumn(
                "session", help="HMAC of the session id (shortened)"
            ),
        },
    )


def summary_table(df: pd.DataFrame, key: str) -> None:
    """The per-detector summary that comes before the rows."""
    if df.empty:
        return
    view = pd.DataFrame(
        {
            "detector": df["detector"],
            "findings": df["findings"].map(fmt.count),
            "worst": df["worst"],
            "newest (UTC)": df["newest"].map(fmt.when),
        }
    )
    table(view, key=key, hide_index=True, width="stretch")


def stage_scope(ctx: Ctx) -> str | None:
    """The selected stage's scope (a gate outside its scopes is not applicable)."""
    if ctx.filters.stage is None:
        return None
    stages = data.stages(ctx.stamp)
    hit = stages.loc[stages["stage"] == ctx.filters.stage, "scope"]
    return None if hit.empty else hit.iloc[0]


def bucket(ctx: Ctx):
    """The chart bucket for the filtered time span, and its name."""
    from . import figures

    lo, hi = ctx.options["span"]
    start = ctx.filters.start or (ctx.windows.get(ctx.filters.stage, (None, None))[0]) or lo
    end = ctx.filters.end or (ctx.windows.get(ctx.filters.stage, (None, None))[1]) or hi
    return figures.bucket_for(start, end)


def gate_metric(col, gate: dict, ctx: Ctx) -> None:
    """A gate's measure under the page's filters, with its status and evidence link."""
    color, icon = STATUS_BADGE[gate["status"]]
    word = fmt.STATUS_WORDS[gate["status"]]
    if display_status(gate) == NOT_EXERCISED:
        color, word = "gray", NOT_EXERCISED
    with col.container(border=True):
        tile_metric(
            fmt.gate_title(gate["id"]),
            display_value(gate),
            fmt.md_text(f"{gate['id']}: {gate['reason']}"),
        )
        line = f":{color}-badge[{fmt.md_text(word)}]"
        handled = BY_ID[gate["id"]].kind.handled(gate["sample"], gate["failures"])
        if handled is not None:
            line += f" {fmt.count(handled[0])} of {fmt.count(handled[1])} handled"
        else:
            line += f" {fmt.md_text(fmt.sample(gate))}"
        st.markdown(line)
        n = gate.get("findings", 0)
        st.page_link(
            PAGE_FILES["findings"],
            label=f"{fmt.count(n)} finding{'s' if n != 1 else ''} ›",
            query_params=findings_query(ctx, gate["detectors"], ctx.filters.stage),
            help="evidence: " + ", ".join(gate["detectors"]),
        )


def count_metric(col, label: str, counts: dict, detectors, ctx: Ctx) -> None:
    n = sum(counts.get(d, 0) for d in detectors)
    with col.container(border=True):
        tile_metric(label, fmt.count(n), "findings of " + ", ".join(detectors))
        st.page_link(
            PAGE_FILES["findings"],
            label="evidence ›",
            query_params=findings_query(ctx, detectors, ctx.filters.stage),
        )
