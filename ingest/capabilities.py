"""Source capabilities: which facts each ingested file can show.

A detector may claim that something did not happen only when its sources could have
shown it (shared rule "cannot tell"). A *fact* is an optional field of a record type,
named `<table>.<field>` (`proxy.principal`, `streams.last_acked_event_id`), plus
`proxy.initialize`: the log lets an initialize be seen (the new session's
`Mcp-Session-Id` in the answer, the flag logged in its place, or the JSON-RPC method).

A file shows a fact when one of its rows has a value for it, or — for nginx and Envoy
logs, whose keys every user names differently — when its lines carry a key the adapter
reads for it (an unset nginx variable is logged as "", so the key tells what the
log_format can show even where no value happened). Caddy logs every request header, but
its log filter may delete the session id: that and the initialize are read from its rows.
An initialize read from the answer's new session id needs the request's session id to be
visible (a request known to carry none), so a log that keeps it out shows no initialize.
The facts are stored per file in `file_facts`; queries/runner.py reads them against
each detector's `-- facts:` header.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb

from replaygate.core.contract import BY_TABLE, RECORD_TYPES
from replaygate.core.db import one_row

from .adapters import PROBE_PRINCIPAL

INITIALIZE = "proxy.initialize"


def optional_facts(table: str) -> list[str]:
    rt = BY_TABLE[table]
    return [f"{table}.{f.name}" for f in rt.stored_fields if not f.required]


def all_facts() -> list[str]:
    out = [f for rt in RECORD_TYPES for f in optional_facts(rt.table)]
    return out + [INITIALIZE]


def proxy_facts() -> list[str]:
    return optional_facts("proxy") + [INITIALIZE]


def fact_of_spec(field: str, key: str, fact: str | None = None) -> str | None:
    """The fact an nginx/Envoy adapter key shows (the new-session keys show an
    initialize only with a key for the request's session id: from_keys); `fact`: the one
    a key that fills no field by itself shows (a value read with others)."""
    if fact:
        return fact
    if key in ("new_session_id", "new_session"):
        return INITIALIZE
    if field in ("session_id", "session_hmac"):
        return "proxy.session_hmac"
    if field in ("ts", "method", "status") or not field:
        return None
    return f"proxy.{field}"


def from_keys(present: set[str], shapes: set[str], user_fields: dict[str, Any]) -> set[str]:
    """Facts a proxy log of these shapes shows by its format and the keys its lines carry."""
    from .adapters import PROXIES

    out: set[str] = set()
    for proxy in PROXIES.values():
        if proxy.name not in shapes:
            continue
        out.update(proxy.shows)
        for spec in proxy.specs:
            fact = fact_of_spec(spec.field, spec.key, spec.fact)
            keys = spec.keys(user_fields.get(proxy.name, {}).get(spec.key))
            if fact and any(k.path in present for k in keys):
                out.add(fact)
    if "proxy.session_hmac" not in out:
        # An answer's new session id says "initialize" only of a request known to carry
        # none (adapters._infer_initialize): a log without the request's id cannot show it.
        out.discard(INITIALIZE)
    return out


def record(
    con: duckdb.DuckDBPyConnection,
    file_id: int,
    tables: list[str],
    key_facts: set[str],
    grown: bool = False,
    fresh: bool = False,
) -> None:
    """Store the facts a file shows: by its keys (kept from earlier reads of a grown file)
    and by the values of all its rows. `grown`: rows were only added, so what its earlier
    rows showed still holds and only the facts not shown yet are looked for. `fresh`: the
    file id was drawn for this load and has no facts yet, so none are deleted or looked
    up (two statements of each new file, paid by every batch of a load in batches)."""
    if not grown and not fresh:
        con.execute("DELETE FROM file_facts WHERE file_id = $f AND how = 'values'", {"f": file_id})
    known: set[str] = set()
    if not fresh:
        known = {
            r[0]
            for r in con.execute(
                "SELECT fact FROM file_facts WHERE file_id = $f AND how = 'values'",
                {"f": file_id},
            ).fetchall()
        }
    rows = [(fact, "keys") for fact in sorted(key_facts)]
    for table in tables:
        facts = [f for f in optional_facts(table) if f not in known]
        found: list[str] = []
        if facts:
            counts = ", ".join(sql for _, sql in value_checks(table, facts))
            shown = one_row(
                con.execute(f"SELECT {counts} FROM {table} WHERE file_id = $f", {"f": file_id})
            )
            found = [fact for fact, yes in zip(facts, shown, strict=True) if yes]

        def seen() -> bool:
            return bool(
                one_row(
                    con.execute(
                        f"SELECT {INITIALIZE_SEEN} FROM proxy WHERE file_id = $f", {"f": file_id}
                    )
                )[0]
            )

        if table == "proxy" and shows_initialize(set(found), key_facts, known, seen):
            found.append(INITIALIZE)
        rows += [(fact, "values") for fact in found]
    _add(con, file_id, rows)


def _add(con: duckdb.DuckDBPyConnection, file_id: int, rows: list[tuple[str, str]]) -> None:
    """Store (fact, how) rows of a file, in order, each fact once: a fact it already has,
    or one earlier in `rows`, is left out. One statement for the file: a statement per
    fact cost about a millisecond of CPU each, 186 of them for the 1M fleet (0.19 CPU s),
    paid again by every batch of a load in batches."""
    first: dict[str, str] = {}
    for fact, how in rows:
        first.setdefault(fact, how)
    if not first:
        return
    con.execute(
        """INSERT INTO file_facts
           SELECT $f, r.fact, r.how
           FROM (SELECT unnest($facts) AS fact, unnest($hows) AS how) AS r
           WHERE NOT EXISTS (
               SELECT 1 FROM file_facts ff WHERE ff.file_id = $f AND ff.fact = r.fact)""",
        {"f": file_id, "facts": list(first), "hows": list(first.values())},
    )


def value_checks(table: str, facts: list[str] | None = None) -> list[tuple[str, str]]:
    """(fact, an SQL aggregate over a file's rows of `table`: whether one shows it), for
    the optional facts of the table (or `facts` of them). The Spark ingest runs the same."""
    out = []
    for fact in optional_facts(table) if facts is None else facts:
        c = fact.split(".", 1)[1]
        out.append((fact, f"count({_VALUE.get((table, c), c)}) > 0"))
    return out


# Whether a proxy file has a row read as an initialize (an SQL aggregate over its rows).
INITIALIZE_SEEN = "count_if(jsonrpc_method = 'initialize') > 0"


def shows_initialize(
    found: set[str], key_facts: set[str], known: set[str], seen: Callable[[], bool]
) -> bool:
    """Whether a proxy file shows an initialize, from the facts its rows show newly
    (`found`), by its keys and already (`known`); `seen()`: INITIALIZE_SEEN of its rows."""
    if "proxy.jsonrpc_method" in found and not key_facts:
        # A contract-format log names methods: an initialize would show. (An nginx
        # or Envoy log's methods come from Mcp-Method, which only 2026-07-28
        # clients send: there the keys decide.)
        return True
    if INITIALIZE not in known | key_facts and "proxy.session_hmac" in known | found:
        # A proxy log read by its shape shows an initialize where one of its rows was
        # read as one (Caddy: the answer's real new id to a request without one).
        return seen()
    return False


# A value that shows a fact of the file's own clients: the principal the probe's marker
# stands for (adapters._probe_principal) does not show that the log names principals.
_VALUE = {("proxy", "principal"): f"nullif(principal, '{PROBE_PRINCIPAL}')"}


def shown(con: duckdb.DuckDBPyConnection, file_id: int) -> set[str]:
    return {
        r[0]
        for r in con.execute(
            "SELECT fact FROM file_facts WHERE file_id = $f", {"f": file_id}
        ).fetchall()
    }


LABELS = {
    INITIALIZE: "initialize (the answer's new Mcp-Session-Id, or a flag in its place)",
    "proxy.session_hmac": "session id (Mcp-Session-Id, raw or HMAC)",
    "proxy.principal": "principal",
    "proxy.auth_subject": "token subject",
    "proxy.origin": "Origin",
    "proxy.protocol_version": "MCP-Protocol-Version",
    "proxy.last_event_id": "Last-Event-ID",
    "proxy.jsonrpc_method": "JSON-RPC method (Mcp-Method)",
    "proxy.client_addr": "client address",
    "proxy.user_agent": "User-Agent",
}


def proxy_summary(found: set[str]) -> dict[str, Any]:
    """What `replaygate ingest` reports for a proxy log: facts found and not found."""
    wanted = [f for f in proxy_facts() if f in LABELS]
    return {
        "found": [f for f in wanted if f in found],
        "missing": [f for f in wanted if f not in found],
    }
