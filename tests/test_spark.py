"""The Spark engine's translation: one statement of each detector and prepare step, its
Spark form derived by sqlglot and the rewrites of spark/transpile.py (sqlglot only, no
Spark needed). What does not translate yet is listed in spark/analyse.py and must be
exactly what fails here. And the engine itself: one slow test runs the analysis on Spark
in local mode (`local[2]`) and holds its findings, coverage, cannot-tell and gate
decisions equal to DuckDB's; it is skipped, with the reason, where pyspark or Java is
missing. The engine tests share one SparkSession (conftest.py `spark`) and one small
fleet (`fleet40`): starting Spark and planning its queries is what they cost.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from replaygate import api
from replaygate.queries import catalog

from .conftest import FLEET_CONFIG, ROOT, findings_of, run_cli

transpile = pytest.importorskip("replaygate.spark.transpile", reason="the spark extra (sqlglot)")

from replaygate.core.contract import RECORD_TYPES  # noqa: E402
from replaygate.ingest.readers import MAX_LINE  # noqa: E402
from replaygate.spark import analyse, lake  # noqa: E402
from replaygate.spark import lakeload as spark_ingest  # noqa: E402

from . import hostile  # noqa: E402

# -- the translation (no Spark needed) ------------------------------------------------------


def test_every_detector_and_prepared_table_has_a_spark_form():
    """A detector whose SQL gains a construct with no rewrite fails here, unless it is
    listed as not run on Spark yet (and then it must really fail to translate)."""
    failing = set()
    for name, q in catalog.detectors().items():
        try:
            transpile.to_spark(q.statements()[0])
        except transpile.Untranslatable:
            failing.add(name)
    assert failing == set(analyse.NOT_YET)
    prep_failing = set()
    for q in catalog.load("prep"):
        try:
            transpile.prepare_steps(q.statements())
        except transpile.Untranslatable:
            prep_failing.add(q.path.name)
    assert prep_failing == set(analyse.PREP_NOT_YET)


def test_an_unknown_function_is_untranslatable():
    with pytest.raises(transpile.Untranslatable, match="list_zip"):
        transpile.to_spark("SELECT list_zip(a, b) FROM t")
    with pytest.raises(transpile.Untranslatable):
        transpile.to_spark("SELECT list(x ORDER BY y DESC) FROM t")


def test_macros_expand_from_the_one_statement():
    out = transpile.to_spark("SELECT has_resumption(v) FROM t")
    assert "2026-07-28" in out and "has_resumption" not in out.lower()
    # a macro calling a macro
    out = transpile.to_spark("SELECT attributed(k, s, e, true, c, t) FROM x")
    assert "cohort:" in out and "stage_key" not in out.lower()


@pytest.mark.parametrize(
    ("duck", "spark_has"),
    [
        ("SELECT epoch_ms(ts) FROM t", "UNIX_MILLIS(ts)"),
        ("SELECT epoch_ms(CAST(x AS BIGINT)) FROM t", "TIMESTAMP_MILLIS(CAST(x AS BIGINT))"),
        ("SELECT list(x ORDER BY ts) FROM t", "ARRAY_SORT(COLLECT_LIST(STRUCT(ts AS k0, x AS v)))"),
        ("SELECT list(DISTINCT x ORDER BY x) FROM t", "ARRAY_SORT(COLLECT_SET(x))"),
        ("SELECT arg_min(x, ts) FROM t", "MIN_BY(x, ts) FILTER(WHERE NOT x IS NULL"),
        ("SELECT unnest(range(a, b)) FROM t", "EXPLODE(FILTER(SEQUENCE(a, GREATEST(a, (b) - 1))"),
        ("SELECT 'infinity'::TIMESTAMPTZ", "9999-12-31 23:59:59.999999"),
        ("SELECT * FROM t WHERE (a, b) > (c, d)", "a > c OR (a = c AND (b > d))"),
        ("SELECT hash(a, b) FROM t", "XXHASH64(a, b)"),
        ("SELECT suffix(a, 'Z') FROM t", "ENDSWITH(a, 'Z')"),
        (r"SELECT regexp_replace(p, 'a(b)', '\1$', 'gi') FROM t", r"'(?i)a(b)', '$1\\$'"),
        (
            r"SELECT regexp_replace(p, '(:59:)60', '\159') FROM t",
            r"'(?s)^(.*?)(?:(:59:)60)', '$1$259'",
        ),
        ("SELECT * FROM t SEMI JOIN u USING (k)", "LEFT SEMI JOIN u"),
        ("SELECT len(list_filter(l, lambda x: x > 1)) FROM t", "SIZE(FILTER(l, x -> x > 1))"),
        ("SELECT quantile_cont(x, 0.99) FROM t", "PERCENTILE(x, CAST(0.99 AS DOUBLE))"),
        ("SELECT json_object('a', x) FROM t", "TO_JSON(NAMED_STRUCT('a', x)"),
        (
            "SELECT min(x) OVER (w ROWS UNBOUNDED PRECEDING) FROM t WINDOW w AS (ORDER BY y)",
            "OVER (ORDER BY y",
        ),
    ],
)
def test_each_rewrite(duck, spark_has):
    assert spark_has in transpile.to_spark(duck)


def test_json_operators_on_a_parsed_line_read_a_variant():
    """A proxy log's line is parsed once (`try(json(raw)) AS j`): the JSON operators on
    that column read the VARIANT; on JSON text elsewhere they stay get_json_object."""
    out = transpile.to_spark(
        "SELECT j->>'$.request.headers.\"Mcp-Session-Id\"[0]', json_exists(j, '$.msec'), "
        "json_type(j, '$.a') = 'VARCHAR', json_extract_string(detail, '$.basis'), "
        "list_has_any(string_split(f, ','), ['DC']) FROM (SELECT try(json(raw)) AS j, * FROM t)"
    )
    assert "TRY_PARSE_JSON(raw) AS j" in out
    path = "'$[\\'request\\'][\\'headers\\'][\\'Mcp-Session-Id\\'][0]'"
    assert f"TRY_VARIANT_GET(j, {path}, 'string')" in out
    assert "IF(j IS NULL, NULL, NOT TRY_VARIANT_GET(j, '$[\\'msec\\']', 'variant') IS NULL)" in out
    assert "SCHEMA_OF_VARIANT(TRY_VARIANT_GET(j, '$[\\'a\\']', 'variant'))" in out
    assert "GET_JSON_OBJECT(detail, '$.basis')" in out
    assert "ARRAYS_OVERLAP(" in out


@pytest.mark.slow
@pytest.mark.spark
def test_json_values_read_on_spark_as_duckdb_reads_them(spark):
    """The JSON operators the proxy adapters use, on values of every JSON type (a JSON
    null, a key with '-', a line that is no JSON): the same answers on both engines."""
    lines = [
        '{"a": null, "b": "x", "c": 200, "d": [1, 2], "e": {"f": true}, "g-h": ["v"], '
        '"n": -3, "t": true, "r": 1795824008.169, "s": "DC,UF"}',
        "[1]",
        "nope",
    ]
    cols = [
        "json_exists(j, '$.a')", "j->>'$.a'", "j->>'$.b'", "j->>'$.c'", "j->>'$.d[1]'",
        "j->>'$.e.f'", "j->>'$.\"g-h\"[0]'", "j->>'$.zz'", "json_exists(j, '$.zz')",
        "json_exists(j, '$.e.f')", "json_type(j, '$.b')", "json_type(j, '$.e')",
        "json_type(j, '$.d')", "json_type(j, '$.n')", "json_type(j, '$.c')",
        "json_type(j, '$.a')", "json_type(j, '$.t')", "json_type(j, '$.zz')",
        "TRY_CAST(j->>'$.r' AS DOUBLE)", "j IS NULL",
        "list_has_any(string_split(coalesce(j->>'$.s', ''), ','), ['DC', 'X'])",
    ]  # fmt: skip
    sql = f"SELECT {', '.join(cols)} FROM (SELECT i, try(json(raw)) AS j FROM lines) ORDER BY i"
    duck = duckdb.connect()
    duck.execute("CREATE TABLE lines AS SELECT * FROM (VALUES (1, $a), (2, $b), (3, $c)) v(i, raw)",
                 {"a": lines[0], "b": lines[1], "c": lines[2]})  # fmt: skip
    expected = [tuple(r) for r in duck.execute(sql).fetchall()]
    spark.createDataFrame(list(enumerate(lines, 1)), "i INT, raw STRING").createOrReplaceTempView(
        "lines"
    )
    got = [tuple(r) for r in spark.sql(transpile.to_spark(sql)).collect()]
    assert got == expected


@pytest.mark.spark
def test_a_list_over_no_rows_is_null_on_spark_as_on_duckdb(spark):
    """DuckDB's list() over no rows is NULL (a finding's detail says so); Spark's
    collect_list and collect_set give an empty array unless rewritten."""
    q = (
        "SELECT list(x ORDER BY x) AS o, list(x) AS l, list(DISTINCT x) AS d, "
        "list(DISTINCT x ORDER BY x) AS s FROM (SELECT 1 AS x) t WHERE x > 1"
    )
    assert duckdb.sql(q).fetchall() == [(None, None, None, None)]
    assert [tuple(r) for r in spark.sql(transpile.to_spark(q)).collect()] == [
        (None, None, None, None)
    ]
    one = q.replace("x > 1", "x = 1")
    assert [tuple(r) for r in spark.sql(transpile.to_spark(one)).collect()] == [
        ([1], [1], [1], [1])
    ]


def test_asof_join_becomes_a_span_join():
    out = transpile.to_spark(
        "SELECT p.x, r.y FROM p ASOF JOIN r ON p.k = r.k AND p.ts >= r.ts WHERE r.y > 1"
    )
    assert "ASOF JOIN" not in out.upper()
    assert "LEAD(ts) OVER (PARTITION BY k ORDER BY ts" in out
    assert "r.rg_asof_next IS NULL OR p.ts < r.rg_asof_next" in out


def test_a_forward_left_asof_join_spans_back_to_the_previous_row():
    """`l.t < r.t` pairs each left row with the first right row after it: each right row
    holds from the previous r.t of its keys; a LEFT join keeps the unmatched left rows."""
    out = transpile.to_spark("SELECT g.x, i.y FROM g ASOF LEFT JOIN i ON i.k = g.k AND i.ts > g.ts")
    assert "ASOF JOIN" not in out.upper()
    assert "LEFT JOIN" in out.upper()
    assert "LAG(ts) OVER (PARTITION BY k ORDER BY ts" in out
    assert "i.rg_asof_next IS NULL OR g.ts >= i.rg_asof_next" in out


def test_alter_and_update_become_a_new_version_of_the_table():
    steps = transpile.prepare_steps(
        [
            "CREATE TABLE a AS SELECT 1 AS x",
            "ALTER TABLE a ADD COLUMN y BOOLEAN",
            "UPDATE a SET y = x > 0",
        ]
    )
    assert [s.name for s in steps] == ["a", "a"]
    assert "CAST(x > 0 AS BOOLEAN) AS y FROM a" in steps[1].sql


def test_a_table_declared_then_filled_is_its_query():
    """`CREATE TABLE t (columns)` and the `INSERT INTO t SELECT` after it are t as the
    query (a column's storage, `USING COMPRESSION`, dropped); a query whose columns are not
    named as declared, or a table never filled, has no Spark form."""
    create = "CREATE OR REPLACE TABLE t (x VARCHAR USING COMPRESSION uncompressed, y BIGINT)"
    steps = transpile.prepare_steps([create, "INSERT INTO t SELECT a AS x, b AS y FROM s"])
    assert [(s.name, s.view) for s in steps] == [("t", False)]
    assert steps[0].sql == "SELECT a AS x, b AS y FROM s"
    with pytest.raises(transpile.Untranslatable, match="named as declared"):
        transpile.prepare_steps([create, "INSERT INTO t SELECT b AS y, a AS x FROM s"])
    with pytest.raises(transpile.Untranslatable, match="never filled"):
        transpile.prepare_steps([create])
    with pytest.raises(transpile.Untranslatable, match="not declared"):
        transpile.prepare_steps(["INSERT INTO t SELECT 1 AS x"])


def test_a_cte_read_twice_is_a_step_of_its_own():
    """Spark inlines a CTE at each read: one read twice is materialised once, before the
    statement, with the CTEs it reads that are read once kept inline."""
    steps = transpile.prepare_steps(
        [
            "CREATE TABLE t AS WITH a AS (SELECT x FROM s), b AS (SELECT x FROM a), "
            "c AS (SELECT x FROM b WHERE x > 1) SELECT * FROM c JOIN c AS d USING (x)"
        ]
    )
    assert [(s.name, s.view) for s in steps] == [("t__c", True), ("t", False)]
    assert steps[0].sql.startswith("WITH a AS (SELECT x FROM s), b AS (SELECT x FROM a) ")
    assert "FROM t__c AS c JOIN t__c AS d" in steps[1].sql
    # a_missing's CTEs read along several paths are steps of their own
    (missing,) = (q for q in catalog.load("prep") if q.path.name == "05_missing.sql")
    names = [s.name for s in transpile.prepare_steps(missing.statements())]
    assert {"a_missing__acc", "a_missing__holes", "a_missing__ev"} <= set(names)
    assert names[-1] == "a_missing"
    single = transpile.prepare_steps(
        ["CREATE TABLE u AS WITH a AS (SELECT 1 AS x) SELECT * FROM a"]
    )
    assert [s.name for s in single] == ["u"] and single[0].sql.startswith("WITH a AS")


def test_every_rewrite_is_documented():
    doc = (ROOT / "docs" / "spark.md").read_text()
    for rw in transpile.REWRITES:
        assert rw.doc, rw.name
        assert f"| {rw.name} |" in doc, f"docs/spark.md does not list the rewrite {rw.name!r}"


def test_cli_spark_engine_needs_a_lake(tmp_path):
    r = run_cli("findings", "--engine", "spark", "--db", tmp_path / "x.duckdb")
    assert r.returncode == 1
    assert "--engine spark needs --lake" in r.stderr


# -- the engine (Spark in local mode) -------------------------------------------------------


# The fleet every engine test shares: seed 7 with every fault. 40 sessions of ordinary
# traffic beside the faults' own keep every fault and every detector firing (the test
# below holds it so), at a seventh of the rows of the default 300.
FLEET_SESSIONS = 40


@pytest.fixture(scope="module")
def fleet40(tmp_path_factory):
    """The shared fleet (its Caddy, nginx and Envoy logs among its files) and a folder of
    bad input beside it, ingested together by DuckDB and analysed there; and the lake
    exported from that database (spark/lake.py `export`: the columns a lake has)."""
    from replaygate.core import db as dbm
    from replaygate.ingest.load import ingest
    from replaygate.queries import runner
    from replaygate.sim import simulate

    tmp = tmp_path_factory.mktemp("spark-fleet")
    out = tmp / "fleet"
    simulate(out, seed=7, sessions=FLEET_SESSIONS, fmt="mixed", config=FLEET_CONFIG)
    bad = _bad_inputs(tmp / "bad")
    con = dbm.connect(str(tmp / "duck.duckdb"))
    ingest(con, [out, bad], FLEET_CONFIG)
    runner.analyse(con, FLEET_CONFIG)
    lake.export(con, tmp / "lake")
    truth = json.loads((out / "truth.json").read_text())
    return con, truth, out, bad, tmp / "lake"


@pytest.fixture(scope="module")
def spark_lake(spark, fleet40):
    """One Spark ingest for every Spark test (`replaygate ingest --engine spark`): the
    fleet's files and the bad input, read together."""
    _, _, out, bad, exported = fleet40
    where = exported.parent / "spark-lake"
    summary = spark_ingest.ingest(spark, [str(out), str(bad)], str(where), FLEET_CONFIG)
    return where, summary


def _lists_sorted(v):
    """A JSON value with its lists sorted: DuckDB and Spark give a list without ORDER BY
    (`list(DISTINCT x)`) in no defined order (ordered lists are tested above)."""
    if isinstance(v, dict):
        return {k: _lists_sorted(x) for k, x in v.items()}
    if isinstance(v, list):
        return sorted((_lists_sorted(x) for x in v), key=lambda x: json.dumps(x, sort_keys=True))
    return v


def _findings(con) -> list[str]:
    out = []
    for f in findings_of(con):
        f["detail"] = _lists_sorted(f["detail"])
        out.append(json.dumps(f, sort_keys=True, default=str))
    return sorted(out)


def _decisions(con, config=FLEET_CONFIG) -> dict:
    """Each stage's decision and its gates' status, value and sample (a p99 to 9 digits:
    DuckDB's quantile_cont and Spark's percentile differ in the last bits)."""
    doc = api.gates_doc(con, config, all_stages=True)
    out = {}
    for st in doc["stages"]:
        gates = {}
        for g in st["gates"]:
            v = g["value"]
            gates[g["id"]] = (str(g["status"]), round(v, 9) if isinstance(v, float) else v,
                              g["sample"])  # fmt: skip
        out[st["stage"]] = (str(st["decision"]), gates)
    return out


@pytest.fixture(scope="module")
def spark_analysed(spark, spark_lake, tmp_path_factory):
    """One Spark analysis of the Spark-ingested lake (as the CLI runs it: the prepared
    tables kept in the lake), into a DuckDB file; with the columns and row count of every
    DataFrame collected through the driver as Arrow (`toArrow`, `toPandas`) meanwhile."""
    from pyspark.sql.pandas.conversion import PandasConversionMixin

    lake_dir, _ = spark_lake
    db = tmp_path_factory.mktemp("spark-analysis") / "spark.duckdb"
    collected: list[tuple[tuple[str, ...], int]] = []
    real = PandasConversionMixin._collect_as_arrow

    def spy(self, *args, **kwargs):
        batches = real(self, *args, **kwargs)
        collected.append((tuple(self.columns), sum(b.num_rows for b in batches)))
        return batches

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PandasConversionMixin, "_collect_as_arrow", spy)
        analyse.analyse(spark, str(lake_dir), str(db), FLEET_CONFIG, "lake")
    return db, collected


@pytest.mark.slow
@pytest.mark.spark
def test_spark_findings_coverage_and_decisions_equal_duckdb(fleet40, spark_analysed):
    """The simulated fleet with every fault (seed 7) and the bad input, ingested and
    analysed by DuckDB and by Spark (the lake of the Spark ingest, its Caddy, nginx and
    Envoy logs read by the Spark form of the proxy adapters): the same findings,
    coverage, cannot-tell and decisions."""
    from replaygate.core import db as dbm

    con, truth, _, _, _ = fleet40
    # The fleet is small, but every fault is in it and finds what it causes.
    expected = {e["detector"] for f in truth["faults"] for e in f["expect"]}
    found = {r[0] for r in con.execute("SELECT DISTINCT detector FROM findings").fetchall()}
    assert truth["faults"] and expected <= found
    other = dbm.connect(str(spark_analysed[0]))
    assert _findings(other) == _findings(con)
    q = "SELECT detector, status, rows FROM coverage ORDER BY detector"
    assert other.execute(q).fetchall() == con.execute(q).fetchall()
    q = "SELECT * FROM cannot_tell_stages ORDER BY ALL"
    assert other.execute(q).fetchall() == con.execute(q).fetchall()
    assert _decisions(other) == _decisions(con)


def _other_fleet(which: str, tmp: Path):
    """The test fleets beside the shared one: the committed sample (its blind, redacted
    and init-less proxy logs, its own settings) and a server-only fleet (the recorder's
    ledgers and event log, no proxy or client data: most detectors cannot tell)."""
    from replaygate.core.config import load
    from replaygate.sim import simulate

    if which == "sample":
        return [ROOT / "sample_data"], load(ROOT / "sample_data" / "replaygate.toml")
    simulate(tmp / "fleet", seed=11, sessions=24, fmt="mixed", config=FLEET_CONFIG,
             server_only=True)  # fmt: skip
    return [tmp / "fleet"], FLEET_CONFIG


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("which", ["sample", "server-only"])
def test_spark_equals_duckdb_on_the_other_test_fleets(spark, tmp_path, which):
    """Spark ingest and Spark analysis of the sample fleet and of a server-only fleet:
    the same quarantine, findings, coverage, cannot-tell and decisions as DuckDB's."""
    from replaygate.core import db as dbm
    from replaygate.ingest.load import ingest
    from replaygate.queries import runner

    paths, config = _other_fleet(which, tmp_path)
    con = dbm.connect(str(tmp_path / "duck.duckdb"))
    report = ingest(con, paths, config)
    runner.analyse(con, config)
    summary = spark_ingest.ingest(spark, [str(p) for p in paths], str(tmp_path / "lake"), config)
    assert summary["quarantined"] == report.quarantined
    db = tmp_path / "spark.duckdb"
    analyse.analyse(spark, str(tmp_path / "lake"), str(db), config, "lake")
    other = dbm.connect(str(db))
    assert _findings(con), "the fleet finds something to compare"
    assert _findings(other) == _findings(con)
    for q in (
        "SELECT detector, status, rows FROM coverage ORDER BY detector",
        "SELECT * FROM cannot_tell_stages ORDER BY ALL",
    ):
        assert other.execute(q).fetchall() == con.execute(q).fetchall(), q
    assert _decisions(other, config) == _decisions(con, config)


@pytest.mark.slow
@pytest.mark.spark
def test_spark_analysis_reads_the_lake_into_duckdb_not_through_the_driver(
    fleet40, spark_lake, spark_analysed
):
    """The record tables, the bookkeeping and the prepared tables reach the DuckDB file by
    DuckDB reading the lake's Parquet files (at 10M events, gigabytes the driver's process
    would otherwise hold): no DataFrame of theirs is collected as Arrow, the findings
    alone are. The file's tables have core/db.py's columns, types and order (those of
    DuckDB's own engine) and hold the lake's rows."""
    from replaygate.core import db as dbm

    con = fleet40[0]
    lake_dir, _ = spark_lake
    db, collected = spark_analysed
    other = dbm.connect(str(db))
    tables = [rt.table for rt in RECORD_TYPES] + list(lake.BOOKKEEPING)
    in_db = {r[0] for r in other.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    prepared = [p.name for p in (lake_dir / "_analysis").iterdir() if p.name in in_db]
    assert "a_stages" in prepared and "a_event_repeats" in prepared

    def columns(c, table):
        return c.execute(f"DESCRIBE {table}").fetchall()

    shapes = {tuple(r[0] for r in columns(other, t)) for t in tables + prepared}
    assert collected and not [c for c, _ in collected if c in shapes]
    found = {r[0] for r in columns(other, "findings")}
    assert all(set(c) <= found for c, _ in collected)  # the detectors' findings
    for table in tables:
        assert columns(other, table) == columns(con, table), table
    for table in [rt.table for rt in RECORD_TYPES]:
        files = analyse.parquet_files(Path(lake.path(str(lake_dir), table)))
        src = "read_parquet($f, union_by_name = true, hive_partitioning = false)"
        cols = ", ".join(f'"{r[0]}"' for r in columns(con, table))
        q = f"SELECT {cols} FROM {src} ORDER BY ALL" if files else None
        lake_rows = other.execute(q, {"f": files}).fetchall() if q else []
        assert other.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall() == lake_rows
        assert lake_rows or table not in {"events", "sessions"}, table


def test_a_lake_is_read_by_duckdb_where_it_is_a_folder_here(tmp_path):
    """Which lakes DuckDB reads itself (a folder here) and which files of a table folder
    it reads: those Spark reads, none hidden (`_SUCCESS`, an unfinished `_temporary/`)."""
    assert analyse.local_folder("/data/lake") == Path("/data/lake")
    assert analyse.local_folder("rel/lake") == Path("rel/lake")
    assert analyse.local_folder("file:///data/lake") == Path("/data/lake")
    assert analyse.local_folder("file:/data/lake") == Path("/data/lake")
    assert analyse.local_folder("s3a://bucket/lake") is None
    assert analyse.local_folder("abfss://c@a.dfs.core.windows.net/lake") is None
    assert analyse.local_folder("dbfs:/lake") == (
        Path("/dbfs/lake") if Path("/dbfs").is_dir() else None
    )
    table = tmp_path / "events"
    for f in ("day=2026-11-29/part-0.parquet", "day=2026-11-30/part-1.parquet",
              "_SUCCESS", "_temporary/0/part-9.parquet", "day=2026-11-29/.part-0.parquet.crc",
              ".hidden.parquet"):  # fmt: skip
        (table / f).parent.mkdir(parents=True, exist_ok=True)
        (table / f).write_bytes(b"")
    assert analyse.parquet_files(table) == [
        str(table / "day=2026-11-29/part-0.parquet"),
        str(table / "day=2026-11-30/part-1.parquet"),
    ]
    assert analyse.parquet_files(tmp_path / "absent") == []


# -- the ingest on Spark ----------------------------------------------------------------


def _lake_table(where: Path, table: str) -> tuple[list[tuple], list[tuple]]:
    """A lake table read by DuckDB: (its columns and types, its rows with the file's
    path in place of its id), the partition column left out."""
    folder = where / lake.path("", table).lstrip("/")
    files = list(folder.rglob("*.parquet"))
    if not files:
        return [], []
    c = duckdb.connect()
    c.execute("SET TimeZone = 'UTC'")
    src = f"read_parquet('{folder}/**/*.parquet', hive_partitioning = false, union_by_name = true)"
    cols = c.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()
    cols = sorted((n, t) for n, t, *_ in cols if n != lake.PARTITION)
    if table in lake.BOOKKEEPING and table != "quarantine":
        return cols, []
    paths = f"read_parquet('{where / '_files'}/*.parquet')"
    rows = c.execute(
        "SELECT f.path, r.* EXCLUDE (file_id) "
        f"FROM {src} r JOIN (SELECT file_id, path FROM {paths}) f USING (file_id)"
        if table != "quarantine"
        else f'SELECT path, line, "row", record_type, reason FROM {src}'
    ).fetchall()
    return cols, sorted(rows, key=repr)


def _facts(where: Path) -> list[tuple]:
    c = duckdb.connect()
    return sorted(
        c.execute(
            f"SELECT f.path, fact, how FROM read_parquet('{where}/_file_facts/*.parquet') "
            f"JOIN read_parquet('{where}/_files/*.parquet') f USING (file_id)"
        ).fetchall()
    )


def _accounts(where: Path) -> list[tuple]:
    """(path, rows loaded, rows quarantined) of each file in a lake's manifest."""
    c = duckdb.connect()
    return sorted(
        c.execute(
            "SELECT path, rows_loaded, rows_quarantined "
            f"FROM read_parquet('{where}/_files/*.parquet')"
        ).fetchall()
    )


def _assert_lakes_equal(spark_dir: Path, duck_dir: Path) -> None:
    for rt in RECORD_TYPES:
        s_cols, s_rows = _lake_table(spark_dir, rt.table)
        d_cols, d_rows = _lake_table(duck_dir, rt.table)
        if d_cols:  # the export writes no folder for a type without rows
            assert s_cols == d_cols, rt.table
        assert s_rows == d_rows, rt.table
    assert _lake_table(spark_dir, "quarantine")[1] == _lake_table(duck_dir, "quarantine")[1]
    assert _facts(spark_dir) == _facts(duck_dir)
    assert _accounts(spark_dir) == _accounts(duck_dir)


@pytest.mark.slow
@pytest.mark.spark
def test_spark_ingest_equals_duckdb_ingest(fleet40, spark_lake):
    """The fleet's files (JSON Lines, gzip, CSV, Parquet, contract proxy logs, the
    rollout log, Caddy, nginx and Envoy access logs) and the bad input ingested by Spark:
    the same columns, rows (HMAC'd ids, redacted paths), quarantine and file facts (by
    the values, and by a proxy log's keys) as the lake exported from DuckDB's ingest."""
    con, _, out, _, exported = fleet40
    where, summary = spark_lake
    assert summary["rows"] == {
        rt.table: n
        for rt in RECORD_TYPES
        if (n := con.execute(f"SELECT count(*) FROM {rt.table}").fetchone()[0])
    }
    assert summary["quarantined"] == con.execute("SELECT count(*) FROM quarantine").fetchone()[0]
    assert not summary["warnings"]
    # The simulator's logs in each proxy's own format are read, and show facts by keys.
    native = {f"proxy-{p}.jsonl" for p in ("caddy", "nginx", "envoy")}
    assert native <= {p.name for p in out.iterdir()}
    shown = con.execute(
        "SELECT f.name, count(DISTINCT p.pos), count(DISTINCT k.fact) FROM files f "
        "JOIN proxy p USING (file_id) JOIN file_facts k USING (file_id) "
        "WHERE k.how = 'keys' GROUP BY f.name"
    ).fetchall()
    assert native <= {name for name, rows, facts in shown if rows > 0 and facts > 2}
    _assert_lakes_equal(where, exported)


def _bad_inputs(dest: Path) -> Path:
    """The bad-input classes both ingests read alike (docs/spark.md lists the others)."""
    dest.mkdir()
    hostile.edge_timestamps(dest)
    hostile.out_of_range_numbers(dest)
    hostile.csv_with_bom(dest)
    hostile.raw_ids_elsewhere(dest)
    hostile.proxy_with_raw_ids(dest, gzipped=True)
    hostile.caddy_with_bom_and_cut_line(dest)  # a proxy's own log: a BOM, a cut line
    # gzip streams cut short, corrupt in the middle of a line, with a failed data check
    hostile.gzip_truncated(dest, 200)
    hostile.gzip_corrupt_midstream(dest, 200)
    hostile.gzip_bad_check(dest, 20)
    # malformed CSV rows: a column too many, one too few, a quote left open (it makes
    # the lines after it one row); a quoted value over two lines; a blank line
    hostile.csv_unterminated_quote(dest)
    row = "2026-11-29T07:45:0{}.000Z," + "a" * 64 + ",1,{}\n"
    (dest / "sessions-malformed.csv").write_text(
        "ts,session_hmac,generation,state\n" + row.format(1, "SESSION_ACTIVE")
        + row.format(2, "SESSION_ACTIVE,extra") + row.format(3, "SESSION_ACTIVE")
        + "2026-11-29T07:45:04.000Z," + "a" * 64 + ",1\n\n" + row.format(5, '"SESSION\nACTIVE"')
        + row.format(6, "SESSION_ACTIVE")
    )  # fmt: skip
    # gzip streams of CSV cut short and with a failed data check
    csv_rows = (
        "ts,session_hmac,generation,state\n" + row.format(7, "SESSION_ACTIVE") * 300
    ).encode()
    packed = hostile.gz(csv_rows)
    (dest / "sessions-cut.csv.gz").write_bytes(packed[: len(packed) // 2])
    packed = bytearray(packed)
    packed[-8] ^= 0xFF  # the first byte of its CRC-32
    (dest / "sessions-badcrc.csv.gz").write_bytes(bytes(packed))
    # a line one byte over readers.MAX_LINE between two good ones
    over = b'{"pad": "' + b"a" * (MAX_LINE - 10) + b'"}'
    assert len(over) == MAX_LINE + 1
    one = json.dumps(hostile.session_record()).encode()
    (dest / "sessions-long.jsonl").write_bytes(b"\n".join([one, over, one]) + b"\n")
    good = json.dumps(hostile.session_record())
    bad = [
        '{"ts": "2026-11-29T07:45:01Z", "generation": 1',  # cut short
        "[1, 2, 3]",
        '"text"',
        '{"session_hmac": "' + "b" * 64 + '", "generation": 1, "state": "SESSION_ACTIVE"}',
        json.dumps(hostile.session_record(ts="yesterday")),
        json.dumps(hostile.session_record(generation=2.5)),
        json.dumps(hostile.session_record(state="SESSION_ZOMBIE")),
        json.dumps(hostile.session_record(schema="mcpNope.v9")),
        json.dumps(hostile.session_record(ts="2026-11-29t07:45:01.5z")),
        json.dumps(hostile.session_record(ts="2026-11-29T23:59:60Z")),
        json.dumps(hostile.session_record(ts="2026-11-29T24:00:00Z")),
        json.dumps(hostile.session_record(ts="2026-11-29T07:45:01+02:00")),
        json.dumps(hostile.session_record(ts=1795824008169)),
        json.dumps(hostile.session_record(ts="1795824008169")),
        json.dumps(hostile.session_record(generation="7")),
        json.dumps(hostile.session_record(resumable="true")),
        json.dumps(hostile.session_record(resumable="maybe")),
        "",
        "  \t",
    ]
    text = "\n".join([good, *bad, good]) + "\n"
    (dest / "sessions-bad.jsonl").write_bytes(b"\xef\xbb\xbf" + text.encode())
    # CRLF line ends, a bare CR inside a line, a line that is not UTF-8, and a last line
    # without its line end (it waits for the rest).
    crlf = (good + "\r\n" + good.replace(", ", ",\r ", 1) + "\r\n").encode()
    crlf += b'{"ts": "\xff"}\r\n' + good.encode() + b"\n" + good.encode()
    (dest / "sessions-crlf.jsonl").write_bytes(crlf)
    (dest / "misc.jsonl").write_text(json.dumps({"ts": 1}) + "\n")
    (dest / "proxy-bad.csv").write_text(
        "ts,method,status,path\n2026-11-29T07:45:01Z,GET,200,/mcp\n"
        '2026-11-29T07:45:03Z,GET,abc,/mcp\n2026-11-29T07:45:04Z,POST,"",/mcp\n'
        "2026-11-29T07:45:05Z,POST,201,/mcp?SESSION%5Fid=RAW-9\n"
    )
    return dest


@pytest.mark.slow
@pytest.mark.spark
def test_spark_ingest_quarantines_bad_input_as_duckdb_does(fleet40, spark_lake):
    """Bad input of every class the Spark reader covers (hostile.py's and more), read in
    the shared ingest: the same quarantine (file, line or row, reason) as DuckDB's, for
    many reasons, and no raw session id anywhere in the lake."""
    con, _, _, bad, exported = fleet40
    where, _ = spark_lake
    reasons = con.execute(
        "SELECT count(DISTINCT q.reason) FROM quarantine q JOIN files f USING (file_id) "
        "WHERE starts_with(f.abspath, $bad)",
        {"bad": str(bad.resolve())},
    ).fetchone()[0]
    assert reasons >= 8

    def of_bad(rows):  # the quarantine rows of the bad folder's files (absolute paths)
        return [r for r in rows if r[0].startswith(f"{bad.resolve()}/")]

    spark_q = of_bad(_lake_table(where, "quarantine")[1])
    assert len(spark_q) >= reasons
    assert spark_q == of_bad(_lake_table(exported, "quarantine")[1])
    # The breaks of gzip streams and the overlong line are among them.
    why = {r[0].rsplit("/", 1)[1]: r[-1] for r in spark_q}
    assert why["sessions-truncated.jsonl.gz"].startswith("truncated gzip: the stream breaks")
    assert why["sessions-corrupt.jsonl.gz"].startswith("corrupt gzip: the stream breaks")
    assert why["sessions-badcrc.jsonl.gz"].startswith("corrupt gzip: its data check fails")
    assert why["sessions-long.jsonl"] == "line too long"
    # Malformed CSV rows and broken gzip streams of CSV, with DuckDB's reasons and lines.
    reasons: dict[str, set] = {}
    for r in spark_q:
        reasons.setdefault(r[0].rsplit("/", 1)[1], set()).add((r[1], r[-1]))
    assert reasons["sessions-malformed.csv"] >= {
        (3, "malformed CSV row: too many columns"),
        (5, "malformed CSV row: missing columns"),
    }
    assert reasons["sessions-openquote.csv"] == {
        (3, "malformed CSV row: unquoted value (a quote left open makes lines 3-5 one row)")
    }
    ((_, cut),) = reasons["sessions-cut.csv.gz"]
    assert cut.startswith("truncated gzip: the stream breaks")
    ((_, check),) = reasons["sessions-badcrc.csv.gz"]
    assert check.startswith("corrupt gzip: its data check fails")
    # Each file's rows loaded and quarantined (and so, with the same blank lines, the
    # same loaded + quarantined + blank = lines as DuckDB's): _assert_lakes_equal.
    for f in where.rglob("*.parquet"):
        assert hostile.RAW_ID.encode() not in f.read_bytes()
        assert b"RAWID-" not in f.read_bytes() and b"RAW-9" not in f.read_bytes()


def test_spark_ingest_knows_a_proxy_log_by_its_shape(tmp_path):
    """A proxy's own log is found by the shape of its first lines (a byte-order mark or
    a cut first line does not hide it), before Spark reads anything: the adapters and
    the facts its keys show are chosen by it."""
    from replaygate.ingest.load import discover

    hostile.caddy_with_bom_and_cut_line(tmp_path)
    for name in ("bom.log", "cut.log"):
        (src,) = discover([tmp_path / name])[0]
        assert spark_ingest.proxy_format(src) == "caddy"
    (plain,) = discover([hostile.proxy_with_raw_ids(tmp_path)])[0]
    assert spark_ingest.proxy_format(plain) is None


def test_cli_spark_ingest_needs_a_lake(tmp_path):
    r = run_cli("ingest", tmp_path, "--engine", "spark")
    assert r.returncode == 1
    assert "--engine spark needs --lake" in r.stderr


@pytest.mark.slow
@pytest.mark.spark
def test_the_jvm_compiler_is_still_on_after_the_spark_tests(spark, spark_lake):
    """The shared session's JVM (runtime.SMALL_LOCAL, its compiler held to the first tier)
    has room left in its code cache after the ingests and the analysis: a full cache turns
    the compiler off and leaves the rest of the run interpreted."""
    mf = spark._jvm.java.lang.management.ManagementFactory
    pools = [p for p in mf.getMemoryPoolMXBeans() if "Code" in p.getName()]
    assert pools
    for p in pools:
        peak, most = p.getPeakUsage().getUsed(), p.getPeakUsage().getMax()
        assert most <= 0 or peak < most * 0.98, (p.getName(), peak, most)
