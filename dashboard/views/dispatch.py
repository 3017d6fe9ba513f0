"""Dispatch & idempotency: duplicate side effects, conflicts, missing keys, revision mix."""

import json
from collections import Counter

import streamlit as st

from replaygate.dashboard import data, figures, fmt, ui

page = ui.gate_page("dispatch", "Dispatch & idempotency")
ctx, f, found, counts = page.ctx, page.ctx.filters, page.found, page.counts
bucket, bucket_name = ui.bucket(ctx)
mix = data.dispatch_mix(ctx.stamp, f, bucket)
dups = found[found["detector"] == "duplicate_dispatch"] if not found.empty else found
bases = (
    Counter(json.loads(d).get("basis", "?") for d in dups["detail"])
    if not dups.empty
    else Counter()
)
cols = page.tiles(3)
ui.count_metric(cols[0], "Key conflicts (409)", counts, ("idempotency_conflict",), ctx)
ui.count_metric(cols[1], "Conflicts executed", counts, ("conflict_executed",), ctx)
hits = int(mix.loc[mix["outcome"] == "idempotency_hit", "n"].sum()) if not mix.empty else 0
keyed = int(mix.loc[mix["keyed"], "n"].sum()) if not mix.empty else 0
cols[2].metric(
    "Idempotency hit rate",
    f"{hits / keyed * 100:.1f} %" if keyed else "—",
    help="share of keyed attempts answered with the original receipt",
)
cols[2].caption(f"{fmt.count(hits)} of {fmt.count(keyed)} keyed dispatches")
left, right = st.columns(2)
with left:
    st.plotly_chart(
        figures.share_pie(
            [b for b, _ in bases.most_common()],
            [n for _, n in bases.most_common()],
            "Duplicate dispatches by basis",
        ),
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
        y="dispatches",
        colors=figures.OUTCOME_COLORS,
        bucket=bucket_name,
    ),
    key="dispatch_outcomes",
)
st.caption(
    "2026-07-28 readiness: that revision has no sessions and no resumption, so a "
    "re-send is only safe with the same idempotency key."
)
page.findings_section()
