"""Shared page furniture: bootstrap (store, stamp, filters), badges, tiles, links."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

import streamlit as st

from replaygate.queries.gates import display_threshold, display_value

from . import data, figures, state
from .state import Filters


@dataclass
class Ctx:
    stamp: str
    current: bool
    filters: Filters
    options: dict


def bootstrap() -> Ctx:
    """Everything a page needs; stops the page with a clear message when the DB is busy."""
    s = data.store()
    try:
        stamp, current = s.stamp()
        options = data.filter_options(stamp)
    except data.DatabaseBusy:
        st.info(
            "An ingest is writing the database right now. The dashboard will show the "
            "new data as soon as it finishes."
        )
        st.button("Try again", key="busy_retry")
        st.stop()
    except Exception as exc:  # noqa: BLE001 - a missing or foreign DB gets one clear line
        st.error(
            f"Cannot read {s.path}: {str(exc).splitlines()[0]}. Run `replaygate ingest` first."
        )
        st.stop()
    if not current:
        st.warning(
            "Findings are older than the data or the configuration. Run "
            "`replaygate findings` (or restart `replaygate dashboard`) to refresh them."
        )
    filters = sidebar_filters(stamp, options)
    return Ctx(stamp, current, filters, options)


def sidebar_filters(stamp: str, options: dict) -> Filters:
    f = state.from_query(st.query_params.to_dict())
    sb = st.sidebar
    sb.header("Filters")
    stage_names = ["(all)"] + list(data.stages(stamp)["stage"])
    stage = sb.selectbox(
        "Stage",
        stage_names,
        index=stage_names.index(f.stage) if f.stage in stage_names else 0,
        key="flt_stage",
    )
    revs = sb.multiselect(
        "Protocol revision",
        options["revisions"],
        default=[r for r in f.revisions if r in options["revisions"]],
        key="flt_rev",
    )
    servers = sb.multiselect(
        "Server instance",
        options["servers"],
        default=[r for r in f.servers if r in options["servers"]],
        key="flt_server",
    )
    clients = sb.multiselect(
        "Client",
        options["clients"],
        default=[r for r in f.clients if r in options["clients"]],
        key="flt_client",
    )
    lo, hi = options["span"]
    start, end = f.start, f.end
    if lo is not None and hi is not None and hi > lo:
        picked = sb.slider(
            "Time range (UTC)",
            min_value=lo,
            max_value=hi,
            value=(max(lo, start or lo), min(hi, end or hi)),
            format="MM-DD HH:mm",
            key="flt_time",
        )
        start = picked[0] if picked[0] > lo else None
        end = picked[1] if picked[1] < hi else None
    new = Filters(
        stage=None if stage == "(all)" else stage,
        revisions=tuple(revs),
        servers=tuple(servers),
        clients=tuple(clients),
        start=start,
        end=end,
    )
    wanted = state.to_query(new)
    keep = {
        k: v
        for k, v in st.query_params.to_dict().items()
        if k not in ("stage", "rev", "server", "client", "from", "to")
    }
    if {**keep, **wanted} != st.query_params.to_dict():
        st.query_params.from_dict({**keep, **wanted})
    sb.caption("Filters live in the URL: share the link to share this view.")
    return new


def decision_badge(decision: str, stage: str) -> None:
    color = figures.DECISION_COLORS[decision]
    st.markdown(
        f"<div style='background:{color};color:white;padding:14px 20px;border-radius:8px;"
        f"font-size:1.6em;font-weight:700' data-testid='decision'>{decision} "
        f"<span style='font-weight:400;font-size:0.6em'>stage {stage}</span></div>",
        unsafe_allow_html=True,
    )


def status_box(ok: bool, text: str) -> None:
    """A verdict about the data (not an error of the app)."""
    color = figures.STATUS_COLORS["pass" if ok else "fail"]
    st.markdown(
        f"<div style='border-left:6px solid {color};padding:8px 12px;"
        f"background:#fafafa'><b>{text}</b></div>",
        unsafe_allow_html=True,
    )


def gate_tile(col, gate: dict) -> None:
    color = figures.STATUS_COLORS[gate["status"]]
    value = display_value(gate)
    with col.container(border=True):
        st.markdown(
            f"<span style='color:{color};font-weight:700'>● {gate['status']}</span> "
            f"&nbsp;<b>{gate['id']}</b>",
            unsafe_allow_html=True,
        )
        st.metric(gate["id"], value, help=gate["reason"], label_visibility="collapsed")
        st.caption(
            f"threshold {display_threshold(gate)} · sample {gate['sample']:,}"
            + (f" / {gate['min_sample']:,}" if gate["min_sample"] else "")
            + (f" · 95% bound < {gate['upper_bound_95']:.1e}" if gate["upper_bound_95"] else "")
        )
        meter = gate.get("meter")
        if meter and gate["min_sample"]:
            st.progress(min(1.0, gate["sample"] / gate["min_sample"]))


def inspector_link(session_hmac: str | None, stream_id: str | None = None) -> str | None:
    if not isinstance(session_hmac, str) or not session_hmac:
        return None
    q = {"session": session_hmac}
    if isinstance(stream_id, str):
        q["stream"] = stream_id
    return "inspector?" + urlencode(q)


def findings_table(df, key: str, height: int = 360) -> None:
    if df.empty:
        st.success("No findings for these filters.")
        return
    view = df.copy()
    view["session"] = view["session_hmac"].map(state.short)
    view["inspect"] = [
        inspector_link(h, s) for h, s in zip(view["session_hmac"], view["stream_id"], strict=True)
    ]
    cols = [
        "severity",
        "detector",
        "ts",
        "stage",
        "session",
        "stream_id",
        "event_id",
        "dispatch_id",
        "idempotency_key",
        "revision",
        "detail",
        "inspect",
    ]
    st.dataframe(
        view[cols],
        key=key,
        height=height,
        hide_index=True,
        width="stretch",
        column_config={
            "inspect": st.column_config.LinkColumn("inspect", display_text="open ›"),
            "ts": st.column_config.DatetimeColumn("ts", format="MM-DD HH:mm:ss"),
            "session": st.column_config.TextColumn(
                "session", help="HMAC of the session id (shortened)"
            ),
        },
    )
