"""replaygate dashboard: `replaygate dashboard` (or `streamlit run dashboard/app.py`)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

HERE = Path(__file__).parent

st.set_page_config(page_title="replaygate", page_icon="🛰", layout="wide")

PAGES = [
    st.Page(str(HERE / "pages" / "overview.py"), title="Overview", icon="🚦",
            url_path="overview", default=True),
    st.Page(str(HERE / "pages" / "rollout.py"), title="Rollout", icon="🗓", url_path="rollout"),
    st.Page(str(HERE / "pages" / "streams.py"), title="Streams & replay", icon="🔁",
            url_path="streams"),
    st.Page(str(HERE / "pages" / "dispatch.py"), title="Dispatch & idempotency", icon="🧾",
            url_path="dispatch"),
    st.Page(str(HERE / "pages" / "sessions.py"), title="Sessions & proxy", icon="🔐",
            url_path="sessions"),
    st.Page(str(HERE / "pages" / "findings.py"), title="Findings", icon="🔎",
            url_path="findings"),
    st.Page(str(HERE / "pages" / "inspector.py"), title="Stream inspector", icon="🧵",
            url_path="inspector"),
    st.Page(str(HERE / "pages" / "datafiles.py"), title="Data", icon="🗄", url_path="data"),
]

st.navigation(PAGES).run()
