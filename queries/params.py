"""Configuration values as bound SQL parameters."""

from __future__ import annotations

from typing import Any

from replaygate.core.config import Config

from .catalog import Query
from .gatedefs import GATES, min_samples


def glob_to_like(pattern: str) -> str:
    """An allow-list entry (exact or * glob) as a LIKE pattern with backslash escapes."""
    escaped = pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%")


# With no allow-list configured, only loopback origins are allowed (any port, http or https).
LOOPBACK_ORIGINS = tuple(
    f"{scheme}://{host}{port}"
    for scheme in ("http", "https")
    for host in ("localhost", "127.0.0.1", "[::1]")
    for port in ("", ":*")
)


def allowlist_note(config: Config) -> str | None:
    """What `ingest` and `gates` say once when no Origin allow-list is configured."""
    if config.origin_allowlist is not None:
        return None
    return (
        "origin allow-list not configured: only loopback origins (localhost, 127.0.0.1, "
        "[::1]) are allowed, and a stage that saw other origins cannot pass "
        "invalid_origin_rejection (set origin_allowlist in replaygate.toml)"
    )


def origin_globs(config: Config) -> tuple[str, ...]:
    """The allow-list in force: the configured one, else the loopback origins."""
    return LOOPBACK_ORIGINS if config.origin_allowlist is None else config.origin_allowlist


def from_config(config: Config) -> dict[str, Any]:
    min_samples(config)  # unknown gate names fail here, before any query runs
    return {
        "recovery_threshold_s": config.recovery_threshold_s,
        "reinit_window_s": config.reinit_window_s,
        "retry_window_s": config.retry_window_s,
        "resend_window_s": config.resend_window_s,
        "reconnect_budget_qps": config.reconnect_budget_qps,
        "origin_patterns": [glob_to_like(p) for p in origin_globs(config)],
        "origin_configured": config.origin_allowlist is not None,
        "dead_statuses": list(config.dead_session_statuses),
        **probe_counted(config),
    }


# The facts the gate facts hold (queries/sql/facts/gate_facts.sql, read as gate_facts()).
FACTS = (
    "delivered_events",
    "completed_streams",
    "write_dispatches",
    "recoveries",
    "sized_answers",
    "proxy_records",
    "findings",
)


def probe_counted(config: Config) -> dict[str, list[str]]:
    """What of `replaygate probe`'s units the gates count (`probe_gates`): the gate facts
    (`probe_facts`) and the findings of which detectors (`probe_detectors`). For
    `replay`, those of the replay-integrity gates: their samples (their meters) and their
    detectors' findings."""
    if config.probe_gates == "none":
        return {"probe_facts": [], "probe_detectors": []}
    chosen = [g for g in GATES if config.probe_gates == "all" or g.replay]
    facts = {g.meter for g in chosen if g.meter}
    if config.probe_gates == "all":
        facts.update(FACTS)
    return {
        "probe_facts": sorted(facts),
        "probe_detectors": sorted({d for g in chosen for d in g.detectors}),
    }


def bind(query: Query, values: dict[str, Any]) -> dict[str, Any]:
    """Only the parameters a query declares (DuckDB rejects unused ones)."""
    return {name: values[name] for name in query.params}
