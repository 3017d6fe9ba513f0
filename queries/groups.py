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
from collections.abc import Callable
from typing import Any

import duckdb

from replaygate.core.db import one_row

from . import cannottell

DETECTORS = {"duplicate_dispatch"}


class Fallback(Exception):
    """The incremental run cannot vouch for its result: run a full analysis."""


BASES = ("idempotency_key", "retry", "suspected", "inbox")

# The changed dispatches, with the keys of the groups they belong to: the pending
# sessions' (`{scoped}`, their rows copied already: every new row with a session is of a
# pending session), and those without a session that are new (`{new_dispatches}`, the new
# rows copied already) or whose principal has a new sessionless proxy request
# (`{new_proxy}`). Rows are found by a few columns, then fetched by row id; a row found
# twice is one (DISTINCT below).
_CHANGED = """
CREATE OR REPLACE TEMP TABLE rg_dd_changed AS
WITH d AS (
    SELECT * FROM {scoped}
    UNION ALL
    SELECT * FROM {new_dispatches} WHERE session_hmac IS NULL
    UNION ALL
    SELECT * FROM {dispatches} WHERE rowid IN (
        SELECT rowid FROM {dispatches}
        WHERE session_hmac IS NULL AND principal IN (
            SELECT principal FROM {new_proxy}
            WHERE session_hmac IS NULL AND principal IS NOT NULL))
)
SELECT DISTINCT d.file_id, d.pos, d.idempotency_key, d.tool_name, d.payload_digest,
       dispatch_sender(d.principal, d.session_hmac) AS sender,
       dispatch_caller(d.principal, d.session_hmac) AS caller
FROM d
"""

# The groups a changed dispatch `d` shares with dispatch `a` beside its key: by sender
# (`retry`) or by caller (`suspected`), with the same tool and payload.
_BY = {"retry": ("sender", "dispatch_sender"), "suspected": ("caller", "dispatch_caller")}


def _same_group(basis: str, a: str) -> str:
    key, fn = _BY[basis]
    return (
        f"{fn}({a}.principal, {a}.session_hmac) = k.{key}"
        f" AND {a}.tool_name = k.tool_name AND {a}.payload_digest = k.payload_digest"
    )


# Every row of those groups, and some of others: the rows of a changed key, and those of a
# changed dispatch's tool and payload (a superset of its sender's and caller's groups,
# null-safe by the hash), found in one pass over a few columns, then fetched by row id.
_SCOPE = """
CREATE OR REPLACE TEMP TABLE rg_dd_rows AS
SELECT * FROM {dispatches} WHERE rowid IN (
    SELECT rowid FROM {dispatches}
    WHERE idempotency_key IN (SELECT idempotency_key FROM rg_dd_changed)
       OR hash(tool_name, payload_digest) IN (
           SELECT hash(tool_name, payload_digest) FROM rg_dd_changed))
"""

# The first attempts of the changed re-send groups (the findings' dispatch_id of bases
# `retry` and `suspected`): every row of such a group is in rg_dd_rows.
_FIRSTS = "CREATE OR REPLACE TEMP TABLE rg_dd_firsts AS\n" + "\nUNION ALL\n".join(
    f"SELECT '{b}' AS basis, a.dispatch_id FROM rg_dd_rows a"
    f" SEMI JOIN rg_dd_changed k ON {_same_group(b, 'a')}"
    for b in _BY
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
            f"  WHEN '{b}' THEN {{t}}.dispatch_id IN ("
            f"SELECT dispatch_id FROM rg_dd_firsts WHERE basis = '{b}')"
            for b in _BY
        ),
        "END",
    ]
)

# The rows of the other tables the detector reads that bear on the scope's dispatches:
# their sessions' streams and inbox receipts (the inbox basis is of the pending sessions
# alone), and the proxy requests of their sessions, or of their principal for those
# without a session (a failed request of the same session, else principal, and request id).
_READS = {
    "a_streams": "session_hmac IN (SELECT session_hmac FROM rg_dd_rows)",
    "proxy": """session_hmac IN (SELECT session_hmac FROM rg_dd_rows)
                OR principal IN (SELECT principal FROM rg_dd_rows WHERE session_hmac IS NULL)""",
}


def rerun(
    con: duckdb.DuckDBPyConnection,
    name: str,
    sql: str,
    bound: dict[str, Any],
    plan: cannottell.Plan | None,
    base: Callable[[str], str],
    scoped: Callable[[str], str],
    new: Callable[[str], str],
) -> None:
    """Replace `name`'s findings of the changed groups. `base(table)`: the database's own
    table (not a temporary view of the same name); `scoped(table)`: the copy of the
    pending sessions' rows of it (incremental.py's scope); `new(table)`: the copy of its
    new rows (incremental.py's delta)."""
    if one_row(con.execute("SELECT count(*) FROM a_blind_dispatches"))[0]:
        # A dispatch file without digests beside one with them: the units it leaves
        # undecided are counted per file, not per group.
        raise Fallback(f"{name}: dispatch files without payload digests beside others")
    tables = {t: base(t) for t in ("dispatches", "proxy")}
    con.execute(
        _CHANGED.format(
            scoped=scoped("dispatches"),
            new_dispatches=new("dispatches"),
            new_proxy=new("proxy"),
            **tables,
        )
    )
    con.execute(_SCOPE.format(**tables))
    con.execute(_FIRSTS)
    excluded = dict(plan.exclude) if plan else {}

    def view(table: str, source: str, where: str = "true") -> None:
        ids = excluded.pop(table, [])
        if ids:
            where += f" AND file_id NOT IN ({', '.join(str(int(i)) for i in ids)})"
        con.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT * FROM {source} t "
                    f"WHERE {where}")  # fmt: skip

    view("dispatches", "rg_dd_rows")
    view("inbox", scoped("inbox"))
    for table, where in _READS.items():
        view(table, base(table), where)
    made = ["dispatches", "inbox", *_READS]
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
    findings = base("findings")
    odd = one_row(
        con.execute(
            f"""SELECT count(*) FROM (SELECT detail FROM rg_new
                                      UNION ALL
                                      SELECT detail FROM {findings} WHERE detector = $d)
                WHERE coalesce(json_extract_string(detail, '$.basis'), '?') NOT IN ({known})""",
            {"d": name},
        )
    )[0]
    if odd:
        raise Fallback(f"{name}: a finding of a basis the incremental run does not know")
    changed = _CHANGED_GROUP.format(t="f")
    con.execute(f"DELETE FROM {findings} f WHERE f.detector = $d AND {changed}", {"d": name})
    con.execute(f"INSERT INTO {findings} BY NAME SELECT * FROM rg_new f WHERE {changed}")
    for t in ("rg_dd_changed", "rg_dd_rows", "rg_dd_firsts"):
        con.execute(f"DROP TABLE IF EXISTS {t}")
