"""Writing the rollout log (`replaygate rollout ...`), reading Argo Rollouts and Flagger
objects into it, `gates --wait`, JUnit output and `replaygate serve`."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from replaygate.core import db as dbm
from replaygate.core.errors import ReplaygateError
from replaygate.ingest import rolloutlog

from .conftest import ROOT, SAMPLE_CONF, run_cli

CD = Path(__file__).parent / "fixtures" / "cd"


# -- rollout start|proceed|hold|rollback|finish ------------------------------------------------


def test_rollout_verbs_append_validated_records_to_a_file(tmp_path):
    log = tmp_path / "logs" / "rollout.jsonl"
    env = {"REPLAYGATE_ACTOR": "deploy-bot"}
    steps = [
        ("start", "--percent", "5", "--scope", "read", "--at", "2026-11-30T01:00:00Z"),
        ("hold", "--note", "waiting for <sample>", "--at", "2026-11-30T01:30:00Z"),
        ("proceed", "--at", "2026-11-30T01:59:00Z"),
        ("finish", "--at", "2026-11-30T02:00:00Z"),
    ]
    for verb, *rest in steps:
        r = run_cli(
            "rollout", verb, "--release", "2.4.0", "--stage", "canary-5pct", *rest,
            "--to", log, env=env,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(r["action"], r["actor"], r["release"]) for r in recs] == [
        ("start", "deploy-bot", "2.4.0"),
        ("hold", "deploy-bot", "2.4.0"),
        ("proceed", "deploy-bot", "2.4.0"),
        ("complete", "deploy-bot", "2.4.0"),
    ]
    assert recs[0]["schema"] == "mcpRollout.v1" and recs[0]["percent"] == 5.0
    assert recs[0]["scope"] == "read" and recs[1]["note"] == "waiting for <sample>"
    # Time defaults to now.
    r = run_cli("rollout", "rollback", "--release", "2.4.0", "--stage", "x", "--to", log, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ts"].endswith("Z") and len(log.read_text().splitlines()) == 5


def test_rollout_refuses_what_ingest_would_quarantine(tmp_path):
    log = tmp_path / "rollout.jsonl"
    r = run_cli("rollout", "start", "--release", "r", "--stage", "s", "--at", "soon", "--to", log)
    assert r.returncode == 1 and "RFC 3339" in r.stderr and not log.exists()
    with pytest.raises(ReplaygateError, match="missing required field stage"):
        rolloutlog.check([rolloutlog.record("start", release="r", stage="")])
    with pytest.raises(ReplaygateError, match="action: not an allowed value"):
        rolloutlog.check([rolloutlog.record("pause", release="r", stage="s")])
    r = run_cli("rollout", "start", "--stage", "s", "--to", log)
    assert r.returncode == 1 and "--release" in r.stderr


def test_a_record_of_another_schema_is_refused_whatever_its_value():
    # Imported JSON may carry a number or an object as its schema: one error, no TypeError.
    rec = rolloutlog.record("start", release="r1", stage="canary-5pct", ts="2026-11-30T10:00:00Z")
    for other in (2, {"v": 1}, [1]):
        with pytest.raises(ReplaygateError, match="not a rollout record"):
            rolloutlog.check([rec, {**rec, "schema": other}, {**rec, "schema": "x"}])


def test_rollout_into_the_database_is_gated_by_release(tmp_path):
    db = tmp_path / "fleet.duckdb"
    for rel, at in (("v1", "2026-11-30T00:00:00Z"), ("v2", "2026-11-30T01:00:00Z")):
        r = run_cli(
            "rollout", "start", "--release", rel, "--stage", "canary", "--scope", "read",
            "--at", at, "--db", db,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
    r = run_cli("gates", "--db", db, "--stage", "canary", "--json")
    assert r.returncode == 1 and "several releases" in r.stderr
    r = run_cli("gates", "--db", db, "--release", "v1", "--stage", "canary", "--json")
    doc = json.loads(r.stdout)
    assert [(s["stage"], s["release"], s["stage_name"]) for s in doc["stages"]] == [
        ("canary@v1", "v1", "canary")
    ]
    con = dbm.connect(str(db), read_only=True)
    files = con.execute("SELECT path, rows_loaded FROM files").fetchall()
    assert files == [("(replaygate rollout)", 1), ("(replaygate rollout)", 1)]


# -- rollout import (readers: tests/test_cdobjects.py) -------------------------------------


def test_import_writes_each_record_once_and_ingest_reads_the_stages(tmp_path):
    log = tmp_path / "rollout.jsonl"
    args = [
        CD / "argo-rollouts" / "rollout-aborted_rollout.yaml",
        CD / "argo-rollouts" / "rollout-aborted_analysisrun.yaml",
        CD / "argo-cd" / "Rollout_canary_healthy_executedAllSteps.yaml",
        CD / "argo-cd" / "Canary_degraded.yaml",
    ]
    for _ in range(2):  # a CD job imports the same objects on every run
        r = run_cli("rollout", "import", *args, "--scope", "read", "--to", log)
        assert r.returncode == 0, r.stderr
    assert "0 new" in r.stderr
    assert len(log.read_text().splitlines()) == 7
    db = tmp_path / "fleet.duckdb"
    assert run_cli("ingest", log, "--db", db).returncode == 0
    r = run_cli("gates", "--db", db, "--all-stages", "--json")
    stages = {s["stage"]: s for s in json.loads(r.stdout)["stages"]}
    assert set(stages) == {"canary-10pct@db976bc44", "canary-40pct@84ccfddd66", "canary@765c47b8f7"}
    assert stages["canary-10pct@db976bc44"]["rolled_back"]
    assert stages["canary@765c47b8f7"]["rolled_back"]
    assert not stages["canary-40pct@84ccfddd66"]["rolled_back"]
    assert stages["canary-40pct@84ccfddd66"]["window"]["end"] == "2019-05-01T21:55:58.000Z"
    # The same import straight into the database adds nothing new either.
    r = run_cli("rollout", "import", *args, "--scope", "read", "--db", db)
    assert r.returncode == 0 and "0 new" in r.stderr, r.stderr


def test_import_of_a_non_json_file_is_one_line(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_bytes(b"\xff\xfe not json")
    r = run_cli("rollout", "import", bad, "--json")
    assert r.returncode == 1 and "not a JSON or YAML document" in r.stderr
    assert "Traceback" not in r.stderr


# -- gates --wait, JUnit ------------------------------------------------------------------


def _rollout_line(ts, stage, action, release="r1"):
    rec = rolloutlog.record(action, release=release, stage=stage, ts=ts, scope="read")
    return rolloutlog.line(rec)


def _origin_line(ts, status):
    return json.dumps(
        {
            "schema": "mcpProxyLog.v1",
            "ts": ts,
            "method": "POST",
            "status": status,
            "origin": "https://evil.example",
        }
    )


def test_wait_ingests_before_each_evaluation_until_rollback(tmp_path):
    from replaygate import gatewait
    from replaygate.core.config import Config

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rollout.jsonl").write_text(_rollout_line("2026-11-30T00:00:00Z", "canary", "start"))
    db = str(tmp_path / "w.duckdb")
    clock = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        clock[0] += s
        if len(slept) == 2:  # an invalid Origin served arrives during the wait
            (logs / "proxy.jsonl").write_text(_origin_line("2026-11-30T00:10:00Z", 200) + "\n")

    # An allow-list the served Origin is not on (with none, a foreign Origin is not judged).
    conf = Config(origin_allowlist=["https://app.example.com"])
    doc = gatewait.wait(
        db, conf, "canary", "r1", [str(logs)], 600, 60, clock=lambda: clock[0], sleep=sleep
    )
    assert doc["stages"][0]["decision"] == "ROLLBACK"
    assert slept == [60, 60]


def test_wait_evaluates_every_interval_until_the_time_is_up(tmp_path):
    from replaygate import gatewait
    from replaygate.core.config import Config

    log = tmp_path / "rollout.jsonl"
    log.write_text(_rollout_line("2026-11-30T00:00:00Z", "canary", "start"))
    clock, slept = [0.0], []

    def sleep(s):
        slept.append(s)
        clock[0] += s

    doc = gatewait.wait(
        str(tmp_path / "w.duckdb"), Config(), "canary", "r1", [str(log)], 150, 60,
        clock=lambda: clock[0], sleep=sleep,
    )  # fmt: skip
    assert doc["stages"][0]["decision"] == "HOLD"
    assert slept == [60, 60, 30]  # evaluations at 0, 60, 120 and 150 s


def test_wait_times_out_as_hold(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rollout.jsonl").write_text(_rollout_line("2026-11-30T00:00:00Z", "canary", "start"))
    db = tmp_path / "w.duckdb"
    t0 = time.monotonic()
    r = run_cli(
        "gates", logs, "--db", db, "--release", "r1", "--stage", "canary",
        "--wait", "1s", "--every", "300ms", "--json",
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert time.monotonic() - t0 >= 1.0
    assert json.loads(r.stdout)["stages"][0]["decision"] == "HOLD"
    assert "gates canary@r1: HOLD (evaluation 1," in r.stderr
    # A stage that never appears is an error once the time is up.
    r = run_cli("gates", "--db", db, "--stage", "later", "--wait", "300ms", "--every", "100ms")
    assert r.returncode == 1 and "no stage named 'later'" in r.stderr


def test_wait_needs_one_stage(tmp_path):
    r = run_cli("gates", "--db", tmp_path / "x.duckdb", "--all-stages", "--wait", "1m")
    assert r.returncode == 1 and "--wait gates one stage" in r.stderr


def test_junit_escapes_logged_data(tmp_path):
    from replaygate.junit import render

    hostile = 'canary"><x/>&\x01\x1b[31m\u202e'
    doc = {
        "stages": [
            {
                "stage": hostile,
                "release": "r</release>",
                "stage_name": hostile,
                "scope": "read",
                "decision": "ROLLBACK",
                "gates": [
                    {"id": "a", "status": "fail", "reason": f"a: {hostile} served"},
                    {"id": "b", "status": "insufficient", "reason": "b: 1 of 2"},
                    {"id": "c", "status": "pass", "reason": "c: ok"},
                    {"id": "d", "status": "not_applicable", "reason": "d: n/a"},
                ],
            }
        ]
    }
    xml = render(doc)
    root = ET.fromstring(xml.encode())  # well-formed despite the control characters
    suite = root.find("testsuite")
    assert suite.get("name") == 'gates canary"><x/>&\ufffd\ufffd[31m[U+202E]'
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "1", "1")
    assert suite.find("testcase/failure").get("message").startswith('a: canary"><x/>&')
    assert root.find(".//x") is None


def test_gates_junit_file_from_the_sample(sample_db, tmp_path):
    out = tmp_path / "gates.xml"
    r = run_cli("gates", "--db", sample_db, "--config", SAMPLE_CONF, "--all-stages", "--junit", out)
    assert r.returncode == 3
    root = ET.parse(out).getroot()
    names = [s.get("name") for s in root.findall("testsuite")]
    assert "gates write-10pct" in names and int(root.get("failures")) > 0


# -- serve ---------------------------------------------------------------------------------


def _get(url, method="GET", data=None):
    body = data if data is not None else (b"{}" if method == "POST" else None)
    req = urllib.request.Request(url, method=method, data=body)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@contextlib.contextmanager
def served(db, *extra):
    """`replaygate serve` on a free port, once it answers from an analysis."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "replaygate", "serve", "--db", str(db), "--port", "0", *extra],
        cwd=ROOT, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = proc.stderr.readline()
        assert "http://127.0.0.1:" in line, line
        base = "http://" + line.split("http://", 1)[1].split("/gates", 1)[0]
        deadline = time.monotonic() + 120
        while _get(f"{base}/healthz")[0] != 200:
            assert time.monotonic() < deadline, "serve never read an analysis"
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_answers_the_three_decisions(sample_db, tmp_path):
    db = tmp_path / "served.duckdb"
    shutil.copy(sample_db, db)
    # A new release starts a stage after the sample's data: nothing to judge yet (HOLD).
    r = run_cli(
        "rollout", "start", "--release", "r9", "--stage", "canary", "--scope", "read",
        "--at", "2026-11-29T00:00:00Z", "--db", db,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    with served(db, "--config", SAMPLE_CONF) as base:
        code, doc = _get(f"{base}/gates/-/write-10pct-v2")
        assert (code, doc["decision"], doc["stages"][0]["decision"]) == (200, "PROCEED", "PROCEED")
        code, doc = _get(f"{base}/gates/r9/canary")
        assert (code, doc["decision"], doc["stage"]) == (409, "HOLD", "canary@r9")
        code, doc = _get(f"{base}/gates/-/write-10pct")
        assert (code, doc["decision"]) == (412, "ROLLBACK")
        assert doc["reasons"] == doc["stages"][0]["reasons"] and doc["reasons"]
        # Flagger webhooks POST; the codes are the same.
        assert _get(f"{base}/gates/-/write-10pct", "POST")[0] == 412
        assert _get(f"{base}/gates/r9/_")[0] == 409  # the release's newest stage
        assert _get(f"{base}/gates/-/write-10pct?ok=any")[0] == 200
        assert _get(f"{base}/gates/-/write-10pct?ok=rollback")[0] == 200
        assert _get(f"{base}/gates/r9/canary?ok=rollback")[0] == 409
        code, doc = _get(f"{base}/gates/r9/nope")
        assert (
            code == 404
            and doc["error"] == "no stage named 'nope' of release 'r9' in the rollout log"
        )
        assert "write-10pct" not in doc["error"]  # the 404 lists no stages
        # Not imported yet, asked by an Argo web metric: HOLD, never an error.
        code, doc = _get(f"{base}/gates/r9/nope?ok=any")
        assert (code, doc["decision"], doc["reasons"]) == (
            200,
            "HOLD",
            ["stage not in the rollout log"],
        )
        assert _get(f"{base}/other")[0] == 404
        assert _get(f"{base}/gates/-/write-10pct", "DELETE")[0] == 405
        assert _get(f"{base}/healthz")[0] == 200
        # The answers are in the decision history (appended by the refresher).
        from replaygate.audit import decisionlog

        deadline = time.monotonic() + 60
        while True:
            rows = decisionlog.read(decisionlog.file_for_db(db))
            asked = {x["stage"] for x in rows if x.get("source") == "serve"}
            if asked >= {"write-10pct", "canary@r9"}:
                break
            assert time.monotonic() < deadline, rows
            time.sleep(0.5)


def _raw(base, data: bytes) -> bytes:
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_serve_holds_under_abuse_and_while_the_database_is_busy(sample_db, tmp_path):
    db = tmp_path / "served.duckdb"
    shutil.copy(sample_db, db)
    with served(db, "--config", SAMPLE_CONF) as base:
        # A bad Content-Length, a 64 KiB request line: a clean 4xx, never a traceback.
        bad = _raw(base, b"POST /gates/-/write-10pct HTTP/1.1\r\nContent-Length: x\r\n\r\n")
        assert bad.startswith(b"HTTP/1.0 400")
        neg = _raw(base, b"POST /gates/-/write-10pct HTTP/1.1\r\nContent-Length: -5\r\n\r\n")
        assert neg.startswith(b"HTTP/1.0 400")
        long = _raw(base, b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n")
        assert long.split(b" ")[1] in (b"414", b"400")
        # Another process holds the database for writing (an import, an analysis): the
        # answer comes from the last analysis, at once.
        con = dbm.connect(str(db))
        try:
            t0 = time.monotonic()
            code, doc = _get(f"{base}/gates/-/write-10pct")
            assert (code, doc["decision"]) == (412, "ROLLBACK")
            assert time.monotonic() - t0 < 1.0
        finally:
            con.close()


def test_serve_connection_cap_and_idle_timeout(sample_db, tmp_path):
    from replaygate.core.config import load as load_config
    from replaygate.serve import make_server

    db = tmp_path / "served.duckdb"
    shutil.copy(sample_db, db)
    server = make_server(
        str(db), load_config(SAMPLE_CONF), port=0, quiet=True, max_connections=2, timeout_s=1.0
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert server.wait_ready()
        host, port = server.server_address[:2]
        idle = [socket.create_connection((host, port)) for _ in range(2)]
        time.sleep(0.2)
        # Both slots held by silent clients: the next one gets a 503 at once.
        assert _raw(f"http://{host}:{port}", b"GET /healthz HTTP/1.0\r\n\r\n").startswith(
            b"HTTP/1.1 503"
        )
        # The silent clients are dropped after the socket timeout, and the slots freed.
        time.sleep(1.5)
        assert _raw(f"http://{host}:{port}", b"GET /healthz HTTP/1.0\r\n\r\n").startswith(
            b"HTTP/1.0 200"
        )
        for s in idle:
            s.close()
    finally:
        server.shutdown()
        server.server_close()


# -- rollout records: as strict as the contract ---------------------------------------------


def test_rollout_records_are_checked_like_ingest_checks_them(tmp_path):
    log = tmp_path / "rollout.jsonl"
    base = ["rollout", "start", "--release", "r", "--stage", "s", "--to", log]
    for pct in ("-50", "150", "1e308"):
        r = run_cli(*base, "--percent", pct)
        assert r.returncode != 0 and "Traceback" not in r.stderr, pct
    # The configuration's [ts_bounds] hold for written records as for ingested ones.
    r = run_cli(*base, "--at", "1990-01-01T00:00:00Z")
    assert r.returncode == 1 and "ts: outside the plausible time range" in r.stderr, r.stderr
    conf = tmp_path / "replaygate.toml"
    conf.write_text('[ts_bounds]\nmin = "1980-01-01T00:00:00Z"\n')
    assert run_cli(*base, "--at", "1990-01-01T00:00:00Z", "--config", conf).returncode == 0
    # Imported records: a percent out of range, a stage too long, odd types.
    rec = rolloutlog.record("start", release="r", stage="s", ts="2026-11-30T00:00:00Z")
    cases = [
        ({**rec, "percent": 150}, "percent: outside 0 to 100"),
        ({**rec, "percent": -50}, "percent: outside 0 to 100"),
        ({**rec, "percent": 1e308}, "percent: outside 0 to 100"),
        ({**rec, "stage": "x" * 1_000_000}, "stage: longer than 200 characters"),
        ({**rec, "stage": {"a": 1}}, "stage: expected text, not dict"),
        ({**rec, "percent": True}, "percent: expected a number, not bool"),
        ({**rec, "ts": [1]}, "ts: expected RFC 3339 text or epoch ms, not list"),
    ]
    for bad, why in cases:
        with pytest.raises(ReplaygateError, match=re.escape(why)):
            rolloutlog.check([bad])


def test_a_year_0_record_in_the_database_never_breaks_later_imports(tmp_path):
    # Python's datetime stops at year 1; DuckDB holds year 0 (an older version's record,
    # an epoch in milliseconds far below zero).
    db = tmp_path / "fleet.duckdb"
    r = run_cli("rollout", "start", "--release", "r", "--stage", "s", "--db", db)
    assert r.returncode == 0, r.stderr
    con = dbm.connect(str(db))
    con.execute("UPDATE rollout SET ts = '0000-06-01 00:00:00+00'::TIMESTAMPTZ")
    con.close()
    for _ in range(2):
        r = run_cli(
            "rollout", "import", CD / "argo-cd" / "Rollout_suspended_userPause.yaml", "--db", db
        )
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "0 new" in r.stderr


def test_no_release_is_spelled_the_same_everywhere_and_unstarted_stages_are_refused(tmp_path):
    log = tmp_path / "rollout.jsonl"
    at = ("--at", "2026-11-30T00:00:00Z")
    r = run_cli("rollout", "proceed", "--release", "-", "--stage", "s", *at, "--to", log)
    assert r.returncode == 1 and "never started" in r.stderr and not log.exists()
    assert (
        run_cli("rollout", "start", "--release", "-", "--stage", "s", *at, "--to", log).returncode
        == 0
    )
    (rec,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert "release" not in rec  # `-` is no release, not a release named "-"
    r = run_cli("rollout", "finish", "--release", "-", "--stage", "s", "--to", log)
    assert r.returncode == 0, r.stderr
    # Another release's start does not count.
    r = run_cli("rollout", "proceed", "--release", "2.0", "--stage", "s", "--to", log)
    assert r.returncode == 1 and "of release '2.0' never started" in r.stderr
    db = tmp_path / "fleet.duckdb"
    r = run_cli("rollout", "finish", "--release", "2.0", "--stage", "s", "--db", db)
    assert r.returncode == 1 and "never started" in r.stderr
    r = run_cli("rollout", "start", "--release", "2.0", "--stage", "s", "--db", db)
    assert r.returncode == 0, r.stderr
    assert (
        run_cli("rollout", "finish", "--release", "2.0", "--stage", "s", "--db", db).returncode == 0
    )
    r = run_cli("gates", "--db", db, "--release", "2.0", "--stage", "s", "--json")
    assert json.loads(r.stdout)["stages"][0]["stage"] == "s@2.0"


def test_serve_does_not_analyse_its_own_history_appends(sample_db, tmp_path, monkeypatch):
    from replaygate import api
    from replaygate.audit import decisionlog
    from replaygate.core.config import load as load_config
    from replaygate.serve import make_server

    db = tmp_path / "served.duckdb"
    shutil.copy(sample_db, db)
    calls = []
    # serve analyses through the facade
    analyse = api.analyse
    monkeypatch.setattr(api, "analyse", lambda *a, **k: calls.append(1) or analyse(*a, **k))
    conf = load_config(SAMPLE_CONF)
    server = make_server(str(db), conf, port=0, quiet=True, refresh_s=0.05)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert server.wait_ready()
        host, port = server.server_address[:2]
        base = f"http://{host}:{port}"
        first = len(calls)  # the copy's analysis, if it was not current
        for stage in ("write-10pct", "write-10pct-v2"):
            assert _get(f"{base}/gates/-/{stage}")[0] in (200, 412)
            deadline = time.monotonic() + 30
            while not any(
                x.get("source") == "serve" and x["stage"] == stage
                for x in decisionlog.read(decisionlog.file_for_db(db))
            ):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            time.sleep(0.5)  # ten refresh passes
        # Its own appends are no change to analyse: the database is never taken for
        # writing for them.
        assert len(calls) == first
        # Another writer's append to the history is: the findings that read it catch up.
        script = (
            "import sys\n"
            "from replaygate.core import db as dbm\n"
            "from replaygate.core.config import load\n"
            "from replaygate import api\n"
            "con = dbm.connect(sys.argv[1], read_only=True)\n"
            "conf = load(sys.argv[2])\n"
            "api.record_decisions(con, api.gates_doc(con, conf, stage='write-10pct'), conf, 'x')\n"
        )
        r = subprocess.run([sys.executable, "-c", script, str(db), str(SAMPLE_CONF)], cwd=ROOT)
        assert r.returncode == 0
        deadline = time.monotonic() + 30
        while len(calls) == first:
            assert time.monotonic() < deadline, "another writer's append was not analysed"
            time.sleep(0.05)
    finally:
        server.shutdown()
        server.server_close()


def test_serve_evaluates_once_per_data_version_not_once_per_request(
    sample_db, tmp_path, monkeypatch
):
    """Requests are answered from the snapshot of the current data version: many
    concurrent requests cost no evaluation of their own (each took the one global lock
    and evaluated again); new data makes one new snapshot."""
    from concurrent.futures import ThreadPoolExecutor

    from replaygate import api
    from replaygate.core.config import load as load_config
    from replaygate.serve import make_server

    db = tmp_path / "served.duckdb"
    shutil.copy(sample_db, db)
    evaluations = []
    gates_doc = api.gates_doc
    monkeypatch.setattr(
        api, "gates_doc", lambda *a, **k: evaluations.append(1) or gates_doc(*a, **k)
    )
    server = make_server(str(db), load_config(SAMPLE_CONF), port=0, quiet=True, refresh_s=0.05)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert server.wait_ready()
        host, port = server.server_address[:2]
        base = f"http://{host}:{port}"
        first = len(evaluations)
        assert first == 1
        with ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(lambda _: _get(f"{base}/gates/-/write-10pct")[0], range(40)))
        assert codes == [412] * 40
        time.sleep(0.5)  # ten refresh passes
        assert len(evaluations) == first
        # New data (a rollout record, written by another process while serve reads
        # between passes): one new snapshot, which the next answer reflects.
        argv = [sys.executable, "-m", "replaygate", "rollout", "start", "--release", "r9"]
        argv += ["--stage", "canary", "--scope", "read", "--at", "2026-11-29T00:00:00Z"]
        for _ in range(50):
            r = subprocess.run([*argv, "--db", str(db)], capture_output=True, text=True)
            if r.returncode == 0:
                break
            time.sleep(0.1)
        assert r.returncode == 0, r.stderr
        deadline = time.monotonic() + 30
        while _get(f"{base}/gates/r9/canary")[0] != 409:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert len(evaluations) == first + 1
    finally:
        server.shutdown()
        server.server_close()


def test_records_written_into_the_database_are_filed_and_noted_as_ingest_files_them(
    tmp_path, monkeypatch, request
):
    """The files row of records `rollout --db` writes names the format the registry
    reads them with (as a loaded rollout log's row does), and the write is noted for the
    next analysis as an ingest notes its changes (ingest/load.py), not left as a change
    nobody accounted for."""
    import dataclasses

    from replaygate.core.config import Config
    from replaygate.ingest import readers
    from replaygate.ingest.load import ingest
    from replaygate.queries import incremental

    # The JSON Lines format registered under another name: whatever the registry calls it.
    # Renamed in place and put back as it was, order included (the registry's order is
    # what docs/contract.md lists, and identity.py holds the same dict).
    saved = dict(readers.FORMATS)
    request.addfinalizer(lambda: (readers.FORMATS.clear(), readers.FORMATS.update(saved)))
    renamed = dataclasses.replace(saved["jsonl"], name="json-lines")
    readers.FORMATS.clear()
    readers.FORMATS.update(
        {
            ("json-lines" if k == "jsonl" else k): renamed if k == "jsonl" else f
            for k, f in saved.items()
        }
    )
    monkeypatch.setattr(readers, "PROXY_LOG_FORMAT", "json-lines")

    def meta(key):  # read whole: an unread result blocks the connection
        return dict(con.execute("SELECT key, value FROM meta").fetchall()).get(key)

    rec = rolloutlog.record("start", release="r", stage="s", ts="2026-11-30T00:00:00Z")
    log = tmp_path / "logs" / "rollout.jsonl"
    rolloutlog.append_file(log, [rec])
    con = dbm.connect(str(tmp_path / "fleet.duckdb"))
    ingest(con, [log.parent], Config())
    incremental.clear_pending(con)  # as an analysis leaves it: every change noted
    assert meta("analysis_noted_through") == meta("data_version")
    nxt = rolloutlog.record("proceed", release="r", stage="s", ts="2026-11-30T00:10:00Z")
    assert rolloutlog.insert_db(con, [nxt]) == 1
    rows = con.execute(
        "SELECT format, compression FROM files WHERE status = 'loaded' ORDER BY file_id"
    ).fetchall()
    assert rows == [("json-lines", None), ("json-lines", None)]
    # Noted: the next analysis is a full one (the stage windows changed), and it knows why.
    assert meta("analysis_noted_through") == meta("data_version")
    assert meta("analysis_pending_full") == "1"
    con.close()
