"""`replaygate probe` without a server: SSE parsing, the reference alignment that turns
what a client received into receipts with seqs and origins, the request budget, the
command's errors, and that a plain install (no `probe` extra) runs every other command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from replaygate.cli import cli

pytest.importorskip("httpx2")

from replaygate.probe.discover import Discovery  # noqa: E402
from replaygate.probe.scenarios import Probe, Settings, _stale  # noqa: E402
from replaygate.probe.wire import Answer, BudgetExhausted, Event, Pacer, sse_events  # noqa: E402


def test_sse_events_join_data_lines_and_skip_comments():
    lines = iter(
        [
            "id: a1",
            "retry: 500",
            "data:",
            "",
            ": keep-alive",
            "id: a2",
            'data: {"jsonrpc": "2.0",',
            'data:  "id": "rgp-1", "result": {}}',
            "",
        ]
    )
    got = list(sse_events(lines))
    assert [(e.event_id, e.kind, e.retry_ms) for e in got] == [
        ("a1", "priming", 500),
        ("a2", "result", None),
    ]
    assert got[1].answers == "rgp-1"


def _ev(eid, doc):
    return Event(eid, json.dumps(doc), None, doc, ts=1)


def _log(eid, n):
    return _ev(
        eid,
        {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": str(n)},
        },
    )


def _result(eid, rid, text="done"):
    return _ev(eid, {"jsonrpc": "2.0", "id": rid, "result": {"content": [text]}})


def test_content_ignores_ids_and_progress_tokens():
    a = _ev(
        "x",
        {"method": "notifications/progress", "params": {"progressToken": "rgp-1", "progress": 1}},
    )
    b = _ev(
        "y",
        {"method": "notifications/progress", "params": {"progressToken": "rgp-2", "progress": 1}},
    )
    assert a.content == b.content and a.kind == "progress" and a.progress_token == "rgp-1"
    assert _result("1", "rgp-1").content == _result("2", "rgp-2").content
    assert _result("1", "rgp-1").content != _result("2", "rgp-1", "other").content


def _probe(tmp_path):
    s = Settings(url="http://127.0.0.1:9/mcp", out=tmp_path, run_id="t", key=b"k")
    return Probe(s, Discovery("2025-11-25", "x", [], False))


def _reference():
    events = [Event("r0", "", 500)] + [_log(f"r{i}", i) for i in range(1, 5)]
    return Answer(200, {}, events + [_result("r5", "ref")])


def _receipts(tmp_path):
    rows = [json.loads(x) for x in (tmp_path / "inbox-probe-t.jsonl").read_text().splitlines()]
    return [r for r in rows if r["stream_id"] == "cut"]


def test_a_replay_that_skips_an_event_leaves_a_hole_in_the_cut_streams_seqs(tmp_path):
    p = _probe(tmp_path)
    cut = Answer(200, {}, [Event("c0", "", 500), _log("c1", 1), _log("c2", 2)], cut=True)
    # The replay after c2 lost "3" and went on with "4" and the answer.
    replay = Answer(200, {}, [_log("c4", 4), _result("c5", "cut")])
    judged = p._receipts("sid", "ref", "cut", _reference(), cut, [replay])
    assert judged["missing"] == [(3, "message")] and judged["foreign"] == 0
    got = _receipts(tmp_path)
    assert [(r["event_id"], r["seq"], r["delivery"]) for r in got] == [
        ("c0", 0, "live"),
        ("c1", 1, "live"),
        ("c2", 2, "live"),
        ("c4", 4, "replay"),
        ("c5", 5, "replay"),
    ]
    assert {r["origin_stream_id"] for r in got} == {"cut"}


def test_an_event_of_the_other_stream_keeps_its_origin_and_seq(tmp_path):
    p = _probe(tmp_path)
    cut = Answer(200, {}, [Event("c0", "", 500), _log("c1", 1), _log("c2", 2)], cut=True)
    # A store that mixes streams replays the reference call's "3" (r3) as well.
    replay = Answer(200, {}, [_log("c3", 3), _log("r3", 3), _log("c4", 4), _result("c5", "cut")])
    judged = p._receipts("sid", "ref", "cut", _reference(), cut, [replay])
    assert judged["foreign"] == 1 and judged["missing"] == []
    (foreign,) = [r for r in _receipts(tmp_path) if r["event_id"] == "r3"]
    assert foreign["origin_stream_id"] == "ref" and foreign["seq"] == 3
    assert foreign["verdict"] == "accepted"


def test_a_second_delivery_of_one_event_is_a_duplicate_receipt(tmp_path):
    p = _probe(tmp_path)
    cut = Answer(200, {}, [_log("c1", 1), _log("c2", 2)], cut=True)
    replay = Answer(200, {}, [_log("c2", 2), _log("c3", 3), _log("c4", 4), _result("c5", "cut")])
    p._receipts("sid", "ref", "cut", _reference(), cut, [replay])
    verdicts = [(r["event_id"], r["verdict"]) for r in _receipts(tmp_path)]
    assert verdicts.count(("c2", "duplicate")) == 1


def test_stale_cursors_keep_the_shape_of_real_ones():
    real = "23a1ecc6-37ba-471f-9948-325fd0d1437f"
    stale = _stale(real)
    assert stale != real and len(stale) == len(real)
    assert [i for i, c in enumerate(stale) if c == "-"] == [
        i for i, c in enumerate(real) if c == "-"
    ]
    assert _stale("stream-1:12") == "stream-1:1000000012"


def test_the_request_budget_stops_the_run():
    pacer = Pacer(2, 1000.0)
    pacer.take()
    pacer.take()
    with pytest.raises(BudgetExhausted):
        pacer.take()


def test_probe_needs_the_hmac_key(tmp_path, monkeypatch):
    monkeypatch.delenv("REPLAYGATE_HMAC_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["probe", "http://127.0.0.1:9/mcp", "--out", str(tmp_path)])
    assert r.exit_code == 1 and "REPLAYGATE_HMAC_KEY" in str(r.exception)


def test_unknown_scenarios_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAYGATE_HMAC_KEY", "k")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(
        cli, ["probe", "http://127.0.0.1:9/mcp", "--out", str(tmp_path), "--scenarios", "nope"]
    )
    assert r.exit_code == 1 and "unknown nope" in str(r.exception)


def test_a_plain_install_runs_other_commands_and_probe_names_its_extra(tmp_path):
    """Without the `probe` extra (mcp, httpx2 blocked): the CLI loads, and `probe` says
    which extra it needs instead of crashing."""
    code = (
        "import sys\n"
        "sys.modules['mcp'] = None\n"
        "sys.modules['httpx2'] = None\n"
        "from replaygate.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    env_run = [sys.executable, "-c", code]
    r = subprocess.run(env_run + ["--help"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0 and "probe" in r.stdout
    r = subprocess.run(
        env_run + ["probe", "http://127.0.0.1:9/mcp", "--out", "o"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"REPLAYGATE_HMAC_KEY": "k", "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 1 and "pip install 'replaygate[probe]'" in r.stderr
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import replaygate.cli, sys; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'httpx2')))",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert r.stdout.strip() == "[]"
