"""Stream inspector: one session or stream as a single timeline."""

import streamlit as st

from replaygate.dashboard import data, figures, ui
from replaygate.dashboard.state import short

ctx = ui.bootstrap()
st.title("Stream inspector")
params = st.query_params
candidates = data.sessions_for_inspector(ctx.stamp, ctx.filters)
options = list(candidates["session_hmac"]) if not candidates.empty else []
wanted = params.get("session")
if wanted and wanted not in options:
    options = [wanted, *options]
if not options:
    st.info("No session to inspect for these filters.")
    st.stop()
session = st.selectbox(
    "Session (HMAC)",
    options,
    index=options.index(wanted) if wanted else 0,
    format_func=lambda h: short(h, 16),
    key="inspector_session",
)
streams = data.streams_of(ctx.stamp, session)
stream_opts = ["(whole session)", *streams]
want_stream = params.get("stream")
stream = st.selectbox(
    "Stream",
    stream_opts,
    index=stream_opts.index(want_stream) if want_stream in stream_opts else 0,
    key="inspector_stream",
)
stream_id = None if stream == "(whole session)" else stream
if params.get("session") != session or params.get("stream") != stream_id:
    params["session"] = session
    if stream_id is None:
        params.pop("stream", None)
    else:
        params["stream"] = stream_id
st.code(session, language=None)
tl = data.timeline(ctx.stamp, session, stream_id)
title = f"session {short(session)}" + (f" · stream {stream_id}" if stream_id else "")
st.plotly_chart(figures.inspector_timeline(tl, title), key="inspector_timeline")
found = data.findings(ctx.stamp, ctx.filters.with_(stage=None))
found = found[found["session_hmac"] == session]
if stream_id is not None:
    found = found[(found["stream_id"] == stream_id) | found["stream_id"].isna()]
st.subheader("Findings here")
ui.findings_table(found, key="inspector_findings", height=220)
with st.expander("All records", expanded=False):
    st.dataframe(tl, hide_index=True, key="inspector_rows", width="stretch")
