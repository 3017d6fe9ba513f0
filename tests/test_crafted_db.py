"""A database given to --db may have been made by someone else: its views and macros
never read local files, DuckDB never fetches extensions for it, and its configuration
cannot be changed from inside (core/db.py)."""

from __future__ import annotations

import shutil

import duckdb
import pytest

from replaygate.core import db as dbm
from replaygate.core.errors import ReplaygateError

from .conftest import run_cli


def _crafted(tmp_path, sample_db, sql: str):
    db = tmp_path / "crafted.duckdb"
    shutil.copy(sample_db, db)
    con = duckdb.connect(str(db))
    con.execute(sql)
    con.close()
    return str(db)


def test_a_view_where_a_table_was_expected_is_refused(tmp_path, sample_db, monkeypatch):
    monkeypatch.setenv("RG_SECRET_FOR_TEST", "hunter2-in-the-environment")
    db = _crafted(
        tmp_path,
        sample_db,
        "DROP TABLE rollout; CREATE VIEW rollout AS "
        "SELECT content AS stage FROM read_text('/proc/self/environ')",
    )
    for args in (("status", "--db", db), ("findings", "--db", db), ("gates", "--db", db)):
        r = run_cli(*args, "--json")
        assert r.returncode == 1, (args, r.stdout[:200])
        assert "hunter2" not in r.stdout + r.stderr
        assert "not a replaygate database: it defines views (main.rollout)" in r.stderr
    with pytest.raises(ReplaygateError, match="defines views"):
        dbm.connect(db)


def test_readers_reach_no_file_and_fetch_no_extension(tmp_path, sample_db):
    db = _crafted(
        tmp_path,
        sample_db,
        "CREATE MACRO leak() AS TABLE SELECT content FROM read_text('/proc/self/environ')",
    )
    con = dbm.connect(db, read_only=True)
    with pytest.raises(duckdb.Error, match="(?i)external access|disabled"):
        con.execute("SELECT * FROM leak()").fetchall()
    for setting in ("autoinstall_known_extensions", "autoload_known_extensions"):
        assert con.execute(f"SELECT current_setting('{setting}')").fetchone()[0] is False
    with pytest.raises(duckdb.Error, match="(?i)configuration"):
        con.execute("SET enable_external_access = true")
    con.close()
    writer = dbm.connect(db)
    assert (
        writer.execute("SELECT current_setting('autoinstall_known_extensions')").fetchone()[0]
        is False
    )
    writer.close()


@pytest.mark.parametrize(
    "macro",
    [
        "CREATE MACRO lower(x) AS 'not lower'",
        "CREATE MACRO \"Current_Database\"() AS 'elsewhere'",
        "CREATE MACRO \"||\"(a, b) AS 'not a concatenation'",
        "CREATE MACRO read_text(f) AS TABLE SELECT 1 AS content",
    ],
    ids=["scalar", "any case", "operator", "table function"],
)
def test_a_macro_in_the_name_of_a_duckdb_function_is_refused(tmp_path, sample_db, macro):
    # A bare name resolves to the database's macro before DuckDB's own function: every
    # query that calls it (an operator too) would run what the database says.
    db = _crafted(tmp_path, sample_db, macro)
    r = run_cli("status", "--db", db, "--json")
    assert r.returncode == 1, r.stdout[:200]
    assert "takes the name of a DuckDB function" in r.stderr
    for read_only in (True, False):
        with pytest.raises(ReplaygateError, match=r"its macro main\.\S+ takes the name"):
            dbm.connect(db, read_only=read_only)


def test_a_macro_cannot_hide_a_view_from_the_check(tmp_path, sample_db):
    # The check asks DuckDB's own functions by their qualified names: a database that
    # shadows current_database() or duckdb_views() still shows its views.
    db = _crafted(
        tmp_path,
        sample_db,
        "DROP TABLE rollout; CREATE VIEW rollout AS SELECT 1 AS stage; "
        "CREATE MACRO current_database() AS 'elsewhere'; "
        "CREATE MACRO duckdb_views() AS TABLE SELECT 1 AS x WHERE false",
    )
    with pytest.raises(ReplaygateError, match="defines views"):
        dbm.connect(db, read_only=True)


def test_the_analysis_macros_take_no_duckdb_function_s_name(sample_db):
    # replaygate's own macros (queries/sql/prep/00_macros.sql and the rest) pass the check.
    con = dbm.connect(str(sample_db), read_only=True)
    own = con.execute(
        "SELECT count(*) FROM system.main.duckdb_functions() "
        "WHERE database_name = system.main.current_database() AND NOT internal"
    ).fetchone()[0]
    con.close()
    assert own > 10
