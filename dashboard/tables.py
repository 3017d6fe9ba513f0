"""The Data page's tables as people read them (plain functions, tested without
Streamlit): headers in words, counts with separators, sizes and durations in human
units, times as UTC text. The named queries keep their column names for code; only
what is shown is renamed here."""

from __future__ import annotations

from typing import Any

import pandas as pd

from . import fmt


def record_types(tables: list[dict[str, Any]]) -> pd.DataFrame:
    """`ingest.status`'s tables: one row per record type."""
    return pd.DataFrame(
        {
            "record type": [t["record_type"] for t in tables],
            "table": [t["table"] for t in tables],
            "rows": [fmt.count(t["rows"]) for t in tables],
            "first record": [fmt.when(t["first"]) for t in tables],
            "last record": [fmt.when(t["last"]) for t in tables],
        }
    )


def files(df: pd.DataFrame) -> pd.DataFrame:
    """The `files` query: one row per ingested file."""
    return pd.DataFrame(
        {
            "file": df["path"],
            "format": df["format"],
            "size": df["size"].map(fmt.nbytes),
            "rows loaded": df["rows_loaded"].map(fmt.count),
            "rows quarantined": df["rows_quarantined"].map(fmt.count),
            "ingested (UTC)": df["ingested_at"].map(fmt.when),
            "status": df["status"],
            "content sha256": df["sha256"],
        }
    )


def quarantine_reasons(reasons: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "reason": [r["reason"] for r in reasons],
            "rows": [fmt.count(r["rows"]) for r in reasons],
        }
    )


def quarantine(df: pd.DataFrame) -> pd.DataFrame:
    """The `quarantine` query: the rejected rows with where they came from."""
    return pd.DataFrame(
        {
            "file": df["path"],
            "line": df["line"].map(fmt.count),
            "row": df["row"].map(fmt.count),
            "record type": df["record_type"].map(fmt.blank),
            "reason": df["reason"],
        }
    )


def coverage(df: pd.DataFrame) -> pd.DataFrame:
    """The `coverage` query: what each detector could judge, how much it found, its time."""
    return pd.DataFrame(
        {
            "detector": df["detector"],
            "status": df["status"],
            "findings": df["rows"].map(fmt.count),
            "run time": df["seconds"].map(lambda s: fmt.duration(s) if s else ""),
        }
    )


def cannot_tell(df: pd.DataFrame) -> pd.DataFrame:
    """The `cannot_tell` query: units no verdict could be given for, and why."""
    return pd.DataFrame(
        {
            "detector": df["detector"],
            "file": df["file"],
            "fact it cannot show": df["cannot_show"],
            "units": df["units"].map(fmt.count),
            "units by stage": df["by_stage"],
        }
    )
