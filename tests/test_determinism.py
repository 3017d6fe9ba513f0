"""Findings are byte-for-byte reproducible: the same files analysed twice, into two fresh
databases or once more in the same one, give the same findings, detail text included.

DuckDB aggregates in parallel, so an aggregate whose result depends on the order rows
arrive in (a list without ORDER BY or ordered by a time alone, any_value of values that
differ, arg_min on a time that ties) can differ from one run to the next. Such aggregates
are also refused in the SQL itself, statically, because a run that happens to agree proves
little.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from replaygate.core import db as dbm
from replaygate.core.config import Config
from replaygate.ingest.load import ingest
from replaygate.queries import runner
from replaygate.sim import simulate

SQL = Path(__file__).resolve().parent.parent / "queries" / "sql"
# Aggregates whose result follows the order rows arrive in, unless told an order.
_ORDERED = re.compile(r"\b(list|array_agg|string_agg|group_concat|listagg)\s*\(", re.I)
_ANY = re.compile(r"\b(any_value|first|last|arbitrary)\s*\(", re.I)
_ARG = re.compile(r"\b(arg_min|arg_max|min_by|max_by)\s*\(", re.I)
# A list ordered by a timestamp alone (`ORDER BY ts`, `ORDER BY p.first_ts`): rows of one
# millisecond come in any order.
_BY_TIME_ALONE = re.compile(r"order\s+by\s+(\w+\.)?\w*ts\s*(asc|desc)?\s*$", re.I)


def _calls(text: str, pattern: re.Pattern[str]) -> list[str]:
    """The argument text of each call the pattern opens (balanced parentheses)."""
    out = []
    text = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    for m in pattern.finditer(text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out.append(text[m.end() : i - 1])
    return out


def _split_top(args: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in args:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur]


def _sql_files() -> list[Path]:
    return sorted(SQL.rglob("*.sql"))


@pytest.mark.parametrize("path", _sql_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_aggregate_depends_on_row_order(path):
    text = path.read_text(encoding="utf-8")
    for args in _calls(text, _ORDERED):
        if "order by" not in args.lower():
            pytest.fail(f"{path.name}: list aggregate without ORDER BY: ({args.strip()})")
        if _BY_TIME_ALONE.search(args):
            pytest.fail(f"{path.name}: list ordered by a time alone ({args.strip()}): ties")
    for args in _calls(text, _ANY):
        pytest.fail(f"{path.name}: any_value-like aggregate ({args.strip()}): use min or an order")
    for args in _calls(text, _ARG):
        by = _split_top(args)[-1].strip()
        if re.fullmatch(r"(\w+\.)?\w*ts", by):
            pytest.fail(
                f"{path.name}: arg_min/arg_max by a bare ts ({args.strip()}): ties pick any row"
            )


# A window numbered or compared in no order (`row_number() OVER ()`): its numbers follow the
# order rows arrive in. Allowed only where the file says no result depends on them.
_NO_ORDER_WINDOW = re.compile(
    r"\b(row_number|rank|dense_rank|ntile|lag|lead|first_value|last_value|nth_value)\s*\("
    r"[^()]*\)\s*OVER\s*\(\s*(PARTITION\s+BY\s+(?:(?!ORDER\s+BY)[^()])*)?\)",
    re.I,
)
# gate_facts.sql: a session's key names it only inside the gate facts, which read it back
# as its session_hmac (tests/test_row_order.py shuffles a_sessions before it is numbered).
_NUMBERED_IN_ANY_ORDER = {"gate_facts.sql": 1}


def _uncommented(text: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def _limits_without_order(text: str) -> list[str]:
    """Each `LIMIT n` (but `LIMIT 0`) whose query has no ORDER BY between its last SELECT
    and the LIMIT: which rows it keeps follows the order they arrive in."""
    out = []
    text = _uncommented(text)
    for m in re.finditer(r"\bLIMIT\s+(\S+)", text, re.I):
        if m.group(1).rstrip(");") == "0":
            continue
        before = text[: m.start()]
        last_select = max((s.start() for s in re.finditer(r"\bSELECT\b", before, re.I)), default=0)
        if not re.search(r"\bORDER\s+BY\b", before[last_select:], re.I):
            out.append(text[last_select : m.end()].strip())
    return out


@pytest.mark.parametrize("path", _sql_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_limit_or_window_depends_on_row_order(path):
    text = path.read_text(encoding="utf-8")
    for q in _limits_without_order(text):
        pytest.fail(f"{path.name}: LIMIT without ORDER BY: {q[-120:]}")
    n = len(_NO_ORDER_WINDOW.findall(_uncommented(text)))
    assert n == _NUMBERED_IN_ANY_ORDER.get(path.name, 0), (
        f"{path.name}: a window function over rows in no order (OVER () or PARTITION BY alone)"
    )


def test_the_static_check_catches_what_it_should():
    assert _limits_without_order("SELECT a FROM t LIMIT 5") == ["SELECT a FROM t LIMIT 5"]
    assert _limits_without_order("SELECT a FROM t ORDER BY a LIMIT $limit") == []
    assert _limits_without_order("SELECT * FROM t LIMIT 0") == []
    assert _limits_without_order("SELECT 1 UNION ALL SELECT 2 ORDER BY 1 LIMIT 1") == []
    assert _limits_without_order("SELECT a FROM t -- ORDER BY a\nLIMIT 3")
    assert _NO_ORDER_WINDOW.search("SELECT row_number() OVER () AS k")
    assert _NO_ORDER_WINDOW.search("lead(h) OVER (PARTITION BY s)")
    assert not _NO_ORDER_WINDOW.search("lead(h) OVER (PARTITION BY s ORDER BY h)")
    assert not _NO_ORDER_WINDOW.search("count(*) OVER (PARTITION BY s)")
    assert _calls("SELECT list(DISTINCT x) -- list(y)\n", _ORDERED) == ["DISTINCT x"]
    assert _calls("SELECT list_value(a), string_agg(b, ',' ORDER BY b)", _ORDERED) == [
        "b, ',' ORDER BY b"
    ]
    assert _split_top("x, (ts, pos)")[-1].strip() == "(ts, pos)"
    assert _BY_TIME_ALONE.search("delivery ORDER BY ts")
    assert _BY_TIME_ALONE.search("p.status ORDER BY p.first_ts DESC")
    assert not _BY_TIME_ALONE.search("dispatch_id ORDER BY ts, file_id, pos")
    assert not _BY_TIME_ALONE.search("x ORDER BY tsv.seq")


def _findings_bytes(con) -> list[tuple]:
    return con.execute(
        """SELECT detector, severity, CAST(ts AS VARCHAR), session_hmac, generation, stream_id,
                  event_id, dispatch_id, idempotency_key, detail
           FROM findings ORDER BY ALL"""
    ).fetchall()


@pytest.mark.slow
def test_two_fresh_databases_from_the_same_files_agree_byte_for_byte(tmp_path):
    out = tmp_path / "fleet"
    simulate(out, seed=5, sessions=600, fmt="jsonl", faults="all")
    runs = []
    for k in range(2):
        con = dbm.connect(str(tmp_path / f"run{k}.duckdb"))
        con.execute("SET threads = 4")  # parallel aggregation even on a small machine
        ingest(con, [out], Config())
        runner.analyse(con, Config())
        runs.append(_findings_bytes(con))
        if k == 1:  # and once more in the same database
            runner.analyse(con, Config(), force=True)
            runs.append(_findings_bytes(con))
        con.close()
    assert runs[0], "no findings to compare"
    assert runs[0] == runs[1] == runs[2]


def test_findings_of_one_millisecond_are_listed_in_one_order(tmp_path):
    """`findings --json`, a report's findings and a bundle's list findings in an order of
    their own, not the table's: its rows come in the order the threads that inserted them
    finished (findings of one detector in one millisecond swapped places between two
    analyses of one 10M-event database)."""
    from replaygate.dashboard import bundle

    rows = [
        (
            "rollback_post_storm",
            "high",
            "2026-12-03 04:00:35.309+00",
            "s",
            h,
            1,
            "2",
            None,
            None,
            None,
            '{"n": 1}',
        )
        for h in ("b" * 64, "a" * 64, "c" * 64)
    ]
    rows.append((*rows[0][:5], 2, *rows[0][6:]))  # the same session's next generation
    listed, written = [], []
    for order in (rows, rows[::-1]):
        con = dbm.connect(str(tmp_path / f"{len(listed)}.duckdb"))
        for stmt in runner.FINDINGS_DDL.split(";"):
            if stmt.strip():
                con.execute(stmt)
        for r in order:
            con.execute("INSERT INTO findings VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", list(r))
        listed.append(runner.list_findings(con))
        written.append(bundle._findings(con, "s"))
        con.close()
    assert listed[0] == listed[1]
    assert [f["session_hmac"][0] for f in listed[0]] == ["a", "b", "b", "c"]
    assert written[0] == written[1]
