"""Incremental analysis of `duplicate_dispatch`, whose findings are local to groups of
dispatches rather than to sessions.

A finding of it depends only on the rows of one group: one idempotency key (basis
`idempotency_key`), one sender, tool and payload (`retry`; the sender is the principal
across its sessions), one caller, tool and payload (`suspected`), or one session's
receipts (`inbox`). After an append, the groups that hold a changed dispatch are
recomputed from all of their rows, wherever those rows are in the fleet; every other
finding stands. A dispatch has changed when its session has new rows of any kind (its
streams and proxy requests decide whether it broke), when it is itself new, or when it
has no session and a new sessionless proxy request names its principal.
Called from incremental.analyse inside its transaction; any finding of a basis this does
not know makes the run fall back to a full analysis.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import duckdb

from replaygate.core.db import one_row

from . import cannottell

DETECTORS = {"duplicate_dispatch"}


class Fallback(Exception):
    """The incremental run cannot vouch for its result: run a full analysis."""


BASES = ("idempotency_key", "retry", "suspected", "inbox")

# The changed dispatches, with the keys of the groups they belong to.
_CHANGED = """
CREATE OR REPLACE TEMP TABLE rg_dd_changed AS
SELECT d.file_id, d.pos, d.idempotency_key, d.tool_name, d.payload_digest,
       dispatch_sender(d.principal, d.session_hmac) AS sender,
       dispatch_caller(d.principal, d.session_hmac) AS caller
FROM {dispatches} d
WHERE d.session_hmac IN (SELECT session_hmac FROM rg_affected)
   OR EXISTS (SELECT 1 FROM analysis_pending_rows r
               WHERE r.tbl = 'dispatches' AND r.file_id = d.file_id AND d.pos > r.from_pos)
   OR (d.session_hmac IS NULL AND d.principal IN (
        SELECT p.principal FROM {proxy} p
        JOIN analysis_pending_rows r
          ON r.tbl = 'proxy' AND p.file_id = r.file_id AND p.pos > r.from_pos
        WHERE p.session_hmac IS NULL AND p.principal IS NOT NULL))
"""

# The groups a changed dispatch `d` shares with dispatch `a` beside its key: by sender
# (`retry`) or by caller (`suspected`), with the same tool and payload (`eq`: `=`, or
# `IS NOT DISTINCT FROM` for a null-safe superset).
_BY = {"retry": ("sender", "dispatch_sender"), "suspected": ("caller", "dispatch_caller")}


def _same_group(basis: str, a: str, eq: str) -> str:
    key, fn = _BY[basis]
    return (
        f"{fn}({a}.principal, {a}.session_hmac) = k.{key}"
        f" AND {a}.tool_name {eq} k.tool_name AND {a}.payload_digest {eq} k.payload_digest"
    )


# Every row of those groups (null-safe, so a superset of what the detector joins).
_SCOPE = "\nUNION\n".join(
    [
        "CREATE OR REPLACE TEMP TABLE rg_dd_scope AS\n"
        "SELECT d.file_id, d.pos FROM {dispatches} d\n"
        "SEMI JOIN rg_dd_changed k ON d.idempotency_key = k.idempotency_key",
        *(
            "SELECT d.file_id, d.pos FROM {dispatches} d\n"
            f"SEMI JOIN rg_dd_changed k ON {_same_group(b, 'd', 'IS NOT DISTINCT FROM')}"
            for b in _BY
        ),
        "SELECT file_id, pos FROM rg_dd_changed",
    ]
)

# Does a finding (of `{t}`) belong to a group that holds a changed dispatch? Only those
# are replaced: the scope also holds rows of other groups, incompletely.
_CHANGED_GROUP = "\n".join(
    [
        "CASE json_extract_string({t}.detail, '$.basis')",
        "  WHEN 'inbox' THEN {t}.session_hmac IN (SELECT session_hmac FROM rg_affected)",
        "  WHEN 'idempotency_key' THEN {t}.idempotency_key IN (",
        "      SELECT idempotency_key FROM rg_dd_changed)",
        *(
            f"  WHEN '{b}' THEN {{t}}.dispatch_id IN (SELECT a.dispatch_id FROM {{dispatches}} a"
            f" SEMI JOIN rg_dd_changed k ON {_same_group(b, 'a', '=')})"
            for b in _BY
        ),
        "END",
    ]
)


def rerun(
    con: duckdb.DuckDBPyConnection,
    name: str,
    sql: str,
    bound: dict[str, Any],
    plan: cannottell.Plan | None,
    base: Any,
) -> None:
    """Replace `name`'s findings of the changed groups. `base(table)`: the database's own
    table (not a temporary view of the same name)."""
    if one_row(con.execute("SELECT count(*) FROM a_blind_dispatches"))[0]:
        # A dispatch file without digests beside one with them: the units it leaves
        # undecided are counted per file, not per group.
        raise Fallback(f"{name}: dispatch files without payload digests beside others")
    tables = {t: base(t) for t in ("dispatches", "proxy", "inbox")}
    con.execute(_CHANGED.format(**tables))
    con.execute(_SCOPE.format(**tables))
    excluded = dict(plan.exclude) if plan else {}

    def view(table: str, where: str) -> None:
        ids = excluded.pop(table, [])
        if ids:
            where += f" AND file_id NOT IN ({', '.join(str(int(i)) for i in ids)})"
        con.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT * FROM {base(table)} t "
                    f"WHERE {where}")  # fmt: skip

    view("dispatches", "(file_id, pos) IN (SELECT file_id, pos FROM rg_dd_scope)")
    view("inbox", "session_hmac IN (SELECT session_hmac FROM rg_affected)")
    made = ["dispatches", "inbox"]
    if plan is not None:
        made += cannottell.shadow(con, dataclasses.replace(plan, exclude=excluded))
    try:
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE rg_new AS SELECT $detector AS detector, * FROM ({sql})",
            bound,
        )
    finally:
        cannottell.unshadow(con, made)
    known = ", ".join(f"'{b}'" for b in BASES)
    for table, where in (("rg_new", ""), (f"{base('findings')}", "AND detector = $d")):
        odd = one_row(
            con.execute(
                f"""SELECT count(*) FROM {table}
                    WHERE coalesce(json_extract_string(detail, '$.basis'), '?')
                          NOT IN ({known}) {where}""",
                {"d": name} if where else {},
            )
        )[0]
        if odd:
            raise Fallback(f"{name}: a finding of a basis the incremental run does not know")
    changed = _CHANGED_GROUP.format(t="f", dispatches=tables["dispatches"])
    con.execute(
        f"DELETE FROM {base('findings')} f WHERE f.detector = $d AND {changed}", {"d": name}
    )
    con.execute(f"INSERT INTO {base('findings')} BY NAME SELECT * FROM rg_new f WHERE {changed}")
    con.execute("DROP TABLE IF EXISTS rg_dd_changed")
    con.execute("DROP TABLE IF EXISTS rg_dd_scope")
