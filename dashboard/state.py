"""Global filters and their round trip through the URL, as plain functions.

A link pasted in an incident channel must open the same view, so every filter
lives in the query string: stage, rev, server, client, from, to.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime


@dataclass(frozen=True)
class Filters:
    stage: str | None = None
    revisions: tuple[str, ...] = ()
    servers: tuple[str, ...] = ()
    clients: tuple[str, ...] = ()
    start: datetime | None = None
    end: datetime | None = None
    extra: dict = field(default_factory=dict, compare=False)

    def with_(self, **kw) -> Filters:
        return replace(self, **kw)


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(v for v in (value or "").split(",") if v)


def _parse_ts(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def from_query(params: dict) -> Filters:
    """Filters from st.query_params (unknown or malformed values are ignored)."""
    return Filters(
        stage=params.get("stage") or None,
        revisions=_split(params.get("rev")),
        servers=_split(params.get("server")),
        clients=_split(params.get("client")),
        start=_parse_ts(params.get("from")),
        end=_parse_ts(params.get("to")),
    )


def to_query(f: Filters) -> dict[str, str]:
    out = {}
    if f.stage:
        out["stage"] = f.stage
    if f.revisions:
        out["rev"] = ",".join(f.revisions)
    if f.servers:
        out["server"] = ",".join(f.servers)
    if f.clients:
        out["client"] = ",".join(f.clients)
    if f.start:
        out["from"] = f.start.isoformat().replace("+00:00", "Z")
    if f.end:
        out["to"] = f.end.isoformat().replace("+00:00", "Z")
    return out


def findings_where(f: Filters, alias: str = "f", sess: str = "a") -> tuple[str, dict]:
    """SQL condition and bound values for findings joined to a_sessions."""
    where, args = ["true"], {}
    if f.stage:
        where.append(f"{alias}.stage = $stage")
        args["stage"] = f.stage
    if f.revisions:
        where.append(
            f"list_contains($revs, coalesce({sess}.protocol_version, "
            f"CASE WHEN {alias}.session_hmac IS NULL THEN '2026-07-28' END, "
            "'unknown'))"
        )
        args["revs"] = list(f.revisions)
    if f.servers:
        where.append(f"list_contains($servers, {sess}.server_instance)")
        args["servers"] = list(f.servers)
    if f.clients:
        where.append(f"list_contains($clients, {sess}.client_name)")
        args["clients"] = list(f.clients)
    if f.start:
        where.append(f"{alias}.ts >= $start")
        args["start"] = f.start
    if f.end:
        where.append(f"{alias}.ts <= $end")
        args["end"] = f.end
    return " AND ".join(where), args


def short(h: str | None, n: int = 12) -> str:
    """A session HMAC for display: shortened, never the raw id (there is none stored)."""
    return h[:n] + "…" if isinstance(h, str) and h else ""
