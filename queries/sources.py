"""The data-to-detector matrix: which detectors a set of sources lets run, read from the
detectors' `needs` headers (so it cannot drift from what the runner does), and what client
inbox receipts add on top of a server's own records."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import cannottell, catalog

PROXY_ONLY = ("proxy", "rollout")
SERVER_SIDE = ("sessions", "streams", "events", "dispatches", "proxy", "rollout")
ALL = (*SERVER_SIDE, "inbox")

# What a client's inbox receipts show that the server's records cannot.
CLIENT_ADDS = {
    "replay_gap": "the client's own view: events it never accepted, also those lost "
    "after the server sent them",
    "silent_truncation": "the accepted result itself",
    "cross_stream_acceptance": "acceptance on the client (the server sees only its replays)",
    "priming_lost": "whether the client held a cursor (the server sees what it produced)",
    "duplicate_delivery_accepted": "everything: only the client sees acceptance",
    "duplicate_dispatch": "basis `inbox`; evidence to confirm a `suspected` re-send",
    "session_after_terminal": "receipts accepted after expiry",
    "undelivered_result": "basis `client`: an answer the client never received, also one "
    "the server and the proxy saw go out whole",
}


def _runs(query: catalog.Query, sources: Iterable[str]) -> bool:
    return not cannottell.missing_needs(query, dict.fromkeys(sources, 1))


def matrix() -> list[dict[str, Any]]:
    rows = []
    for name, q in sorted(catalog.detectors().items()):
        rows.append(
            {
                "detector": name,
                "proxy_only": _runs(q, PROXY_ONLY),
                "server_side": _runs(q, SERVER_SIDE),
                "with_inbox": _runs(q, ALL),
                "client_adds": CLIENT_ADDS.get(name, ""),
            }
        )
    return rows


def render_markdown() -> str:
    yes = {True: "yes", False: "—"}
    lines = [
        "| detector | proxy logs alone | recorder + proxy logs | what client receipts add |",
        "|---|---|---|---|",
    ]
    for r in matrix():
        lines.append(
            f"| `{r['detector']}` | {yes[r['proxy_only']]} | {yes[r['server_side']]} "
            f"| {r['client_adds'] or '—'} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m replaygate.queries.sources
    print(render_markdown(), end="")
