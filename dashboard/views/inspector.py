"""Stream inspector: one session or stream (or a sessionless key, principal or request) as
a single timeline, with the finding's evidence marked."""

import pandas as pd
import streamlit as st

from replaygate.api import escape
from replaygate.dashboard import data, figures, fmt, state, ui
from replaygate.dashboard.state import short

ctx = ui.bootstrap()
st.title("Stream inspector")
params = st.query_params
subjects = data.inspector_subjects(ctx.stamp, ctx.filters)
labels: dict[tuple[str, str], str] = {}
for r in subjects.itertuples():
    n = f"{r.findings:,} finding{'s' if r.findings != 1 else ''}"
    if r.subject_type == "session":
        labels[("session", r.subject)] = (
            f"{fmt.blank(r.client) or 'unknown client'} · started {fmt.when(r.started)} · "
            f"{fmt.blank(r.stage)} · {n} · {short(r.subject, 8)}"
        )
    else:
        labels[(r.subject_type, r.subject)] = (
            f"{r.subject_type} {r.subject} · {fmt.blank(r.stage)} · {n}"
        )
wanted = None
if params.get("session"):
    wanted = ("session", params["session"])
elif params.get("subject"):
    wanted = ("subject", params["subject"])
elif params.get("at"):
    moment = state.parse_ts(params["at"])
    # pandas' nanosecond timestamps span 1677-2262: a link's year 1 must not crash the page.
    if moment is None or not 1678 <= moment.year <= 2261:
        st.info(f"“{state.quoted(params['at'])}” is not a timestamp: ignored.")
    else:
        wanted = ("moment", params["at"])
options = list(labels)
if wanted is not None:
    match = [o for o in options if o[1] == wanted[1]]
    if match:
        wanted = match[0]
    else:
        options = [wanted, *options]
        labels[wanted] = (
            f"records without a session around {fmt.when(wanted[1])}"
            if wanted[0] == "moment"
            else f"{wanted[0]} {short(wanted[1], 16)}"
        )
if not options:
    st.info("Nothing to inspect for these filters.")
    st.stop()


def _subject_to_url() -> None:
    # The URL decides what is shown; a pick rewrites it before the rerun.
    kind_, value = st.session_state["inspector_subject"]
    for key in ("session", "stream", "subject", "at", "f_detector", "f_event_id", "f_dispatch_id"):
        params.pop(key, None)
    params[{"session": "session", "moment": "at"}.get(kind_, "subject")] = value


def _stream_to_url() -> None:
    value = st.session_state["inspector_stream"]
    if value == "(whole session)":
        params.pop("stream", None)
    else:
        params["stream"] = value


st.session_state["inspector_subject"] = wanted if wanted in options else options[0]
picked = st.selectbox(
    "Subject (client · start · stage · findings)",
    options,
    format_func=lambda o: escape.one_line(labels[o]),
    key="inspector_subject",
    on_change=_subject_to_url,
)
subject_type, subject = picked
stream_id = None
if subject_type == "session":
    streams = data.streams_of(ctx.stamp, subject)
    stream_opts = ["(whole session)", *streams]
    want_stream = params.get("stream")
    st.session_state["inspector_stream"] = (
        want_stream if want_stream in stream_opts else "(whole session)"
    )
    stream = st.selectbox(
        "Stream",
        stream_opts,
        key="inspector_stream",
        format_func=escape.one_line,
        on_change=_stream_to_url,
    )
    stream_id = None if stream == "(whole session)" else stream
    if params.get("session") != subject or params.get("stream") != stream_id:
        params.pop("subject", None)
        params["session"] = subject
        if stream_id is None:
            params.pop("stream", None)
        else:
            params["stream"] = stream_id
    st.caption(f"Session HMAC: {fmt.md_text(subject)}")
    tl = data.timeline(ctx.stamp, subject, stream_id)
    found = data.findings(ctx.stamp, ctx.filters.with_(stage=None))
    found = found[found["session_hmac"] == subject]
    if stream_id is not None:
        found = found[(found["stream_id"] == stream_id) | found["stream_id"].isna()]
    title = f"session {short(subject)}" + (f" · stream {stream_id}" if stream_id else "")
elif subject_type == "moment":
    at = pd.Timestamp(subject)
    at = at.tz_localize("UTC") if at.tzinfo is None else at
    tl = data.sessionless_timeline(ctx.stamp, None, at.to_pydatetime())
    found = data.findings(ctx.stamp, ctx.filters.with_(stage=None))
    near = (pd.to_datetime(found["ts"], utc=True) - at).abs() <= pd.Timedelta(seconds=5)
    found = found[found["session_hmac"].isna() & near]
    title = f"records without a session around {fmt.when(at.to_pydatetime())}"
else:
    if params.get("subject") != subject:
        params.pop("session", None)
        params.pop("stream", None)
        params["subject"] = subject
    tl = data.sessionless_timeline(ctx.stamp, subject)
    found = data.findings(ctx.stamp, ctx.filters.with_(stage=None))
    found = found[
        found["session_hmac"].isna()
        & (
            (found["idempotency_key"] == subject)
            | (found["dispatch_id"] == subject)
            | (found["principal"] == subject)
        )
    ]
    title = f"{subject_type} {subject} (no session)"

# The finding to mark: the one the link named, else the worst here.
finding = None
if not found.empty:
    pick = found
    for key in ("detector", "event_id", "dispatch_id"):
        want = params.get("f_" + key)
        if want and (pick[key] == want).any():
            pick = pick[pick[key] == want]
    finding = pick.iloc[0].to_dict()
marks = figures.evidence_marks(tl, finding)
if finding is not None:
    what = fmt.detail(finding["detail"])
    st.markdown(
        f"**Marked:** {fmt.md_text(finding['detector'])} ({fmt.md_text(finding['severity'])}) "
        f"at {fmt.md_text(fmt.when(finding['ts']))}" + (f" — {fmt.md_text(what)}" if what else "")
    )
st.plotly_chart(figures.inspector_timeline(tl, title, marks), key="inspector_timeline")
st.subheader("Findings here")
ui.findings_table(found, key="inspector_findings", ctx=ctx, height=220)
st.subheader("Records")
rows = pd.DataFrame(
    {
        "time (UTC)": tl["ts"],
        "evidence": marks.reindex(tl.index).fillna(""),
        "lane": tl["lane"],
        "what": tl["label"].map(fmt.blank),
        "stream": tl["stream_id"].map(fmt.blank),
        "seq": tl["seq"].map(fmt.count),
        "event id": tl["event_id"].map(fmt.blank),
        "cursor (Last-Event-ID)": tl["cursor"].map(fmt.blank),
        "more": tl["info"].map(fmt.blank),
    }
)
ui.table(
    rows,
    hide_index=True,
    key="inspector_rows",
    width="stretch",
    column_config={
        "time (UTC)": st.column_config.DatetimeColumn("time (UTC)", format="MM-DD HH:mm:ss.SSS")
    },
)
