"""replaygate dashboard: `replaygate dashboard` (or `streamlit run` on this file)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

HERE = Path(__file__).parent

st.set_page_config(page_title="replaygate", page_icon=":material/satellite_alt:", layout="wide")

# (file, title, icon, url path); the first is the default page, served at "/".
VIEWS = [
    ("overview", "Overview", "traffic", "overview"),
    ("rollout", "Rollout", "timeline", "rollout"),
    ("streams", "Streams & replay", "replay", "streams"),
    ("dispatch", "Dispatch & idempotency", "receipt_long", "dispatch"),
    ("sessions", "Sessions & proxy", "lock", "sessions"),
    ("findings", "Findings", "search", "findings"),
    ("inspector", "Stream inspector", "account_tree", "inspector"),
    ("datafiles", "Data", "database", "data"),
    ("guide", "Field guide", "menu_book", "guide"),
]
PAGES = [
    st.Page(
        str(HERE / "views" / f"{name}.py"),
        title=title,
        icon=f":material/{icon}:",
        url_path=path,
        default=(i == 0),
    )
    for i, (name, title, icon, path) in enumerate(VIEWS)
]

st.navigation(PAGES).run()
