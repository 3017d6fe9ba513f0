"""Global filters and their round trip through the URL, as plain functions.

A link pasted in an incident channel must open the same view, so every filter
lives in the query string: stage, rev, server, client, range, from, to. Values
from the URL are validated against the data; what had to be corrected is said, with
the value quoted inert (`quoted`): anyone can craft a link.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from replaygate.api import Filters, escape, parse_iso

KEYS = ("stage", "rev", "server", "client", "range", "from", "to")
# Time presets: URL value -> (label, length; None = special).
PRESETS = {
    "all": ("All data", None),
    "stage": ("Stage window", None),
    "6h": ("Last 6 h", timedelta(hours=6)),
    "1h": ("Last 1 h", timedelta(hours=1)),
    "15m": ("Last 15 min", timedelta(minutes=15)),
    "custom": ("Custom", None),
}

__all__ = ["Filters", "from_query", "to_query", "short", "PRESETS", "parse_ts"]


# A value from the URL is quoted in a note at most this long: a link is attacker text.
QUOTED = 60


def quoted(value: object) -> str:
    """A value from the URL as it is quoted in a note (shown as Streamlit Markdown):
    shortened, on one line, bidi and zero-width characters shown, every Markdown,
    Streamlit directive and math character escaped (queries/escape.py)."""
    text = escape.one_line(value)
    if len(text) > QUOTED:
        text = text[:QUOTED] + "…"
    return escape.md_text(text, streamlit=True)


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(v for v in (value or "").split(",") if v)


def parse_ts(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        ts = parse_iso(value)
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def from_query(
    params: dict,
    stages: dict | None = None,
    options: dict | None = None,
) -> tuple[Filters, str, list[str]]:
    """(filters, time preset, notes) from st.query_params.

    `stages` maps stage -> (start, end or None); `options` holds the known revisions,
    servers, clients and the data span. Unknown values are dropped, an inverted time range
    is swapped, a range outside the data is clamped, and each correction gets a note.
    """
    notes: list[str] = []
    # None: the stages are not known here (nothing to validate against); {}: none exist,
    # so a stage in the URL is unknown like any other.
    known_stages = stages is not None
    stages = stages or {}
    options = options or {}
    stage = params.get("stage") or None
    if stage is not None and known_stages and stage not in stages:
        notes.append(f"No stage named “{quoted(stage)}”: showing all stages.")
        stage = None

    def known(key: str, opt: str, label: str) -> tuple[str, ...]:
        wanted = _split(params.get(key))
        allowed = options.get(opt)
        if allowed is None:
            return wanted
        bad = [v for v in wanted if v not in allowed]
        if bad:
            notes.append(f"Unknown {label} ignored: {quoted(', '.join(bad))}.")
        return tuple(v for v in wanted if v in allowed)

    revisions = known("rev", "revisions", "protocol revision")
    servers = known("server", "servers", "server instance")
    clients = known("client", "clients", "client")
    lo, hi = options.get("span", (None, None))
    preset = params.get("range") or ("custom" if params.get("from") or params.get("to") else "all")
    if preset not in PRESETS:
        notes.append(f"Unknown time range “{quoted(preset)}”: showing all data.")
        preset = "all"
    start = end = None
    if preset == "custom":
        start, end = parse_ts(params.get("from")), parse_ts(params.get("to"))
        for key, val in (("from", start), ("to", end)):
            if params.get(key) and val is None:
                notes.append(f"“{key}” is not a timestamp: ignored.")
        if start and end and start > end:
            start, end = end, start
            notes.append("The time range was inverted: from and to swapped.")
        if lo is not None and hi is not None:
            if start and not (lo <= start <= hi):
                notes.append("“from” lies outside the data: moved to its edge.")
                start = min(max(start, lo), hi)
            if end and not (lo <= end <= hi):
                notes.append("“to” lies outside the data: moved to its edge.")
                end = min(max(end, lo), hi)
            if start == lo:
                start = None
            if end == hi:
                end = None
    elif preset == "stage":
        if stage is None:
            notes.append("“Stage window” needs a stage: showing all data.")
            preset = "all"
        else:
            start, end = stages[stage]
            end = end or None
    elif PRESETS[preset][1] is not None and hi is not None:
        # “Now” is the newest record: the data may lag the clock (see Data freshness).
        end = None
        start = hi - PRESETS[preset][1]
    f = Filters(
        stage=stage,
        revisions=revisions,
        servers=servers,
        clients=clients,
        start=start,
        end=end,
    )
    return f, preset, notes


def to_query(f: Filters, preset: str = "custom") -> dict[str, str]:
    out = {}
    if f.stage:
        out["stage"] = f.stage
    if f.revisions:
        out["rev"] = ",".join(f.revisions)
    if f.servers:
        out["server"] = ",".join(f.servers)
    if f.clients:
        out["client"] = ",".join(f.clients)
    if preset not in ("custom", "all"):
        out["range"] = preset
    elif preset == "custom":
        if f.start:
            out["from"] = _iso(f.start)
        if f.end:
            out["to"] = _iso(f.end)
    return out


def short(h: str | None, n: int = 12) -> str:
    """A session HMAC for display: shortened, never the raw id (there is none stored)."""
    return h[:n] + "…" if isinstance(h, str) and h else ""
