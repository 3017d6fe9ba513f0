"""Configuration values as bound SQL parameters."""

from __future__ import annotations

from typing import Any

from replaygate.ingest.config import Config

from .catalog import Query


def glob_to_like(pattern: str) -> str:
    """An allow-list entry (exact or * glob) as a LIKE pattern with backslash escapes."""
    escaped = pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%")


def from_config(config: Config) -> dict[str, Any]:
    from .gates import min_samples

    min_samples(config)  # unknown gate names fail here, before any query runs
    return {
        "recovery_threshold_s": config.recovery_threshold_s,
        "reinit_window_s": config.reinit_window_s,
        "retry_window_s": config.retry_window_s,
        "resend_window_s": config.resend_window_s,
        "reconnect_budget_qps": config.reconnect_budget_qps,
        "origin_patterns": [glob_to_like(p) for p in config.origin_allowlist],
    }


def bind(query: Query, values: dict[str, Any]) -> dict[str, Any]:
    """Only the parameters a query declares (DuckDB rejects unused ones)."""
    return {name: values[name] for name in query.params}
