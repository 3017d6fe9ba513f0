"""Dispatch & idempotency: duplicate side effects, conflicts, missing keys, revision mix."""

import json
from collections import Counter

import streamlit as st

from replaygate.dashboard import data, figures, ui

DETECTORS = (
    "duplicate_dispatch",
    "idempotency_conflict",
    "conflict_executed",
    "missing_idempotency_key",
)

ctx = ui.bootstrap()
st.title("Dispatch & idempotency")
found = data.findings(ctx.stamp, ctx.filters, DETECTORS)
mix = data.dispatch_mix(ctx.stamp, ctx.filters)
dups = found[found["detector"] == "duplicate_dispatch"] if not found.empty else found
bases = (
    Counter(json.loads(d).get("basis", "?") for d in dups["detail"])
    if not dups.empty
    else Counter()
)
cols = st.columns(4)
cols[0].metric(
    "duplicate dispatches",
    sum(bases.values()),
    help="by basis: " + (", ".join(f"{k} {v}" for k, v in bases.items()) or "none"),
)
cols[1].metric(
    "key conflicts (409)",
    int((found["detector"] == "idempotency_conflict").sum()) if not found.empty else 0,
)
cols[2].metric(
    "conflicts executed",
    int((found["detector"] == "conflict_executed").sum()) if not found.empty else 0,
)
hits = int(mix.loc[mix["outcome"] == "idempotency_hit", "n"].sum()) if not mix.empty else 0
keyed = int(mix.loc[mix["keyed"], "n"].sum()) if not mix.empty else 0
cols[3].metric(
    "idempotency hit rate",
    f"{hits / keyed:.1%}" if keyed else "—",
    help="share of keyed attempts answered with the original receipt",
)
left, right = st.columns(2)
with left:
    st.plotly_chart(
        figures.share_pie(list(bases), list(bases.values()), "Duplicate dispatches by basis"),
        key="dispatch_bases",
    )
with right:
    rev = mix.groupby("revision")["n"].sum() if not mix.empty else None
    st.plotly_chart(
        figures.share_pie(
            list(rev.index) if rev is not None else [],
            [int(x) for x in rev.values] if rev is not None else [],
            "Protocol revision mix (dispatches)",
        ),
        key="dispatch_revisions",
    )
st.plotly_chart(
    figures.series_by(
        mix.groupby(["bucket", "outcome"], as_index=False)["n"].sum() if not mix.empty else mix,
        "outcome",
        "Dispatch outcomes over time",
        data.rollout_actions(ctx.stamp),
    ),
    key="dispatch_outcomes",
)
st.caption(
    "2026-07-28 readiness: that revision has no sessions and no resumption, so a "
    "re-send is only safe with the same idempotency key."
)
st.subheader("Findings")
ui.findings_table(found, key="dispatch_findings")
