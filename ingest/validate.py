"""Contract checks and typed casts, generated as SQL from the contract.

A row's reason is the first rule it breaks, in field order; NULL means the row
is loaded. Reasons name fields and rules, never values: a value in the wrong
field could be a secret.
"""

from __future__ import annotations

from .contract import DERIVED, Field, RecordType

_INT = r"'\s*[-+]?[0-9]+(\.0*)?\s*'"
_EPOCH = r"'\s*[-+]?[0-9]+(\.[0-9]*)?\s*'"
_BOOLS = "('true', 'false', 't', 'f', '1', '0', 'yes', 'no')"


def ts_sql(v: str) -> str:
    """Epoch milliseconds or RFC 3339 text to TIMESTAMPTZ (UTC, milliseconds)."""
    return (
        f"CASE WHEN regexp_full_match({v}, {_EPOCH}) "
        f"THEN CAST(epoch_ms(CAST(TRY_CAST({v} AS DOUBLE) AS BIGINT)) AS TIMESTAMPTZ) "
        f"ELSE date_trunc('millisecond', TRY_CAST({v} AS TIMESTAMPTZ)) END"
    )


def cast_sql(f: Field) -> str:
    v = f"f_{f.name}"
    if f.type == "ts":
        return ts_sql(v)
    if f.type == "int":
        return f"CAST(TRY_CAST(trim({v}) AS DOUBLE) AS BIGINT)"
    if f.type == "float":
        return f"TRY_CAST({v} AS DOUBLE)"
    if f.type == "bool":
        return f"lower(trim({v})) IN ('true', 't', '1', 'yes')"
    return v


def _valid_sql(f: Field) -> str | None:
    v = f"f_{f.name}"
    if f.type == "ts":
        return f"({ts_sql(v)}) IS NOT NULL"
    if f.type == "int":
        return f"regexp_full_match({v}, {_INT})"
    if f.type == "float":
        return f"TRY_CAST({v} AS DOUBLE) IS NOT NULL"
    if f.type == "bool":
        return f"lower(trim({v})) IN {_BOOLS}"
    if f.type == "enum":
        allowed = ", ".join(f"'{e}'" for e in f.enum)
        return f"{v} IN ({allowed})"
    return None


def _rule_text(f: Field) -> str:
    if f.type == "enum":
        return f"{f.name}: not an allowed value"
    want = {
        "ts": "RFC 3339 text or epoch milliseconds",
        "int": "an integer",
        "float": "a number",
        "bool": "true or false",
    }[f.type]
    return f"{f.name}: expected {want}"


def reason_sql(rt: RecordType) -> str:
    """First broken rule of a staged row of type `rt`, or NULL."""
    whens = []
    for f in rt.fields:
        if f.secret:
            continue
        v = f"f_{f.name}"
        if f.required:
            whens.append(
                f"WHEN {v} IS NULL OR trim({v}) = '' THEN 'missing required field {f.name}'"
            )
        valid = _valid_sql(f)
        if valid:
            # Reasons are constants of ours; quotes cannot occur in them.
            whens.append(
                f"WHEN {v} IS NOT NULL AND trim({v}) <> '' AND NOT ({valid}) THEN '{_rule_text(f)}'"
            )
    return "CASE " + " ".join(whens) + " END" if whens else "NULL"


def select_typed(rt: RecordType) -> tuple[list[str], list[str]]:
    """(target columns, select expressions) to insert staged rows into rt.table."""
    cols, exprs = ["file_id", "pos"], ["$file_id", "rowid + 1"]
    for f in rt.stored_fields:
        cols.append(f.name)
        # Empty text means null (CSV), for every type.
        exprs.append(f"CASE WHEN trim(f_{f.name}) = '' THEN NULL ELSE {cast_sql(f)} END")
    for name, _ in DERIVED.get(rt.table, ()):
        cols.append(name)
        exprs.append("seen_session_id")
    if rt.table == "proxy":
        # The header's HMAC stands in for a missing session_hmac.
        i = cols.index("session_hmac")
        exprs[i] = (
            "coalesce(CASE WHEN trim(f_session_hmac) = '' THEN NULL ELSE f_session_hmac END, "
            "f_session_id)"
        )
    return cols, exprs
