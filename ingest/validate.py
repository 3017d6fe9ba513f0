"""Contract checks and typed casts, generated as SQL from the contract.

Each field is cast once (`t_<name>` from the text `f_<name>`); a row's reason is
the first rule it breaks, in field order, read off the pair: a value present but
not castable is a wrong type. NULL means the row is loaded. Reasons name fields
and rules, never values: a value in the wrong field could be a secret.

A reader may hand over a field already in its contract type (`native`: a Parquet
column of that type) instead of text. Its cast then skips the round trip through
text for the values where that gives the same result, and takes the text path for
the others, so either way a value is loaded, or refused for the same reason, alike.
"""

from __future__ import annotations

from replaygate.core.contract import DERIVED, Field, RecordType
from replaygate.core.timefmt import OUT_OF_RANGE


def ms_sql(t: str) -> str:
    """A TIMESTAMPTZ `t` truncated to its millisecond, as `date_trunc('millisecond', t)`.
    For a TIMESTAMPTZ date_trunc works through ICU's calendar whatever the time zone
    (about 0.22 CPU s per million values, three times the cast from text), so it is left
    to the values it changes: one already on a millisecond (its microseconds, `epoch_us`,
    a whole thousand; an infinity has none and takes date_trunc) is returned as it is.
    `t` appears three times: give a column, not the expression that computes it."""
    return f"CASE WHEN epoch_us({t}) % 1000 = 0 THEN {t} ELSE date_trunc('millisecond', {t}) END"


def ts_sql(v: str, truncated: bool = True) -> str:
    """Epoch milliseconds or RFC 3339 text to TIMESTAMPTZ (UTC, milliseconds; not yet
    truncated to them unless `truncated`: checked_sql truncates the parsed column once,
    ms_sql).

    RFC 3339's lowercase `t`/`z` are read (DuckDB's cast knows only capitals), a leap
    second `23:59:60` is the last millisecond of its minute, an hour of 24 or an offset
    beyond a day is a bad value (the cast would roll them into another day) — the
    rules of core/timefmt.py `parse`."""

    def cast(text: str) -> str:
        leap = f"regexp_replace({text}, '(:59:)60(\\.\\d*)?', '\\159.999')"
        return (
            f"TRY_CAST(CASE WHEN contains({v}, ':60') THEN {leap} ELSE {text} END AS TIMESTAMPTZ)"
        )

    # Text dates have a '-' after the year; checking it is cheaper than a failed cast.
    # The common forms (ending in Z) skip the offset's pattern and the case change.
    parsed = (
        f"CASE WHEN substr({v}, 5, 1) = '-' THEN CASE "
        f"WHEN substr({v}, 12, 2) > '23' THEN NULL "
        f"WHEN suffix({v}, 'Z') AND substr({v}, 11, 1) <> 't' THEN {cast(v)} "
        f"WHEN regexp_matches({v}, '{OUT_OF_RANGE}') THEN NULL "
        f"ELSE {cast(f'upper({v})')} END "
        # try(): an epoch beyond what a timestamp holds is a bad value, not an abort.
        f"ELSE try(CAST(epoch_ms(TRY_CAST(TRY_CAST({v} AS DOUBLE) AS BIGINT)) AS TIMESTAMPTZ)) "
        "END"
    )
    return f"date_trunc('millisecond', {parsed})" if truncated else parsed


# The largest integer a DOUBLE holds exactly: the text path reads an integer through a
# DOUBLE, so beyond it a native integer takes the text path to be rounded alike.
_EXACT_INT = 2**53
# Timestamps whose text is a 4-digit year (the text path reads others differently).
_PLAIN_YEARS = "TIMESTAMPTZ '1000-01-01 00:00:00+00'", "TIMESTAMPTZ '9999-01-01 00:00:00+00'"

# The DuckDB types a reader may hand a field over in (describe's names), per contract
# type; integers narrower than BIGINT are widened.
NATIVE_TYPES = {
    "ts": {"TIMESTAMP WITH TIME ZONE"},
    "int": {"BIGINT", "INTEGER", "SMALLINT", "TINYINT"},
    "float": {"DOUBLE"},
    "bool": {"BOOLEAN"},
}


def can_be_native(f: Field, duckdb_type: str) -> bool:
    """Whether a column of `duckdb_type` may be handed over natively for field `f`
    (the rules on a field's text, length and forbidden characters, need text)."""
    return (
        duckdb_type in NATIVE_TYPES.get(f.type, ())
        and not f.secret
        and f.max_len is None
        and not f.forbid
    )


def _native_cast_sql(f: Field) -> str:
    """A native field's typed value (a timestamp not yet truncated: cast_sql)."""
    v = f"f_{f.name}"
    text = cast_sql(f, f"CAST({v} AS VARCHAR)")
    if f.type == "ts":
        lo, hi = _PLAIN_YEARS
        return f"CASE WHEN {v} >= {lo} AND {v} < {hi} THEN {v} ELSE {text} END"
    if f.type == "int":
        return (
            f"CASE WHEN {v} BETWEEN {-_EXACT_INT} AND {_EXACT_INT} THEN CAST({v} AS BIGINT) "
            f"ELSE {text} END"
        )
    if f.type == "float":
        return f"CASE WHEN isfinite({v}) THEN {v} END"
    return v  # bool


def cast_sql(f: Field, v: str | None = None) -> str:
    """The typed value of field `f` from its text (`f_<name>`, or the expression `v`); a
    timestamp not yet truncated to its millisecond (checked_sql does, ms_sql)."""
    v = v or f"f_{f.name}"
    if f.type == "ts":
        return ts_sql(v, truncated=False)
    if f.type == "int":
        # TRY_CAST to BIGINT rounds 200.5; an integer must not have a fraction.
        # TRY_CAST: 1e30 or NaN is one row's wrong value, never an error for the file.
        d = f"TRY_CAST({v} AS DOUBLE)"
        return f"CASE WHEN {d} = floor({d}) THEN TRY_CAST({d} AS BIGINT) END"
    if f.type == "float":
        # NaN and infinities are not measurements.
        d = f"TRY_CAST({v} AS DOUBLE)"
        return f"CASE WHEN isfinite({d}) THEN {d} END"
    if f.type == "bool":
        return f"TRY_CAST(trim({v}) AS BOOLEAN)"
    return v


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


def reason_sql(rt: RecordType, native: frozenset[str] = frozenset()) -> str:
    """First broken rule of a row holding both f_ (text, or `native`) and t_ (typed)
    columns, or NULL."""
    whens = []
    for f in rt.fields:
        if f.secret:
            continue
        v, t = f"f_{f.name}", f"t_{f.name}"
        if f.required:
            # A native value is never the empty text.
            empty = "" if f.name in native else f" OR {v} = ''"
            whens.append(f"WHEN {v} IS NULL{empty} THEN 'missing required field {f.name}'")
        # Reasons are constants of ours; quotes cannot occur in them.
        if f.type == "ts":
            # Bounds set per ingest (load.py: SET VARIABLE); NULL bounds check nothing.
            whens.append(
                f"WHEN {t} < getvariable('rg_ts_min') OR {t} >= getvariable('rg_ts_max') "
                f"THEN '{f.name}: outside the plausible time range'"
            )
        if f.max_len is not None:
            whens.append(
                f"WHEN length({v}) > {int(f.max_len)} "
                f"THEN '{f.name}: longer than {int(f.max_len)} characters'"
            )
        for ch in f.forbid:
            # The reserved characters are constants of ours, never a quote.
            whens.append(f"WHEN contains({v}, '{ch}') THEN '{f.name}: must not contain {ch}'")
        if f.bounds is not None:
            lo, hi = (float(b) for b in f.bounds)
            whens.append(
                f"WHEN {t} < {lo!r} OR {t} > {hi!r} THEN '{f.name}: outside {lo:g} to {hi:g}'"
            )
        if f.type == "enum":
            allowed = ", ".join(f"'{e}'" for e in f.enum)
            whens.append(f"WHEN {v} IS NOT NULL AND {v} NOT IN ({allowed}) THEN '{_rule_text(f)}'")
        elif f.type != "text":
            whens.append(f"WHEN {v} IS NOT NULL AND {t} IS NULL THEN '{_rule_text(f)}'")
    return "CASE " + " ".join(whens) + " END" if whens else "NULL"


def typed_exprs(
    rt: RecordType, native: frozenset[str] = frozenset(), ts_prefix: str = "t_"
) -> list[str]:
    """`t_<name>` columns for every stored field and derived column of rt (a timestamp
    named `<ts_prefix><name>`)."""
    out = []
    for f in rt.fields:
        if f.secret:
            continue
        expr = _native_cast_sql(f) if f.name in native else cast_sql(f)
        if rt.table == "proxy" and f.name == "session_hmac":
            # The hashed Mcp-Session-Id header stands in for a missing session_hmac.
            expr = "coalesce(nullif(f_session_hmac, ''), f_session_id)"
        out.append(f"{expr} AS {ts_prefix if f.type == 'ts' else 't_'}{f.name}")
    for name, _ in DERIVED.get(rt.table, ()):
        out.append(f"seen_session_id AS t_{name}")
    return out


def checked_sql(rt: RecordType, source: str, native: frozenset[str] = frozenset()) -> str:
    """Rows of `source` with typed columns and their reason (text columns dropped);
    `native`: the fields `source` holds in their contract type (can_be_native). A
    timestamp is parsed in one projection and truncated to its millisecond in the next
    (ms_sql names the parsed value three times: a column, not the parse again)."""
    ts = [f.name for f in rt.fields if f.type == "ts" and not f.secret]
    typed = f"(SELECT *, {', '.join(typed_exprs(rt, native, 'p_'))} FROM {source})"
    if ts:
        # EXCLUDE, not REPLACE: the Spark ingest runs this SQL too (`* EXCEPT`).
        truncated = ", ".join(f"{ms_sql(f'p_{n}')} AS t_{n}" for n in ts)
        excluded = ", ".join(f"p_{n}" for n in ts)
        typed = f"(SELECT * EXCLUDE ({excluded}), {truncated} FROM {typed})"
    return f"""
    SELECT * EXCLUDE ({", ".join(f"f_{f.name}" for f in rt.fields)}),
        {reason_sql(rt, native)} AS reason
    FROM {typed}"""


def target_columns(rt: RecordType) -> tuple[list[str], list[str]]:
    """(table columns, select expressions over a checked relation with `pos`)."""
    cols, exprs = ["file_id", "pos"], ["$file_id", "pos"]
    for f in rt.stored_fields:
        cols.append(f.name)
        exprs.append(f"t_{f.name}")
    for name, _ in DERIVED.get(rt.table, ()):
        cols.append(name)
        exprs.append(f"t_{name}")
    return cols, exprs
