"""replaygate dashboard: `replaygate dashboard` (or `streamlit run dashboard/app.py`)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

HERE = Path(__file__).parent

st.set_page_config(page_title="replaygate", page_icon=":material/satellite_alt:", layout="wide")

PAGES = [
    st.Page(
        str(HERE / "views" / "overview.py"),
        title="Overview",
        icon=":material/traffic:",
        url_path="overview",
        default=True,
    ),
    st.Page(
        str(HERE / "views" / "rollout.py"),
        title="Rollout",
        icon=":material/timeline:",
        url_path="rollout",
    ),
    st.Page(
        str(HERE / "views" / "streams.py"),
        title="Streams & replay",
        icon=":material/replay:",
        url_path="streams",
    ),
    st.Page(
        str(HERE / "views" / "dispatch.py"),
        title="Dispatch & idempotency",
        icon=":material/receipt_long:",
        url_path="dispatch",
    ),
    st.Page(
        str(HERE / "views" / "sessions.py"),
        title="Sessions & proxy",
        icon=":material/lock:",
        url_path="sessions",
    ),
    st.Page(
        str(HERE / "views" / "findings.py"),
        title="Findings",
        icon=":material/search:",
        url_path="findings",
    ),
    st.Page(
        str(HERE / "views" / "inspector.py"),
        title="Stream inspector",
        icon=":material/account_tree:",
        url_path="inspector",
    ),
    st.Page(
        str(HERE / "views" / "datafiles.py"),
        title="Data",
        icon=":material/database:",
        url_path="data",
    ),
]

st.navigation(PAGES).run()
