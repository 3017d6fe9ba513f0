"""Messy and hostile inputs to ingest: a fault costs a row, then a file, never the run;
every line is loaded, quarantined or blank; raw ids are never stored."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replaygate.core import config as cfg
from replaygate.core import db as dbm
from replaygate.core.config import Config
from replaygate.core.errors import ReplaygateError
from replaygate.ingest import identity, load, readers
from replaygate.ingest.load import ingest

from . import hostile


def _ingest(tmp_path, *paths, config=None):
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    return con, ingest(con, [str(p) for p in paths], config or Config())


def _by_name(report):
    return {f.path.rsplit("/", 1)[-1]: f for f in report.files}


def test_caddy_log_with_bom_or_cut_first_line_is_read_as_caddy(tmp_path):
    base_dir = tmp_path / "base"
    base_dir.mkdir()
    (base_dir / "plain.log").write_bytes(hostile.CADDY.read_bytes())
    _, base = _ingest(base_dir, base_dir / "plain.log")
    good, bad = base.files[0].rows["proxy"], base.files[0].quarantined
    assert good >= 4
    d = hostile.caddy_with_bom_and_cut_line(tmp_path)
    con, rep = _ingest(tmp_path, d / "bom.log", d / "cut.log")
    files = _by_name(rep)
    assert files["bom.log"].rows.get("proxy") == good and files["bom.log"].quarantined == bad
    # The cut tail is one quarantined line; every whole line is read as Caddy.
    assert files["cut.log"].rows.get("proxy") == good
    assert files["cut.log"].quarantined == bad + 1
    raw = con.execute("SELECT count(*) FROM proxy WHERE raw_session_id").fetchone()[0]
    assert raw > 0  # the raw-session-id evidence is not missed


def test_timestamps_outside_the_bounds_are_quarantined_rows(tmp_path):
    con, rep = _ingest(tmp_path, hostile.edge_timestamps(tmp_path))
    (f,) = rep.files
    assert f.rows == {"sessions": 3} and f.quarantined == 4
    reasons = {r for (r,) in con.execute("SELECT DISTINCT reason FROM quarantine").fetchall()}
    assert reasons == {"ts: outside the plausible time range"}
    lo, hi = con.execute("SELECT min(ts), max(ts) FROM sessions").fetchone()
    assert lo.year == hi.year == 2026


def test_timestamp_bounds_are_configurable(tmp_path):
    conf = cfg.from_mapping({"ts_bounds": {"min": "1960-01-01T00:00:00Z"}})
    con, rep = _ingest(tmp_path, hostile.edge_timestamps(tmp_path), config=conf)
    assert rep.files[0].rows == {"sessions": 4}  # 1970 is inside now


def test_out_of_range_numbers_cost_one_row_each(tmp_path):
    d = hostile.out_of_range_numbers(tmp_path)
    con, rep = _ingest(tmp_path, d)
    for f in rep.files:
        assert f.status == "loaded" and f.rows == {"sessions": 5} and f.quarantined == 4, f


def test_one_unreadable_file_never_aborts_the_run(tmp_path):
    d = hostile.unreadable_files(tmp_path)
    con, rep = _ingest(tmp_path, d)
    files = _by_name(rep)
    assert files["sessions-good.jsonl"].rows == {"sessions": 4}
    assert files["sessions-plain.jsonl.gz"].status == "unreadable"
    assert "not gzip" in files["sessions-plain.jsonl.gz"].note
    for name in ("dispatches-badutf8.csv", "streams-short.csv.gz"):
        f = files[name]
        assert f.status == "unreadable" or f.quarantined >= 1, f
    assert con.execute("SELECT count(*) FROM sessions").fetchone()[0] == 4


def test_csv_with_a_bom_loads_every_row(tmp_path):
    con, rep = _ingest(tmp_path, hostile.csv_with_bom(tmp_path))
    assert rep.files[0].rows == {"sessions": 5} and rep.files[0].quarantined == 0


def test_raw_ids_in_urls_are_redacted_and_blank_ids_are_null(tmp_path):
    con, rep = _ingest(tmp_path, hostile.raw_ids_elsewhere(tmp_path))
    assert rep.files[0].rows == {"proxy": 4}
    stored = " ".join(str(r) for r in con.execute("SELECT * FROM proxy").fetchall())
    assert "RAWID" not in stored and "[redacted]" in stored
    hashed = con.execute("SELECT count(session_hmac) FROM proxy").fetchone()[0]
    assert hashed == 0
    paths = [p for (p,) in con.execute("SELECT path FROM proxy ORDER BY pos").fetchall()]
    assert paths[:2] == ["/messages?session_id=[redacted]&x=1", "/mcp?sessionId=[redacted]"]


def test_folders_list_what_they_skip(tmp_path):
    d = hostile.odd_folder(tmp_path / "in", tmp_path / "outside")
    con, rep = _ingest(tmp_path, d)
    assert [f.rows for f in rep.files] == [{"sessions": 1}]
    skipped = " ".join(rep.skipped)
    for why in ("symlinked folder", "broken symlink", "FIFO"):
        assert why in skipped


@pytest.mark.parametrize(
    "text, word",
    [
        ("recovery_threshold_s = nan", "recovery_threshold_s"),
        ("reconnect_budget_qps = -1.0", "reconnect_budget_qps"),
        ("retry_window_s = inf", "retry_window_s"),
        ("[min_samples]\nrecovery_p99 = -5", "min_samples.recovery_p99"),
        ('hmac_key_env = ""', "hmac_key_env"),
        ('[ts_bounds]\nmin = "yesterday"', "ts_bounds.min"),
        ('[ts_bounds]\nmin = "2200-01-01T00:00:00Z"', "ts_bounds.min"),
    ],
)
def test_config_values_are_validated(tmp_path, text, word):
    p = tmp_path / "replaygate.toml"
    p.write_text(text + "\n")
    with pytest.raises(ReplaygateError, match=word.replace(".", r"\.")):
        cfg.load(p)


def test_config_unreadable_is_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'hmac_key_env = "\xff"\n')
    with pytest.raises(ReplaygateError, match="not UTF-8"):
        cfg.load(bad)
    with pytest.raises(ReplaygateError, match="folder"):
        cfg.load(tmp_path)


# -- counting identity under fuzzing ------------------------------------------------------
_JSON_LINE = st.one_of(
    st.builds(lambda: hostile.lines([hostile.session_record()])[:-1]),
    st.binary(max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b),
    st.sampled_from(
        [
            b"",
            b"   ",
            b"\t",
            b" \r",
            b"\x0c",
            b"{",
            b"[]",
            b"null",
            b'{"ts": 1e400}',
            b"\xef\xbb\xbf{}",
        ]
    ),
    st.builds(
        lambda g, ts: hostile.lines([hostile.session_record(ts=ts, generation=g)])[:-1],
        st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=5)),
        st.one_of(st.integers(), st.text(max_size=8)),
    ),
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_JSON_LINE, min_size=1, max_size=12))
def test_fuzz_json_lines_counting_identity(tmp_path_factory, body):
    tmp = tmp_path_factory.mktemp("fz")
    data = b"\n".join(body) + b"\n"
    (tmp / "sessions-fuzz.jsonl").write_bytes(data)
    con, rep = _ingest(tmp, tmp / "sessions-fuzz.jsonl")  # no exception escapes
    (f,) = rep.files
    total_lines = data.count(b"\n")
    # Blank: nothing but spaces, tabs and CRs (JSON's insignificant whitespace).
    blank = sum(1 for ln in data.split(b"\n")[:-1] if not ln.strip(b" \t\r"))
    assert f.status != "unreadable", (data, f)
    assert sum(f.rows.values()) + f.quarantined + blank == total_lines, (data, f)
    assert (f.blank, f.lines) == (blank, total_lines)  # reported, so a user can check it
    con.close()


_CELL = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
# Lines no CSV writer produces: a stray quote, bare CR, CRLF, blank. (A quote left open
# is the last line: what follows one is delimited by each reader's own error recovery.)
_RAW_CSV_LINE = st.sampled_from(['x,"y"z,1,2', "a,b\rc,d", "\r", "", "  "])
_OPEN_QUOTE = '2026-11-29T07:45:01.000Z,"h,1,SESSION_ACTIVE'


def csv_data_rows(text: str) -> int:
    """Data rows of a CSV as Python's csv module delimits them: a line break inside
    quotes does not end a row, an unquoted CR does, an unterminated quote runs to the
    end of the file; blank lines are not rows; the header is not a row."""
    import csv
    import io

    return sum(1 for r in csv.reader(io.StringIO(text, newline="")) if r) - 1


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(
        st.one_of(st.tuples(_CELL, _CELL, _CELL, _CELL), _RAW_CSV_LINE), min_size=1, max_size=10
    ),
    st.booleans(),
    st.sampled_from(["\n", "\r\n"]),
    st.booleans(),
)
def test_fuzz_csv_counting_identity(tmp_path_factory, rows, good_ts, newline, open_quote):
    import csv
    import io

    tmp = tmp_path_factory.mktemp("fzc")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator=newline)
    w.writerow(["ts", "session_hmac", "generation", "state"])
    for i, r in enumerate(rows):
        if isinstance(r, str):
            buf.write(r + newline)
            continue
        ts = f"2026-11-29T07:45:{i:02d}.000Z" if good_ts else r[0]
        w.writerow([ts, r[1] or "h", r[2], r[3] if i % 2 else "SESSION_ACTIVE"])
    if open_quote:
        buf.write(_OPEN_QUOTE + newline)
    text = buf.getvalue()
    (tmp / "sessions-fuzz.csv").write_bytes(text.encode())
    con, rep = _ingest(tmp, tmp / "sessions-fuzz.csv")  # no exception escapes
    (f,) = rep.files
    assert f.status != "unreadable", (text, f)
    assert sum(f.rows.values()) + f.quarantined == csv_data_rows(text), (text, f)
    con.close()


def test_cli_loads_the_good_files_and_says_one_was_unreadable(tmp_path):
    from .conftest import run_cli

    d = hostile.unreadable_files(tmp_path / "in")
    db = tmp_path / "cli.duckdb"
    r = run_cli("ingest", str(d), "--db", str(db), "--json", "--no-analyse")
    assert r.returncode == 1 and "could not be read" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    doc = json.loads(r.stdout)
    assert doc["rows_loaded"].get("sessions") == 4
    assert any(f["status"] == "unreadable" for f in doc["files"])
    (good,) = [f for f in doc["files"] if f["path"].endswith("sessions-good.jsonl")]
    assert (good["lines"], good["quarantined"], good["blank"]) == (6, 0, 2)
    assert "lines read" not in r.stdout  # --json prints one document


@pytest.mark.parametrize("gzipped", [False, True])
def test_ids_dropped_without_a_key_are_hashed_once_the_key_is_set(tmp_path, monkeypatch, gzipped):
    from replaygate.ingest.redact import hmac_hex

    key = "test-key-not-secret"
    path = hostile.proxy_with_raw_ids(tmp_path, gzipped)
    monkeypatch.delenv("REPLAYGATE_HMAC_KEY")
    con, rep = _ingest(tmp_path, path)
    assert rep.files[0].rows == {"proxy": 4} and "ingest the same files again" in rep.warnings[0]
    assert con.execute("SELECT count(session_hmac) FROM proxy").fetchone()[0] == 0
    con.close()
    # Still no key: nothing new to read.
    con, rep = _ingest(tmp_path, path)
    assert rep.files[0].status == "unchanged"
    con.close()
    monkeypatch.setenv("REPLAYGATE_HMAC_KEY", key)
    con, rep = _ingest(tmp_path, path)
    (f,) = rep.files
    assert f.status == "replaced" and f.rows == {"proxy": 4} and not rep.warnings
    got = con.execute("SELECT session_hmac, count(*) FROM proxy GROUP BY ALL ORDER BY 1")
    want = sorted((hmac_hex(key.encode(), f"{hostile.RAW_ID}-{i}"), 2) for i in range(2))
    assert got.fetchall() == want  # rows replaced, not doubled
    assert hostile.RAW_ID not in " ".join(str(r) for r in con.execute("FROM proxy").fetchall())
    con.close()
    # Hashed now: a further ingest has nothing to do.
    con, rep = _ingest(tmp_path, path)
    assert rep.files[0].status == "unchanged"


# -- broken gzip streams: every line is counted once ---------------------------------------
def _quarantine(con):
    return con.execute("SELECT line, reason FROM quarantine ORDER BY line").fetchall()


def test_truncated_gzip_counts_its_break_once(tmp_path):
    path, before = hostile.gzip_truncated(tmp_path)
    con, rep = _ingest(tmp_path, path)
    (f,) = rep.files
    complete = before.count(b"\n")
    assert before[-1:] != b"\n"  # the cut falls inside a line: part of the break
    assert f.rows == {"sessions": complete} and f.quarantined == 1
    assert _quarantine(con) == [
        (complete + 1, f"truncated gzip: the stream breaks after line {complete}")
    ]
    assert sum(f.rows.values()) + f.quarantined == f.lines == complete + 1


def test_gzip_corrupt_mid_stream_keeps_the_rows_before_the_damage(tmp_path):
    path, before = hostile.gzip_corrupt_midstream(tmp_path)
    con, rep = _ingest(tmp_path, path)
    (f,) = rep.files
    complete = before.count(b"\n")
    assert complete > 9_000
    assert f.rows == {"sessions": complete} and f.quarantined == 1
    assert _quarantine(con) == [
        (complete + 1, f"corrupt gzip: the stream breaks after line {complete}")
    ]
    pos = con.execute("SELECT max(pos), count(DISTINCT pos) FROM sessions").fetchone()
    assert pos == (complete, complete)
    assert sum(f.rows.values()) + f.quarantined == f.lines


def test_gzip_whose_check_fails_is_flagged_once(tmp_path):
    path, data = hostile.gzip_bad_check(tmp_path)
    con, rep = _ingest(tmp_path, path)
    (f,) = rep.files
    n = data.count(b"\n")
    assert f.rows == {"sessions": n} and f.quarantined == 1
    ((line, reason),) = _quarantine(con)
    assert line == n + 1 and reason.startswith("corrupt gzip: its data check fails")


@pytest.mark.slow
def test_line_over_2_gib_in_a_gzip_is_one_quarantined_row(tmp_path):
    path = hostile.gzip_with_huge_line(tmp_path)
    con, rep = _ingest(tmp_path, path)
    (f,) = rep.files
    assert f.rows == {"sessions": 5} and f.quarantined == 1
    assert _quarantine(con) == [(3, "line too long")]
    assert [p for (p,) in con.execute("SELECT pos FROM sessions ORDER BY pos").fetchall()] == [
        1,
        2,
        4,
        5,
        6,
    ]


def test_parquet_timestamp_of_2_pow_62_is_one_quarantined_row(tmp_path):
    con, rep = _ingest(tmp_path, hostile.parquet_far_timestamps(tmp_path))
    assert len(rep.files) == 3
    for f in rep.files:
        assert f.status == "loaded" and f.rows == {"sessions": 3} and f.quarantined == 1, f
        assert f.lines == 4
    rows = con.execute('SELECT DISTINCT "row" FROM quarantine').fetchall()
    assert rows == [(4,)]


def test_a_file_that_cannot_be_opened_costs_only_itself(tmp_path, monkeypatch):
    """Permission denied (tests run as root, so chmod would not stop them): the opener
    refuses one file, at the first look or only once the run has begun (a file whose
    mode changes, or that is rotated away, mid-run)."""
    import builtins

    d = hostile.unreadable_files(tmp_path / "in")
    denied = d / "sessions-denied.jsonl"
    denied.write_bytes(hostile.lines([hostile.session_record()]))
    real_open = builtins.open
    for allowed in (0, 1):
        seen = {"n": 0}

        def guarded(file, *args, _seen=seen, _allowed=allowed, **kw):
            if str(file) == str(denied):
                _seen["n"] += 1
                if _seen["n"] > _allowed:
                    raise PermissionError(13, "Permission denied")
            return real_open(file, *args, **kw)

        monkeypatch.setattr(builtins, "open", guarded)
        con, rep = _ingest(tmp_path / f"db{allowed}", d)
        monkeypatch.setattr(builtins, "open", real_open)
        files = _by_name(rep)
        assert files["sessions-denied.jsonl"].status == "unreadable"
        assert "PermissionError" in files["sessions-denied.jsonl"].note
        assert files["sessions-good.jsonl"].rows == {"sessions": 4}
        con.close()


def test_lines_end_at_lf_only_whatever_crs_they_hold(tmp_path):
    con, rep = _ingest(tmp_path, hostile.mixed_line_endings(tmp_path))
    (f,) = rep.files
    assert (f.rows, f.quarantined, f.blank, f.lines) == ({"sessions": 4}, 1, 1, 6)
    assert [p for (p,) in con.execute("SELECT pos FROM sessions ORDER BY pos").fetchall()] == [
        1,
        2,
        3,
        5,
    ]
    assert _quarantine(con) == [(6, "unparseable JSON")]


def test_csv_quote_left_open_is_one_row_naming_the_lines_it_joins(tmp_path):
    path = hostile.csv_unterminated_quote(tmp_path)
    con, rep = _ingest(tmp_path, path)
    (f,) = rep.files
    assert csv_data_rows(path.read_text()) == 2 == f.lines
    assert f.rows == {"sessions": 1} and f.quarantined == 1
    assert _quarantine(con) == [
        (3, "malformed CSV row: unquoted value (a quote left open makes lines 3-5 one row)")
    ]
    assert rep.quarantine_reasons == {"malformed CSV row: unquoted value": 1}


# -- huge inputs: memory per file stays bounded, a run of many files is batched ------------
def _peak_mb_of_ingest(tmp_path, path) -> tuple[int, list[tuple]]:
    """Ingest `path` in a process of its own: (its peak RSS in MB, the quarantine)."""
    db = tmp_path / "huge.duckdb"
    # The process's own high-water mark (VmHWM of its address space): a child's ru_maxrss
    # also counts the parent's resident set at the fork, which grows as the suite runs.
    code = (
        "import sys; from replaygate.core import db; from replaygate.core.config import "
        "Config; from replaygate.ingest.load import ingest; "
        "ingest(db.connect(sys.argv[1]), [sys.argv[2]], Config()); "
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(db), str(path)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    con = dbm.connect(str(db), read_only=True)
    try:
        return int(r.stdout.split()[-1]) // 1024, _quarantine(con)
    finally:
        con.close()


@pytest.mark.slow
def test_a_100_mb_line_in_plain_json_lines_is_one_row_in_bounded_memory(tmp_path):
    """DuckDB's reader holds a whole line before it refuses it (505 MB for a 100 MB
    line); the line never reaches it."""
    path = tmp_path / "sessions-long.jsonl"
    good = hostile._session_lines(2)
    with open(path, "wb") as fh:
        fh.write(good + b'{"pad": "')
        block = b"a" * (1 << 20)
        for _ in range(100):
            fh.write(block)
        fh.write(b'"}\n' + good)
    peak, quarantine = _peak_mb_of_ingest(tmp_path, path)
    assert quarantine == [(3, "line too long")]
    assert peak < 300, f"peak {peak} MB for one 100 MB line"


@pytest.mark.slow
def test_a_gzip_bomb_of_one_line_is_read_in_bounded_memory(tmp_path):
    """A gzip whose 1 MB chunks inflate a thousandfold is inflated in bounded pieces
    (a 1 MB gzip of one 1 GiB line peaked at 6.9 GB)."""
    path = hostile.gzip_with_huge_line(tmp_path, size=512 << 20)
    peak, quarantine = _peak_mb_of_ingest(tmp_path, path)
    assert quarantine == [(3, "line too long")]
    assert peak < 400, f"peak {peak} MB for one 512 MiB line"


def test_overlong_lines_are_quarantined_where_they_are(tmp_path, monkeypatch):
    """Lines over the limit are left out of what the reader reads; they, and the lines
    the reader itself refuses after them (bad UTF-8), keep their own line numbers, and
    every row after them its position."""
    monkeypatch.setattr(readers, "MAX_LINE", 2000)
    monkeypatch.setattr(identity, "MAX_LINE", 2000)
    good = hostile._session_lines(1)
    long = b'{"pad": "' + b"a" * 5000 + b'"}\n'
    content = good + long + good + long + long + b"\xff\xfe bad\n" + good + b"\n" + long
    for gzipped in (False, True):
        d = tmp_path / f"gz{gzipped}"
        d.mkdir()
        path = d / ("sessions.jsonl.gz" if gzipped else "sessions.jsonl")
        path.write_bytes(gzip.compress(content) if gzipped else content)
        con, rep = _ingest(d, path)
        (f,) = rep.files
        assert _quarantine(con) == [
            (2, "line too long"),
            (4, "line too long"),
            (5, "line too long"),
            (6, "invalid UTF-8"),
            (9, "line too long"),
        ]
        assert [p for (p,) in con.execute("SELECT pos FROM sessions ORDER BY pos").fetchall()] == [
            1,
            3,
            7,
        ]
        assert sum(f.rows.values()) + f.quarantined + f.blank == f.lines == 9
        con.close()


def test_many_files_load_in_bounded_batches(tmp_path, monkeypatch):
    """Files are staged and loaded a batch at a time (20,000 one-line files staged at
    once ran out of memory); the result is that of one batch."""
    for i in range(23):
        recs = (hostile.session_record(generation=100 * i + k) for k in range(1 + i % 3))
        (tmp_path / f"sessions-{i:03d}.jsonl").write_bytes(hostile.lines(recs))
    (tmp_path / "one").mkdir()
    one, _ = _ingest(tmp_path / "one", tmp_path)
    held: list[int] = []
    release = load._Loader.release

    def counting(self):
        held.append(len(self.temp_tables))
        release(self)

    monkeypatch.setattr(load, "BATCH_FILES", 5)
    monkeypatch.setattr(load._Loader, "release", counting)
    (tmp_path / "many").mkdir()
    con, rep = _ingest(tmp_path / "many", tmp_path)
    assert len(held) == 5 + 1 and max(held) <= 2 * 5  # five batches, then the close
    assert all(f.status == "loaded" for f in rep.files) and len(rep.files) == 23
    for f in rep.files:
        assert sum(f.rows.values()) + f.quarantined + f.blank == f.lines
    rows = "SELECT f.path, s.* EXCLUDE (file_id) FROM sessions s JOIN files f USING (file_id)"
    assert sorted(con.execute(rows).fetchall()) == sorted(one.execute(rows).fetchall())


def test_a_line_holding_the_line_readers_delimiter_is_refused_whole(tmp_path):
    """The line reader splits at US (0x1F): a line holding one was read as blank, or as
    the JSON before it; raw control characters are never valid JSON."""
    good = hostile._session_lines(1)
    path = tmp_path / "sessions.jsonl"
    path.write_bytes(b"\x1f\n" + good[:-1] + b"\x1f\n" + good)
    con, rep = _ingest(tmp_path, path)
    (f,) = rep.files
    assert [r[0] for r in _quarantine(con)] == [1, 2]
    assert (sum(f.rows.values()), f.quarantined, f.blank, f.lines) == (1, 2, 0, 3)
    assert con.execute("SELECT pos FROM sessions").fetchall() == [(3,)]


def test_a_session_parameter_is_redacted_however_its_name_is_encoded():
    """A server decodes `session%5Fid` to `session_id` before reading it: the raw id in
    its value is as raw as with the plain name."""
    import duckdb

    from replaygate.ingest.redact import redact_url_sql

    con = duckdb.connect()
    for path in (
        "/messages?session%5Fid=RAWID",
        "/messages?x=1&session%5fid=RAWID&y=2",
        "/messages?%73ession_id=RAWID",
        "/messages?%53ESSION%5FID=RAWID",
        "/sse?sessionI%64=RAWID",
        "/mcp?mcp%2Dsession%2did=RAWID;v=1",
        "/mcp?MCP-SESSION-ID=RAWID",
    ):
        (out,) = con.execute(f"SELECT {redact_url_sql('$p')}", {"p": path}).fetchone()
        assert "RAWID" not in out and "=[redacted]" in out, (path, out)
    for path in ("/mcp", "/m?session_idx=1", "/m?xsession_id=1", "/m?q=session%5Fid", None):
        (out,) = con.execute(f"SELECT {redact_url_sql('$p')}", {"p": path}).fetchone()
        assert out == path


def test_a_stage_or_release_name_of_a_megabyte_is_one_quarantined_row(tmp_path):
    """Stage and release names reach every output: one of 1 MB in an ingested rollout log
    is one quarantined row (it took minutes to print), the other records still load."""
    logs = tmp_path / "logs"
    logs.mkdir()
    huge = "x" * 1_000_000
    (logs / "rollout.csv").write_text(
        "ts,stage,release,action,percent,scope,actor,note\n"
        "2026-11-28T00:00:00Z,canary,r1,start,1,read,bot,\n"
        f"2026-11-28T00:10:00Z,{huge},r1,start,1,read,bot,\n"
        f"2026-11-28T00:20:00Z,canary,{huge},start,1,read,bot,\n"
        "2026-11-28T00:30:00Z,canary,r1,proceed,,,bot,\n"
    )
    con, rep = _ingest(tmp_path, logs)
    (f,) = rep.files
    assert f.rows == {"rollout": 2} and f.quarantined == 2, (f.rows, f.quarantined)
    reasons = sorted(r for (r,) in con.execute("SELECT reason FROM quarantine").fetchall())
    assert reasons == [
        "release: longer than 200 characters",
        "stage: longer than 200 characters",
    ]
    (longest,) = con.execute("SELECT max(length(stage)) FROM rollout").fetchone()
    assert longest == len("canary")
