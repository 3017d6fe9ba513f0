"""Field guide: per detector, the failure it catches in real deployments, how it looks
here and the usual fix (the same entries as docs/field-guide.md). Every finding's
*guide* link opens its detector's entry (`guide?detector=NAME`)."""

import streamlit as st

from replaygate.api import fieldguide

st.title("Field guide")
names = [e["detector"] for e in fieldguide.entries()]
asked = st.query_params.get("detector")
chosen = st.selectbox(
    "Detector",
    names,
    index=names.index(asked) if asked in names else None,
    placeholder="all detectors",
    key="guide_detector",
)
if chosen and chosen != asked:
    st.query_params["detector"] = chosen
for e in fieldguide.entries():
    if chosen in (None, e["detector"]):
        st.markdown(fieldguide.entry_markdown(e, heading="###"))
