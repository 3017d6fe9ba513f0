"""The format and proxy registries: a format or a proxy registered in one place is
found by name, read, counted, offered as `--source` and documented; the CLI, the
folder discovery and docs/contract.md agree with the registries."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from replaygate.core import db as dbm
from replaygate.core.config import Config
from replaygate.core.errors import ReplaygateError
from replaygate.ingest import adapters, readers
from replaygate.ingest.load import discover, ingest

ROOT = Path(__file__).resolve().parent.parent


def _tsv_sql(r: readers.Reading) -> str:
    """A toy reader: tab-separated values with a header row."""
    header = r.path.read_text(encoding="utf-8").splitlines()[0].split("\t")
    values = {n: f"c{header.index(n)}" for n in r.names if n in header}
    columns = ", ".join(f"'c{i}': 'VARCHAR'" for i in range(len(header)))
    cols = ", ".join(readers.field_columns(values, r.names, r.key_available))
    inner = f"""SELECT false AS blank, NULL AS parse_bad, NULL AS schema, {cols}
        FROM read_csv($path, header = true, delim = '\t', quote = '', auto_detect = false,
                      columns = {{{columns}}})"""
    return readers.wrap(inner, r.src)


TSV = readers.Format(
    "tsv", "Tab-separated values", {".tsv": None}, _tsv_sql, gzip=False, row_positions=True
)

# A toy proxy: Traefik's JSON access log with request headers kept.
TRAEFIK = adapters.Proxy(
    "traefik",
    "Traefik",
    detect="json_exists(j, '$.RequestMethod') AND json_exists(j, '$.DownstreamStatus')",
    fixed={
        "ts": "j->>'$.StartUTC'",
        "method": "j->>'$.RequestMethod'",
        "status": "j->>'$.DownstreamStatus'",
        "path": "j->>'$.RequestPath'",
        "session_id": "j->>'$.\"request_Mcp-Session-Id\"'",
    },
    shows=("proxy.session_hmac",),
    doc="a JSON access log with request headers kept",
)


@pytest.fixture
def toy_format(monkeypatch):
    monkeypatch.setitem(readers.FORMATS, TSV.name, TSV)
    return TSV


@pytest.fixture
def toy_proxy(monkeypatch):
    monkeypatch.setitem(adapters.PROXIES, TRAEFIK.name, TRAEFIK)
    return TRAEFIK


def test_a_registered_format_is_discovered_read_and_counted(toy_format, tmp_path):
    path = tmp_path / "sessions-a.tsv"
    rows = [
        ["ts", "session_hmac", "generation", "state"],
        ["2026-11-30T10:00:00Z", "s1", "1", "SESSION_ACTIVE"],
        ["not a time", "s2", "1", "SESSION_ACTIVE"],
        ["2026-11-30T10:00:01Z", "s3", "1", "SESSION_ACTIVE"],
    ]
    path.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    found, skipped = discover([tmp_path])
    assert [(s.name, s.format) for s in found] == [("sessions-a.tsv", "tsv")] and not skipped
    con = dbm.connect(str(tmp_path / "a.duckdb"))
    report = ingest(con, [tmp_path], Config())
    assert report.rows_by_type() == {"sessions": 2}
    # The format's positions are data rows: the bad one is row 2, not line 3.
    assert con.execute('SELECT line, "row" FROM quarantine').fetchall() == [(None, 2)]
    assert con.execute("SELECT format FROM files").fetchone() == ("tsv",)
    assert ".tsv" in readers.expected_names() and "Tab-separated values" in readers.formats_doc()
    # gzip=False: a compressed one is no input file.
    gz = tmp_path / "x.tsv.gz"
    gz.write_bytes(b"")
    with pytest.raises(ReplaygateError, match=r"not an input file \(expected .*\.tsv"):
        discover([gz])


def test_without_its_registration_the_format_is_no_input(tmp_path):
    (tmp_path / "sessions-a.tsv").write_text("ts\n", encoding="utf-8")
    assert discover([tmp_path]) == ([], [str(tmp_path / "sessions-a.tsv")])


def _traefik_line(i: int, session: str | None) -> str:
    rec = {
        "StartUTC": f"2026-11-30T10:00:0{i}Z",
        "RequestMethod": "POST",
        "DownstreamStatus": 200,
        "RequestPath": "/mcp",
    }
    if session:
        rec["request_Mcp-Session-Id"] = session
    return json.dumps(rec)


def test_a_registered_proxy_is_sniffed_read_and_offered(toy_proxy, tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAYGATE_HMAC_KEY", "k")
    log = tmp_path / "access.log"
    log.write_text(
        "\n".join([_traefik_line(1, "raw-1"), _traefik_line(2, None), '{"other": 1}']) + "\n",
        encoding="utf-8",
    )
    assert "traefik" in adapters.sources() and "Traefik" in adapters.titles()
    con = dbm.connect(str(tmp_path / "a.duckdb"))
    assert adapters.sniff(con, log.read_text().splitlines()) == "traefik"
    report = ingest(con, [log], Config())
    assert report.rows_by_type() == {"proxy": 2}
    assert con.execute("SELECT count(session_hmac) FROM proxy").fetchone() == (1,)
    reasons = [r for (r,) in con.execute("SELECT reason FROM quarantine").fetchall()]
    assert len(reasons) == 1 and "Traefik" in reasons[0]
    facts = {f for (f,) in con.execute("SELECT fact FROM file_facts").fetchall()}
    assert "proxy.session_hmac" in facts
    # Forced: any file name is a Traefik log.
    other = tmp_path / "x" / "whatever.txt"
    other.parent.mkdir()
    other.write_text(_traefik_line(3, "raw-3") + "\n", encoding="utf-8")
    con2 = dbm.connect(str(tmp_path / "b.duckdb"))
    assert ingest(con2, [other], Config(), source="traefik").rows_by_type() == {"proxy": 1}


def test_cli_source_choices_are_the_registered_proxies():
    from replaygate.cli import cli

    for name in ("ingest", "watch", "gates"):
        (opt,) = [p for p in cli.commands[name].params if p.name == "source"]
        assert tuple(opt.type.choices) == adapters.sources()
    assert adapters.sources() == ("auto", "contract", "caddy", "nginx", "envoy")


def test_docs_name_every_format_and_proxy():
    contract = (ROOT / "docs" / "contract.md").read_text(encoding="utf-8")
    sources = (ROOT / "docs" / "sources.md").read_text(encoding="utf-8")
    for fmt in readers.FORMATS.values():
        assert all(f"`{s}`" in contract for s in fmt.suffixes), fmt.name
    for proxy in adapters.PROXIES.values():
        assert f"{proxy.title}: {proxy.doc}" in contract, proxy.name
        assert f"\n## {proxy.title}\n" in sources, f"docs/sources.md: a section for {proxy.title}"


def test_config_field_maps_are_for_proxies_with_keys():
    assert set(adapters.field_keys()) == {p.name for p in adapters.PROXIES.values() if p.specs}


@pytest.fixture
def registered():
    """register() as an extension calls it; the toy formats are gone after the test."""
    added: list[str] = []

    def add(fmt: readers.Format) -> readers.Format:
        readers.register(fmt)
        added.append(fmt.name)
        return fmt

    yield add
    for name in added:
        del readers.FORMATS[name]


def test_register_refuses_a_name_or_an_ending_taken(registered):
    with pytest.raises(ValueError, match="'jsonl' is registered already"):
        readers.register(readers.FORMATS["jsonl"])
    clash = readers.Format("other", "Other", {".csv": None}, readers.csv_sql)
    with pytest.raises(ValueError, match="'.csv' is 'csv'"):
        registered(clash)
    assert "other" not in readers.FORMATS
    with pytest.raises(ValueError, match="'nginx' is registered already"):
        adapters.register(adapters.PROXIES["nginx"])


def test_a_toy_format_uses_every_hook(registered, tmp_path):
    """Line counting, CR repair, blank lines, gzip, rejected lines and the fallback
    reader are the format's own: a format registered under another name gets them."""
    import gzip
    import shutil

    from . import hostile

    registered(
        readers.Format(
            "lines",
            "Toy lines",
            {".jsonlines": None},
            readers.jsonl_sql,
            rejected=readers.FORMATS["jsonl"].rejected,
            bare_cr=b" ",
            blank_lines=True,
            doc="a toy",
        )
    )
    registered(
        readers.Format(
            "columns",
            "Toy columns",
            {".cols": None},
            readers.parquet_sql,
            gzip=False,
            lines=False,
            row_positions=True,
            fallback=readers.parquet_epochs,
            fallback_suffix=".parquet",
        )
    )
    src = tmp_path / "src"
    src.mkdir()
    # 6 lines: LF, CRLF, a bare CR inside a line, a blank one, and a bad one
    endings = hostile.mixed_line_endings(src)
    data = tmp_path / "data"
    data.mkdir()
    (data / "sessions-a.jsonlines").write_bytes(endings.read_bytes())
    with gzip.open(data / "sessions-b.jsonlines.gz", "wb") as fh:
        fh.write(endings.read_bytes())
    hostile.parquet_far_timestamps(src)
    shutil.copy(src / "sessions-ts-ms.parquet", data / "sessions-c.cols")
    con = dbm.connect(str(tmp_path / "a.duckdb"))
    report = ingest(con, [data], Config())
    by_name = {Path(f.path).name: f for f in report.files}
    for name in ("sessions-a.jsonlines", "sessions-b.jsonlines.gz"):
        f = by_name[name]
        assert (f.lines, f.rows, f.quarantined, f.blank) == (6, {"sessions": 4}, 1, 1), f
    # the fallback reader: a timestamp beyond DuckDB's range is one row's bad value
    f = by_name["sessions-c.cols"]
    assert (f.status, f.lines, f.rows, f.quarantined) == ("loaded", 4, {"sessions": 3}, 1)
    stored = {
        r[0]: r[1:] for r in con.execute("SELECT name, format, compression FROM files").fetchall()
    }
    assert stored == {
        "sessions-a.jsonlines": ("lines", None),
        "sessions-b.jsonlines.gz": ("lines", "gzip"),
        "sessions-c.cols": ("columns", None),
    }
    # read again: each is known by its format and compression, nothing is read twice
    again = ingest(con, [data], Config())
    assert {f.status for f in again.files} == {"unchanged"}
    # a database written when the compression was part of the format (`lines.gz`) is
    # brought to the two columns when it is opened for writing, and still knows the file
    con.execute(
        "UPDATE files SET format = format || '.gz', compression = NULL WHERE compression = 'gzip'"
    )
    con.close()
    con = dbm.connect(str(tmp_path / "a.duckdb"))
    assert con.execute(
        "SELECT format, compression FROM files WHERE name = 'sessions-b.jsonlines.gz'"
    ).fetchall() == [("lines", "gzip")]
    again = ingest(con, [data], Config())
    assert {f.status for f in again.files} == {"unchanged"}


def test_the_load_and_identity_name_no_format():
    """The load (load.py and its parts) and identity.py ask a format or a proxy what it
    does; none names one (a word of its name in code, comments or docs, or one of its
    file-name endings as a string), so a registered format or proxy behaves the same as
    the built-in ones."""
    from replaygate.ingest import adapters

    from .test_floorplan import LOAD_PARTS

    folder = ROOT / "ingest"
    names = {f.name for f in readers.FORMATS.values()} | set(adapters.PROXIES)
    endings = {s for f in readers.FORMATS.values() for s in f.suffixes}
    found = []
    for stem in sorted(LOAD_PARTS | {"identity"}):
        text = (folder / f"{stem}.py").read_text()
        found += [f"{stem}: {n}" for n in sorted(names) if re.search(rf"\b{n}\b", text, re.I)]
        found += [
            f"{stem}: {node.value!r}"
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.lower() in names | endings
        ]
    assert found == []
    assert names >= {"jsonl", "csv", "parquet", "nginx", "envoy", "caddy"} and ".jsonl" in endings


def test_the_load_makes_a_readers_reading_in_one_place():
    """What a format's reader is given (the file, its compression, the fields, the
    connection, the proxy settings) is made in one place of the load, for its fast and
    its line-exact read alike: the two reads cannot be given different things."""
    from .test_floorplan import LOAD_PARTS

    made = []
    for stem in sorted(LOAD_PARTS):
        for node in ast.walk(ast.parse((ROOT / "ingest" / f"{stem}.py").read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name == "Reading":
                    made.append(f"{stem}.py:{node.lineno}")
    assert len(made) == 1, made
