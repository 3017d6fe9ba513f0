"""Cannot tell: a unit whose verdict needs a fact its file cannot show is neither a
finding nor silently dropped, for every detector that declares facts."""

from __future__ import annotations

import json

import pytest

from replaygate.core import db as dbm
from replaygate.core.config import Config
from replaygate.ingest.capabilities import all_facts
from replaygate.ingest.load import ingest
from replaygate.queries import cannottell, catalog, runner
from replaygate.queries.outcome import Severity

from .test_detectors_focused import (
    ROLLOUT,
    S2,
    S,
    T,
    _resume,
    active,
    dp,
    ev,
    px,
    rc,
    ses,
    stm,
)

V = "2025-11-25"
# Origin detectors judge only against a configured allow-list.
CONF = Config(origin_allowlist=("https://app.example.com", "http://localhost:*"))


def run(tmp_path, **tables):
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, rows in tables.items():
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    report = ingest(con, [tmp_path], CONF)
    assert report.quarantined == 0, report.quarantine_reasons
    runner.analyse(con, CONF)
    found: dict[str, int] = dict(
        con.execute("SELECT detector, count(*) FROM findings GROUP BY ALL").fetchall()
    )
    blind = runner.cannot_tell(con)
    con.close()
    return found, blind


def _without(tables: dict, drop: list[str]) -> dict:
    """The same records without the fields named `table.field`."""
    out = {}
    for name, rows in tables.items():
        gone = {d.split(".", 1)[1] for d in drop if d.split(".", 1)[0] == name}
        out[name] = [{k: v for k, v in r.items() if k not in gone} for r in rows]
    return out


_A = [
    dp(0, "d1", idempotency_key="k", payload_digest="p1", principal="u"),
]
_STREAMS_ACK = [
    stm(0, "1", "STREAM_OPEN", method="POST"),
    stm(100, "1", "DISCONNECTED", close_reason="network", last_acked_event_id="1:2"),
    stm(1600, "1", "RESUME_PENDING", resume_from_event_id="1:1"),
    stm(1650, "1", "STREAM_OPEN", method="GET"),
]
_EVENTS_ACK = [ev(10 * s, "1", s, "message") for s in (1, 2, 3)] + [
    ev(1700 + s, "1", s, "message", "replayed") for s in (2, 3)
]
_OLD = [
    stm(9_000, "1", "STREAM_OPEN", method="POST", payload_digest="p"),
    stm(12_000, "1", "DISCONNECTED"),
    stm(12_001, "1", "CLOSED"),
    stm(13_000, "2", "STREAM_OPEN", method="POST", payload_digest="p"),
    stm(13_500, "2", "CLOSED", close_reason="completed"),
]

# detector -> (records where it fires, the facts taken away)
CASES = {
    "auth_subject_mismatch": (
        {
            "sessions": [active()],
            "proxy": [px(10, session_hmac=S, auth_subject="sub-old", protocol_version=V)],
        },
        ["proxy.auth_subject"],
    ),
    "conflict_executed": (
        {"dispatches": [*_A, dp(50, "d2", idempotency_key="k", payload_digest="p2")]},
        ["dispatches.payload_digest"],
    ),
    "duplicate_dispatch": (
        {
            "dispatches": [
                dp(0, "d1", principal="u", payload_digest="p", http_status=502),
                dp(900, "d2", principal="u", payload_digest="p"),
            ]
        },
        ["dispatches.payload_digest"],
    ),
    "idempotency_conflict": (
        {
            "dispatches": [
                *_A,
                dp(50, "d2", "idempotency_conflict", idempotency_key="k", payload_digest="p2"),
            ]
        },
        ["dispatches.payload_digest"],
    ),
    "cursor_misrouted": (
        {
            "sessions": [active()],
            "events": [ev(0, "A", 1, "message"), ev(50, "B", 1, "message")],
            "inbox": [rc(1, "A", "A:1"), rc(51, "B", "B:1")],
            "streams": _resume("B", "A:1", "STREAM_OPEN"),
        },
        ["streams.resume_from_event_id"],
    ),
    "delete_fabricated": (
        {
            "sessions": [active(), ses(100, "DELETE_REQUESTED"), ses(102, "TERMINATED")],
            "proxy": [px(99, "DELETE", 405, session_hmac=S, protocol_version=V)],
        },
        ["proxy.session_hmac"],
    ),
    "invalid_origin_accepted": (
        {"proxy": [px(0, origin="https://evil.example", protocol_version=V)]},
        ["proxy.origin"],
    ),
    "origin_refused_not_403": (
        {"proxy": [px(0, status=421, origin="https://evil.example", protocol_version=V)]},
        ["proxy.origin"],
    ),
    "allowed_origin_refused": (
        {"proxy": [px(0, status=403, origin="https://app.example.com", protocol_version=V)]},
        ["proxy.origin"],
    ),
    "missing_idempotency_key": ({"dispatches": [dp(0, "d1")]}, ["dispatches.tool_class"]),
    # A proxy log alone: the empty event stream the client did not end is the only evidence.
    "undelivered_result": (
        {
            "proxy": [
                px(0, body_bytes_sent=0, resp_content_type="text/event-stream", client_closed=False)
            ]
        },  # fmt: skip
        ["proxy.body_bytes_sent"],
    ),
    "missing_protocol_version": (
        {"proxy": [px(0, session_hmac=S), px(9, session_hmac=S2, protocol_version=V)]},
        ["proxy.protocol_version"],
    ),
    "obsolete_resume": (
        {"proxy": [px(0, "GET", 405, protocol_version="2026-07-28", last_event_id="1:1")]},
        ["proxy.protocol_version"],
    ),
    "reinit_missing": (
        {
            "proxy": [
                px(1000, status=404, session_hmac=S, principal="p1", jsonrpc_method="tools/call")
            ]
        },
        ["proxy.jsonrpc_method"],
    ),
    "replay_after_ack": (
        {"sessions": [active()], "streams": _STREAMS_ACK, "events": _EVENTS_ACK},
        ["streams.last_acked_event_id", "streams.resume_from_event_id"],
    ),
    "retry_not_honored": (
        {"sessions": [active()], "streams": _resume("1", "1:1", "STREAM_OPEN", gap=200)},
        ["streams.retry_ms"],
    ),
    "rollback_post_storm": (
        {"rollout": ROLLOUT, "sessions": [active()], "streams": _OLD},
        ["streams.payload_digest"],
    ),
    "cursor_on_post": (
        {"proxy": [px(0, session_hmac=S, last_event_id="1:3", jsonrpc_method="tools/call")]},
        ["proxy.last_event_id"],
    ),
    "resume_without_cursor": (
        {
            "sessions": [active()],
            "streams": [
                *_resume("1", "1:1", "STREAM_OPEN"),
                stm(0, "2", "STREAM_OPEN", method="POST"),
                stm(100, "2", "DISCONNECTED", close_reason="network"),
                stm(1600, "2", "RESUME_PENDING"),
                stm(1650, "2", "STREAM_OPEN", method="GET"),
            ],
            "events": [ev(10, "2", 1, "message"), ev(500, "2", 2, "message")],
        },
        ["streams.resume_from_event_id"],
    ),
    "replay_buffer_exhausted": (
        {
            "sessions": [active()],
            "streams": [
                stm(0, "1", "STREAM_OPEN", method="POST"),
                stm(100, "1", "DISCONNECTED", close_reason="network"),
                stm(1500, "1", "RESUME_PENDING", resume_from_event_id="1:1"),
                stm(1510, "1", "CURSOR_REJECTED"),
            ],
            "events": [ev(10, "1", 1, "message"), ev(90, "1", 2, "message")],
        },
        ["streams.resume_from_event_id"],
    ),
    "priming_lost": (
        {
            "sessions": [active()],
            "streams": [
                stm(0, "1", "STREAM_OPEN", method="POST"),
                stm(50, "1", "DISCONNECTED", close_reason="network"),
                stm(51, "1", "CLOSED", close_reason="client_disconnect"),
            ],
            "events": [ev(5, "1", 0, "priming"), ev(5, "9", 1, "message")],
            "inbox": [rc(6, "9", "9:1")],
        },
        ["sessions.resumable", "sessions.protocol_version"],
    ),
}


def test_every_declared_fact_has_a_removal_case():
    declared = {n for n, q in catalog.detectors().items() if cannottell.facts(q)}
    assert declared == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_removing_the_fact_turns_units_into_cannot_tell(tmp_path, name):
    tables, drop = CASES[name]
    found, blind = run(tmp_path / "with", **tables)
    assert found.get(name), f"{name} does not fire on its case"
    assert name not in blind
    found, blind = run(tmp_path / "without", **_without(tables, drop))
    assert name not in found  # not a finding ...
    assert blind.get(name), f"{name}: units silently dropped"  # ... and not dropped
    for entry in blind[name]:
        assert entry["units"] > 0
        # Without the JSON-RPC method a contract log cannot show an initialize.
        shown_as = {"proxy.jsonrpc_method": "proxy.initialize"}
        assert any(shown_as.get(d, d) in entry["missing"].split("|") for d in drop), entry
        assert entry["file"].endswith(".jsonl")


def test_facts_headers_name_known_facts():
    known = set(all_facts())
    for name, q in catalog.detectors().items():
        assert "facts" in q.header, f"{name} declares no facts (write `-- facts: none`)"
        for group in cannottell.facts(q):
            assert set(group) <= known
            if cannottell.units(q) is None:
                pytest.fail(f"{name} declares facts but no units")


def test_coverage_document_carries_cannot_tell(tmp_path):
    from replaygate import api

    tables, drop = CASES["reinit_missing"]
    run(tmp_path, **_without(tables, drop))
    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    cov = api.findings_doc(con)["coverage"]
    assert cov["reinit_missing"]["status"] == "cannot tell"
    assert cov["reinit_missing"]["cannot_tell"] == [
        {
            "file": cov["reinit_missing"]["cannot_tell"][0]["file"],
            "missing": "proxy.initialize",
            "units": 1,
        }
    ]
    # The same log shows no Origin either.
    assert cov["invalid_origin_accepted"]["cannot_tell"][0]["missing"] == "proxy.origin"


def test_the_findings_document_is_the_typed_shape_it_declares(tmp_path):
    """What crosses to the CLI has the keys of runner's typed results (`FindingsDoc`,
    `Finding`, `DetectorCoverage`, `CannotTell`): a column added or renamed on one side
    only fails here, not in a renderer."""
    tables, drop = CASES["reinit_missing"]
    docs = []
    for name, given in (("whole", tables), ("blind", _without(tables, drop))):
        (tmp_path / name).mkdir()
        run(tmp_path / name, **given)
        con = dbm.connect(str(tmp_path / name / "t.duckdb"), read_only=True)
        docs.append(runner.findings_doc(con))
        con.close()
    assert all(set(d) == runner.FindingsDoc.__required_keys__ for d in docs)
    doc = {"findings": docs[0]["findings"], "coverage": docs[1]["coverage"]}
    assert doc["findings"], "no finding to hold to its type"
    for f in doc["findings"]:
        assert set(f) == runner.Finding.__required_keys__
        assert isinstance(f["detail"], dict) and isinstance(f["ts"], str)
    partly = [c for c in doc["coverage"].values() if isinstance(c, dict)]
    assert partly
    for c in partly:
        assert set(c) == runner.DetectorCoverage.__required_keys__
        assert all(set(e) == runner.CannotTell.__required_keys__ for e in c["cannot_tell"])
    # worst first, in the order of Severity
    ranks = [Severity(f["severity"]).rank for f in doc["findings"]]
    assert ranks == sorted(ranks)


def test_a_gate_whose_detector_cannot_see_is_never_a_pass(tmp_path):
    from replaygate.queries import gates as gm

    tables, drop = CASES["reinit_missing"]
    rollout = [{"ts": 1_795_824_000_000, "stage": "s", "action": "start", "scope": "read"}]
    run(tmp_path, rollout=rollout, **_without(tables, drop))
    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    stage = gm.evaluate(con, CONF)["stages"][0]
    g = next(g for g in stage["gates"] if g["id"] == "reinit_after_404")
    assert g["status"] == "insufficient"
    assert "cannot show proxy.initialize" in g["reason"]


def test_cannot_tell_is_attributed_to_the_stages_of_its_units(tmp_path):
    from replaygate.audit import reportdoc
    from replaygate.dashboard import report as render
    from replaygate.queries import gates as gm

    # Two sessionless writes without payload digests: one in each stage's window.
    tables, drop = CASES["duplicate_dispatch"]
    rollout = [
        {"ts": T - 60_000, "stage": "a", "action": "start", "scope": "write"},
        {"ts": T + 500, "stage": "b", "action": "start", "scope": "write"},
    ]
    # ... and a stream of a session stamped for stage a, broken in a's window: its units
    # are a's by the session's cohort (the re-open, after a's window, belongs to no stage).
    streams = [
        stm(400, "1", "STREAM_OPEN", method="POST"),
        stm(450, "1", "DISCONNECTED", close_reason="network"),
        stm(1600, "1", "RESUME_PENDING"),
    ]
    run(
        tmp_path,
        rollout=rollout,
        sessions=[active(rollout_stage="a")],
        streams=streams,
        **_without(tables, drop),
    )
    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    by_stage = {s["stage"]: s for s in gm.evaluate(con, CONF, all_stages=True)["stages"]}
    seen = {
        stage: sorted((e["detector"], e["missing"], e["units"]) for e in s["cannot_tell"])
        for stage, s in by_stage.items()
    }
    assert seen == {
        "a": [
            ("duplicate_dispatch", "dispatches.payload_digest", 1),
            ("retry_not_honored", "streams.retry_ms", 1),
            ("rollback_post_storm", "streams.payload_digest", 1),
        ],
        "b": [("duplicate_dispatch", "dispatches.payload_digest", 1)],
    }
    for stage in ("a", "b"):
        gate = next(g for g in by_stage[stage]["gates"] if g["id"] == "duplicate_dispatches")
        assert gate["cannot_tell"] == 1
        # No dispatch file shows digests: nothing judged, so never a pass.
        assert gate["status"] == "insufficient"
    doc = reportdoc.build(con, CONF, "b")
    con.close()
    assert doc["cannot_tell"] == by_stage["b"]["cannot_tell"]
    md = render.to_markdown(doc)
    assert "## Cannot tell in this stage" in md
    assert "Cannot tell in this stage" in render.to_html(doc)


def test_a_gate_says_how_many_of_its_units_in_the_stage_cannot_tell():
    from replaygate.queries import gates as gm

    gate = {
        "id": "duplicate_dispatches",
        "status": "pass",
        "value": 0,
        "threshold": 0,
        "sample": 40,
        "min_sample": 10,
        "failures": 0,
    }
    assert not gm.reason(gate, CONF).endswith("cannot tell")
    gate["cannot_tell"] = 3
    assert gm.reason(gate, CONF) == (
        gm.reason({**gate, "cannot_tell": 0}, CONF) + "; 3 units in this stage cannot tell"
    )


def test_the_capability_table_in_the_docs_is_true():
    from pathlib import Path

    doc = (Path(__file__).parent.parent / "docs" / "detectors.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in cannottell.markdown_table()[2:]}
    written = {
        line.split("|")[1].strip(" `"): line
        for line in doc.splitlines()
        if line.startswith("| `")
        and line.split("|")[1].strip(" `") in rows
        and line.count("|") == 5
    }
    for name, line in written.items():
        assert line == rows[name], f"docs/detectors.md: regenerate the row of {name}"
    assert set(CASES) <= set(written)


def test_the_dashboards_measures_equal_the_gates_on_a_blind_file(tmp_path):
    """The dashboard's measures under a stage filter are the gates' own (one query per
    gate over the gate facts): on a fleet whose proxy log cannot show an initialize, the
    dead-session answers it holds are left out of reinit_after_404 by both."""
    from replaygate.dashboard import model as dashmodel
    from replaygate.queries import gates as gm
    from replaygate.queries import named
    from replaygate.queries.filters import Filters

    tables, drop = CASES["reinit_missing"]
    rollout = [{"ts": 1_795_824_000_000, "stage": "s", "action": "start", "scope": "read"}]
    run(tmp_path, rollout=rollout, **_without(tables, drop))
    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    named.prepare(con)
    stage = gm.evaluate(con, CONF)["stages"][0]
    shown = dashmodel.gate_measures(con, CONF, Filters(stage="s"), stage["scope"])
    fields = ("id", "status", "value", "sample", "failures", "min_sample", "no_evidence")
    assert [{k: g[k] for k in fields} for g in shown] == [
        {k: g[k] for k in fields} for g in stage["gates"]
    ]
    # the blind file's 404 is no sample of the gate: it cannot tell
    reinit = next(g for g in shown if g["id"] == "reinit_after_404")
    assert reinit["sample"] == 0 and reinit["cannot_tell"] == 1
    con.close()


@pytest.mark.parametrize(
    ("detector", "gate"),
    [
        ("auth_subject_mismatch", "auth_binding"),
        ("allowed_origin_refused", "allowed_origin_refusals"),
    ],
)
def test_a_blind_log_is_out_of_the_sample_whether_or_not_another_shows_the_fact(
    tmp_path, detector, gate
):
    """A proxy log that cannot show a fact a gate's detector needs is left out of the
    gate's sample whether it is the only log or another shows the fact (one rule,
    judged_file in gate_facts.sql): its requests were judged by nobody, so a stage of
    only those is `insufficient`, and a log that shows the fact, of requests before the
    stage, changes nothing of the stage's reading; the dashboard reads the same."""
    from replaygate.dashboard import model as dashmodel
    from replaygate.queries import gates as gm
    from replaygate.queries import named
    from replaygate.queries.filters import Filters

    tables, drop = CASES[detector]
    tables = {
        n: [{**r, "rollout_stage": "s"} if n == "sessions" else r for r in rows]
        for n, rows in tables.items()
    }
    blind = _without(tables, drop)
    seen = [{**r, "ts": r["ts"] - 60_000} for r in tables["proxy"]]
    rollout = [{"ts": T - 1_000, "stage": "s", "action": "start", "scope": "read"}]
    readings = []
    for name, extra in (("alone", {}), ("beside", {"proxy_shown": seen})):
        run(tmp_path / name, rollout=rollout, **blind, **extra)
        con = dbm.connect(str(tmp_path / name / "t.duckdb"), read_only=True)
        named.prepare(con)
        (stage,) = gm.evaluate(con, CONF)["stages"]
        shown = dashmodel.gate_measures(con, CONF, Filters(stage="s"), stage["scope"])
        con.close()
        fields = ("status", "sample", "no_evidence")
        got = next(g for g in stage["gates"] if g["id"] == gate)
        assert {k: got[k] for k in fields} == {
            k: g[k] for g in shown if g["id"] == gate for k in fields
        }
        readings.append((got["status"], got["sample"]))
    assert readings[0] == readings[1] == ("insufficient", 0), readings
