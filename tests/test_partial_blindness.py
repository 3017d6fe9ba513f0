"""Partial blindness: when only some files of a source cannot show a fact, a unit whose
deciding evidence one of them could hold (a_blind_spans, blind_could_hold) is
`cannot_tell`, naming the fact and that file, never a finding nor a pass; units outside
every blind file's reach are judged as before."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from replaygate.core import db as dbm

from .test_cannot_tell import CASES, CONF, run
from .test_detectors_focused import S2, S, T, active, px, ses, stm

V = "2025-11-25"
HOUR = 3_600_000


def _ledger(h=S, t=0):
    return [active(h, t), ses(t + 100, "DELETE_REQUESTED", h), ses(t + 102, "TERMINATED", h)]


def _cannot_tell(tmp_path) -> dict[str, list[tuple[str, str, int]]]:
    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    rows = con.execute("SELECT detector, file, missing, units FROM cannot_tell").fetchall()
    con.close()
    out: dict[str, list[tuple[str, str, int]]] = {}
    for det, file, missing, n in rows:
        out.setdefault(det, []).append((Path(file).name, missing, n))
    return out


def test_delete_fabricated_a_delete_a_blind_proxy_log_may_hold_is_cannot_tell(tmp_path):
    # proxy-a shows session ids; proxy-b, a second proxy, logs none: the session's DELETE
    # went through proxy-b (200), so the ledger's TERMINATED is no fabrication.
    found, _ = run(
        tmp_path,
        sessions=_ledger(),
        **{
            "proxy-a": [px(50, session_hmac=S, protocol_version=V, jsonrpc_method="tools/call")],
            "proxy-b": [px(99, "DELETE", 200, protocol_version=V)],
        },
    )
    assert "delete_fabricated" not in found
    assert _cannot_tell(tmp_path)["delete_fabricated"] == [
        ("proxy-b.jsonl", "proxy.session_hmac", 1)
    ]


def test_delete_fabricated_outside_every_blind_logs_time_is_still_found(tmp_path):
    # The blind log's rows are an hour after the session ended: it cannot hold its DELETE,
    # and the 405 the capable log shows decides the unit.
    found, _ = run(
        tmp_path,
        sessions=_ledger(),
        **{
            "proxy-a": [px(99, "DELETE", 405, session_hmac=S, protocol_version=V)],
            "proxy-b": [px(HOUR, "POST", 200, protocol_version=V)],
        },
    )
    assert found.get("delete_fabricated") == 1
    assert "delete_fabricated" not in _cannot_tell(tmp_path)


def test_delete_fabricated_a_delete_seen_decides_whatever_a_blind_log_holds(tmp_path):
    # S's 2xx DELETE is in the capable log: decided (no finding, no cannot_tell), while S2,
    # terminated in the blind log's time without a DELETE seen, cannot be told.
    found, _ = run(
        tmp_path,
        sessions=_ledger() + _ledger(S2, 10),
        **{
            "proxy-a": [px(99, "DELETE", 200, session_hmac=S, protocol_version=V)],
            "proxy-b": [px(105, "DELETE", 200, protocol_version=V)],
        },
    )
    assert "delete_fabricated" not in found
    assert _cannot_tell(tmp_path)["delete_fabricated"] == [
        ("proxy-b.jsonl", "proxy.session_hmac", 1)
    ]


ROLLOUT = [{"ts": T - 60_000, "stage": "s", "action": "start", "scope": "read"}]


def _dead(t, **kw):
    return px(t, status=404, session_hmac=S, principal="p1", jsonrpc_method="tools/call", **kw)


def _init(t):
    return px(t, principal="p1", jsonrpc_method="initialize")


def _reinit_gate(tmp_path) -> dict:
    from replaygate.queries import gates as gm

    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    stage = gm.evaluate(con, CONF)["stages"][0]
    con.close()
    return next(g for g in stage["gates"] if g["id"] == "reinit_after_404")


def test_reinit_missing_a_reinit_a_blind_proxy_log_may_hold_is_cannot_tell(tmp_path):
    # proxy-a logs the 404 and names methods (it shows initializes); proxy-b, a second
    # proxy, logs no JSON-RPC method: the client's request through it 10 s after the 404
    # may be its initialize. Neither a finding nor a pass, and the gate cannot pass on it.
    found, _ = run(
        tmp_path,
        rollout=ROLLOUT,
        **{
            "proxy-a": [_init(0), _dead(1000)],
            "proxy-b": [px(11_000, principal="p1")],
        },
    )
    assert "reinit_missing" not in found
    assert _cannot_tell(tmp_path)["reinit_missing"] == [("proxy-b.jsonl", "re-initialize", 1)]
    gate = _reinit_gate(tmp_path)
    assert gate["status"] == "insufficient" and gate["sample"] == 0, gate
    assert gate["cannot_tell"] == 1


def test_the_units_of_each_log_kept_from_a_detector_are_counted_apart(tmp_path):
    # proxy-b and proxy-c log no session ids while proxy-a does: reinit_missing is kept
    # from both, and the 404s of each (any of them may be on a session) are counted for
    # that log alone, one and two (the logs kept from a detector are counted in one
    # statement, grouped by file).
    run(
        tmp_path,
        **{
            "proxy-a": [_init(0), _dead(1000)],
            "proxy-b": [px(5_000, status=404, principal="p1", jsonrpc_method="tools/call")],
            "proxy-c": [
                px(t, status=404, principal="p2", jsonrpc_method="tools/call")
                for t in (6_000, 7_000)
            ],
        },
    )
    kept = [e for e in _cannot_tell(tmp_path)["reinit_missing"] if e[1] == "proxy.session_hmac"]
    assert sorted(kept) == [
        ("proxy-b.jsonl", "proxy.session_hmac", 1),
        ("proxy-c.jsonl", "proxy.session_hmac", 2),
    ]


def test_reinit_missing_outside_every_blind_logs_time_is_still_found(tmp_path):
    found, _ = run(
        tmp_path,
        rollout=ROLLOUT,
        **{
            "proxy-a": [_init(0), _dead(1000)],
            "proxy-b": [px(HOUR, principal="p1")],
        },
    )
    assert found.get("reinit_missing") == 1
    assert "reinit_missing" not in _cannot_tell(tmp_path)
    gate = _reinit_gate(tmp_path)
    assert gate["status"] == "fail" and gate["sample"] == 1, gate


def test_reinit_missing_use_after_the_404_is_found_whatever_a_blind_log_holds(tmp_path):
    # The dead session is used again 2 s after its 404: a finding, whether or not the
    # client re-initialized through proxy-b (which the reason no longer claims).
    found, _ = run(
        tmp_path,
        rollout=ROLLOUT,
        **{
            "proxy-a": [_init(0), _dead(1000), _dead(3000)],
            "proxy-b": [px(11_000, principal="p1")],
        },
    )
    # The first 404 is a finding (used after it), its reason no longer "not re-initialized";
    # the second, not used after, may have been followed by an initialize through proxy-b.
    assert found.get("reinit_missing") == 1
    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    rows = con.execute(
        "SELECT epoch_ms(ts), json_extract_string(detail, '$.reason'),"
        " json_extract_string(detail, '$.reinitialized') FROM findings"
        " WHERE detector = 'reinit_missing'"
    ).fetchall()
    con.close()
    assert rows == [(T + 1000, "used after the 404", None)]
    assert _cannot_tell(tmp_path)["reinit_missing"] == [("proxy-b.jsonl", "re-initialize", 1)]


# -- facts of a session's own record: a ledger file that cannot show them ---------------

_BARE = {"resumable": None, "protocol_version": None, "auth_subject": None}


def _split_ledger(case: dict, blind: bool) -> dict:
    """The case's records with the session's ledger in sessions-b.jsonl, which records
    neither resumability, revision nor token subject (blind: for this session too), while
    sessions-a.jsonl, another server's, records them for its own session."""
    tables = {k: v for k, v in case.items() if k != "sessions"}
    own = active(S, **_BARE) if blind else active(S)
    own = {k: v for k, v in own.items() if v is not None}
    return {**tables, "sessions-a": [active(S2)], "sessions-b": [own]}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["priming_lost", "resume_without_cursor"])
def test_resumability_a_blind_ledger_file_may_hide_is_cannot_tell(tmp_path, name):
    case, _ = CASES[name]
    found, _ = run(tmp_path / "blind", **_split_ledger(case, blind=True))
    assert name not in found
    assert _cannot_tell(tmp_path / "blind")[name] == [
        ("sessions-b.jsonl", "sessions.resumable|sessions.protocol_version", 1)
    ]
    # the same ledger file recording them: found
    found, _ = run(tmp_path / "shown", **_split_ledger(case, blind=False))
    assert found.get(name) == 1
    assert name not in _cannot_tell(tmp_path / "shown")


@pytest.mark.slow
def test_auth_subject_a_blind_ledger_file_may_hide_is_cannot_tell(tmp_path):
    # S was served under a token subject its ledger row does not record: in a ledger file
    # that records subjects for other sessions (sessions-a) it would be a mismatch or not;
    # in one that records none (sessions-b) it cannot be told, never a pass.
    proxy = [px(10, session_hmac=S, auth_subject="sub-other", protocol_version=V)]
    found, _ = run(tmp_path / "blind", proxy=proxy, **_split_ledger({}, blind=True))
    assert "auth_subject_mismatch" not in found
    assert _cannot_tell(tmp_path / "blind")["auth_subject_mismatch"] == [
        ("sessions-b.jsonl", "sessions.auth_subject", 1)
    ]
    found, _ = run(tmp_path / "shown", proxy=proxy, **_split_ledger({}, blind=False))
    assert found.get("auth_subject_mismatch") == 1
    assert "auth_subject_mismatch" not in _cannot_tell(tmp_path / "shown")


def test_every_fact_of_another_source_is_scoped_for_partial_blindness():
    """A detector whose verdict needs a fact of another record type than its units reads
    that fact from other files than the unit's: where only some of them can show it, the
    unit must become `cannot_tell` (a_blind_spans or a_blind_sessions, an `-- undecided:`
    label), not be judged as if the blind files had shown its absence."""
    from replaygate.queries import cannottell, catalog

    crossing = {}
    for name, q in catalog.detectors().items():
        u = cannottell.units(q)
        other = [g for g in cannottell.facts(q) if u and g[0].split(".", 1)[0] != u.table]
        if other:
            crossing[name] = q
    assert set(crossing) == {
        "auth_subject_mismatch",
        "delete_fabricated",
        "priming_lost",
        "resume_without_cursor",
    }
    # the tables of the one prepare file that states the rule (a_blind_spans and those
    # made from it)
    (spans,) = [q for q in catalog.load("prep") if q.name == "a_blind_spans"]
    scoped = set(re.findall(r"CREATE OR REPLACE TABLE (\w+)", spans.sql))
    assert {"a_blind_spans", "a_blind_sessions"} <= scoped
    for name, q in crossing.items():
        assert any(t in q.sql for t in scoped), name
        assert q.header.list("undecided"), name


@pytest.mark.slow
def test_reinit_missing_an_initialize_in_a_log_that_names_no_client_is_cannot_tell(tmp_path):
    # proxy-b, a second proxy, names methods but logs neither principal nor client
    # address: its initialize 10 s after p1's 404 may be p1's re-initialize or another
    # client's; who re-initialized cannot be known. Neither a finding nor a pass. p3's 404
    # two hours later, outside every row of proxy-b, is "not re-initialized" as before.
    found, _ = run(
        tmp_path,
        rollout=ROLLOUT,
        **{
            "proxy-a": [
                _init(0),
                _dead(1000),
                px(2 * HOUR, principal="p3", jsonrpc_method="initialize"),
                px(2 * HOUR + 1000, status=404, session_hmac=S2, principal="p3",
                   jsonrpc_method="tools/call"),
            ],
            "proxy-b": [px(11_000, jsonrpc_method="initialize")],
        },
    )  # fmt: skip
    assert found.get("reinit_missing") == 1
    assert _cannot_tell(tmp_path)["reinit_missing"] == [("proxy-b.jsonl", "client identity", 1)]
    gate = _reinit_gate(tmp_path)
    assert gate["status"] == "fail" and gate["sample"] == 1, gate
    assert gate["cannot_tell"] == 1


def _auth_gate(tmp_path) -> dict:
    from replaygate.queries import gates as gm

    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    stage = gm.evaluate(con, CONF)["stages"][0]
    con.close()
    return next(g for g in stage["gates"] if g["id"] == "auth_binding")


@pytest.mark.slow
def test_auth_binding_counts_no_request_of_a_blind_part_as_judged(tmp_path):
    # Two requests on S2 through proxy-a, which logs token subjects, judged against S2's
    # ledger subject; one through proxy-b, which logs none (auth_subject_mismatch is kept
    # from it); two on S, whose ledger file records no subject while another does (its
    # subject may have gone unrecorded). Only the two judged requests are the sample.
    ok = {"session_hmac": S2, "auth_subject": "sub1", "protocol_version": V}
    found, _ = run(
        tmp_path,
        rollout=ROLLOUT,
        **{
            "sessions-a": [active(S2, rollout_stage="s")],
            "sessions-b": [
                {k: v for k, v in active(S, rollout_stage="s").items() if k != "auth_subject"}
            ],
            "proxy-a": [
                px(10, **ok),
                px(20, **ok),
                px(30, session_hmac=S, auth_subject="sub-x", protocol_version=V),
                px(40, session_hmac=S, auth_subject="sub-x", protocol_version=V),
            ],
            "proxy-b": [px(50, session_hmac=S2, protocol_version=V)],
        },
    )
    assert "auth_subject_mismatch" not in found
    gate = _auth_gate(tmp_path)
    assert gate["sample"] == 2, gate


# -- windows without an end: what a log without session ids may hide, bounded by client --


@pytest.mark.slow
def test_reinit_missing_a_later_use_a_sessionless_log_may_hold_is_cannot_tell(tmp_path):
    # p1 re-initialized 4 s after its 404 (seen); a minute later it sent a request through
    # proxy-b, which logs no session ids while proxy-a does: that request may have been on
    # the dead session ("went on sending requests on the dead session" has no end in time).
    # Neither a finding nor a pass. p2's 404, re-initialized too, is judged: proxy-b holds
    # no request of p2's.
    def dead(t, h, who):
        return px(t, status=404, session_hmac=h, principal=who, jsonrpc_method="tools/call")

    def init(t, who):
        return px(t, principal=who, jsonrpc_method="initialize")

    found, _ = run(
        tmp_path,
        rollout=ROLLOUT,
        **{
            "proxy-a": [init(0, "p1"), dead(1000, S, "p1"), init(5000, "p1"),
                        init(0, "p2"), dead(1000, S2, "p2"), init(5000, "p2")],
            "proxy-b": [px(60_000, principal="p1", jsonrpc_method="tools/call"),
                        px(60_000, principal="p3", jsonrpc_method="tools/call")],
        },
    )  # fmt: skip
    assert "reinit_missing" not in found
    assert _cannot_tell(tmp_path)["reinit_missing"] == [("proxy-b.jsonl", "use after the 404", 1)]
    gate = _reinit_gate(tmp_path)
    assert gate["status"] == "pass" and gate["sample"] == 1, gate
    assert gate["cannot_tell"] == 1


def test_session_after_terminal_a_served_request_a_sessionless_log_may_hold_is_cannot_tell(
    tmp_path,
):
    # Four sessions end, each with nothing served on it after its end in proxy-a. An hour
    # later proxy-b, which logs no session ids, served p1 a tools/call: it may have been on
    # S (cannot tell). p2's request there was refused, p4 had a request there but not p3:
    # decided. S4 was served in proxy-a after its end: a finding, whatever proxy-b holds.
    S3, S4 = "c" * 64, "d" * 64
    sessions, proxy_a = [], []
    for i, h in enumerate((S, S2, S3, S4)):
        who = f"p{i + 1}"
        sessions += [
            active(h, principal=who),
            ses(100, "DELETE_REQUESTED", h),
            ses(102, "TERMINATED", h),
        ]
        proxy_a += [
            px(50, session_hmac=h, principal=who, protocol_version=V),
            px(99, "DELETE", 200, session_hmac=h, principal=who, protocol_version=V),
        ]
    proxy_a.append(px(500, session_hmac=S4, principal="p4", protocol_version=V))
    found, _ = run(
        tmp_path,
        sessions=sessions,
        **{
            "proxy-a": proxy_a,
            "proxy-b": [px(HOUR, principal="p1", jsonrpc_method="tools/call"),
                        px(HOUR, status=404, principal="p2", jsonrpc_method="tools/call"),
                        px(HOUR, principal="p4", jsonrpc_method="tools/call"),
                        px(HOUR, principal="p5", jsonrpc_method="tools/call")],
        },
    )  # fmt: skip
    assert found.get("session_after_terminal") == 1
    assert _cannot_tell(tmp_path)["session_after_terminal"] == [
        ("proxy-b.jsonl", "use after the end", 1)
    ]


@pytest.mark.slow
def test_session_after_terminal_undecided_by_an_append_without_a_session(tmp_path):
    # A row without a session appended to proxy-b (its client's, after S's end) changes
    # S's verdict: the analysis after the append must see it, as a full one would.
    import json

    from replaygate.ingest.load import ingest
    from replaygate.queries import runner

    from .test_cannot_tell import CONF

    tables = {
        "sessions": _ledger(),
        "proxy-a": [
            px(50, session_hmac=S, principal="p1", protocol_version=V),
            px(99, "DELETE", 200, session_hmac=S, principal="p1", protocol_version=V),
        ],
        "proxy-b": [px(HOUR, principal="p5", jsonrpc_method="tools/call")],
    }
    for name, rows in tables.items():
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    ingest(con, [tmp_path], CONF)
    runner.analyse(con, CONF)
    assert "session_after_terminal" not in runner.cannot_tell(con)
    with open(tmp_path / "proxy-b.jsonl", "a") as fh:
        fh.write(json.dumps(px(HOUR + 1000, principal="p1", jsonrpc_method="tools/call")) + "\n")
    ingest(con, [tmp_path], CONF)
    runner.analyse(con, CONF)
    told = runner.cannot_tell(con)["session_after_terminal"]
    con.close()
    assert [(Path(t["file"]).name, t["missing"], t["units"]) for t in told] == [
        ("proxy-b.jsonl", "use after the end", 1)
    ]


# -- reconnect_storm: a log without Last-Event-ID still shows its 429/503 and re-opens ----

# The default budget is 5 reconnects/s: 50 in a 10-second window.
_SEEN = px(0, "GET", 200, session_hmac=S2, last_event_id="1:1", protocol_version=V)


def _storm(tmp_path, **logs):
    found, _ = run(tmp_path, **logs)
    return found.get("reconnect_storm", 0), _cannot_tell(tmp_path).get("reconnect_storm", [])


def test_reconnect_storm_counts_the_refusals_a_log_without_cursors_shows(tmp_path):
    # proxy-b logs no Last-Event-ID (proxy-a does): its 60 requests answered 503 in one
    # window are reconnects whatever a cursor would say; so is every log's when none
    # shows cursors. A finding, not a whole log left out as `cannot_tell`.
    refused = [px(i * 100, "POST", 503, protocol_version=V) for i in range(60)]
    assert _storm(tmp_path / "two", **{"proxy-a": [_SEEN], "proxy-b": refused}) == (1, [])
    assert _storm(tmp_path / "one", **{"proxy-b": refused}) == (1, [])
    # 51 first GETs of as many sessions, no log showing cursors: each may have resumed.
    opens = [px(i, "GET", 200, session_hmac=f"{i:064x}", protocol_version=V) for i in range(51)]
    assert _storm(tmp_path / "opens", **{"proxy-b": opens}) == (
        0,
        [("proxy-b.jsonl", "Last-Event-ID", 1)],
    )


def test_reconnect_storm_a_window_only_unseen_cursors_could_tip_is_cannot_tell(tmp_path):
    # 40 re-opens of one session's stream (seen by proxy-b without cursors) and 20 first
    # GETs of other sessions in proxy-b, each of which may have carried Last-Event-ID: 40
    # reconnects are within the budget of 50, 60 are over it. The window cannot be told,
    # naming the log and what it lacks; a later window of 20 such GETs stays a pass.
    reopen = [px(i * 100, "GET", 200, session_hmac=S, protocol_version=V) for i in range(41)]
    first = [
        px(5000 + i, "GET", 200, session_hmac=f"{i:064x}", protocol_version=V) for i in range(20)
    ]
    later = [
        px(HOUR + i, "GET", 200, session_hmac=f"{i + 100:064x}", protocol_version=V)
        for i in range(20)
    ]
    assert _storm(tmp_path, **{"proxy-a": [_SEEN], "proxy-b": reopen + first + later}) == (
        0,
        [("proxy-b.jsonl", "Last-Event-ID", 1)],
    )


def test_reconnect_storm_with_cursors_shown_the_same_window_is_decided(tmp_path):
    # The same first GETs in a log that shows cursors (none carried one): 40 reconnects,
    # a pass; with a cursor each, 60: a finding.
    reopen = [
        px(i * 100, "GET", 200, session_hmac=S, protocol_version=V, last_event_id=None)
        for i in range(41)
    ]
    first = [
        px(5000 + i, "GET", 200, session_hmac=f"{i:064x}", protocol_version=V) for i in range(20)
    ]
    cursor = [dict(r, last_event_id="1:1") for r in first]
    assert _storm(tmp_path / "none", proxy=[_SEEN, *reopen, *first]) == (0, [])
    assert _storm(tmp_path / "all", proxy=[_SEEN, *reopen, *cursor]) == (1, [])


# -- the reconnect_qps gate: a stage's window that unseen cursors could tip cannot pass --


def _gate_of(tmp_path, gate_id: str) -> dict:
    from replaygate.queries import gates as gm

    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    stage = gm.evaluate(con, CONF)["stages"][0]
    con.close()
    return next(g for g in stage["gates"] if g["id"] == gate_id)


def _storm_gate(tmp_path, **logs):
    storm = _storm(tmp_path, rollout=ROLLOUT, **logs)
    return storm, _gate_of(tmp_path, "reconnect_qps")


def _tipped(t=0):
    """40 re-opens of S's stream and 20 first GETs of other sessions in one window: with
    _SEEN's, 41 reconnects shown (within the budget of 50), and 21 GETs whose cursor a log
    without Last-Event-ID could not show (S's first among them)."""
    reopen = [px(t + i * 100, "GET", 200, session_hmac=S, protocol_version=V) for i in range(41)]
    first = [
        px(t + 5000 + i, "GET", 200, session_hmac=f"{i:064x}", protocol_version=V)
        for i in range(20)
    ]
    return reopen + first


def test_reconnect_qps_cannot_pass_a_window_the_detector_cannot_tell(tmp_path):
    # The window reconnect_storm calls cannot_tell (within the budget by what proxy-b
    # shows, over it if its first GETs carried cursors) is no pass of the gate either: the
    # stage is insufficient, naming the log, with the peak it does show.
    (found, told), gate = _storm_gate(tmp_path, **{"proxy-a": [_SEEN], "proxy-b": _tipped()})
    assert (found, told) == (0, [("proxy-b.jsonl", "Last-Event-ID", 1)])
    assert gate["status"] == "insufficient", gate
    assert gate["value"] == 4.1 and gate["sample"] == 41, gate
    assert "proxy-b.jsonl cannot show Last-Event-ID" in gate["no_evidence"], gate
    assert gate["reason"].startswith("Reconnect rate: no evidence: 1 window within the budget")


def test_reconnect_qps_decides_what_the_logs_show(tmp_path):
    # The same requests in a log that shows cursors: none carried one, a pass; in the
    # blind log, a window that unseen cursors cannot tip (41 shown + 9 unseen, the budget
    # 50): a pass; a window over the budget by what is shown beside the undecided one: a
    # fail.
    (_, told), gate = _storm_gate(tmp_path / "shown", proxy=[_SEEN, *_tipped()])
    assert told == [] and gate["status"] == "pass", gate
    few = _tipped()[:49]
    (_, told), gate = _storm_gate(tmp_path / "few", **{"proxy-a": [_SEEN], "proxy-b": few})
    assert told == [] and gate["status"] == "pass", gate
    over = [px(HOUR + i * 10, "POST", 503, protocol_version=V) for i in range(51)]
    (found, told), gate = _storm_gate(
        tmp_path / "over", **{"proxy-a": [_SEEN], "proxy-b": _tipped() + over}
    )
    assert found == 1 and told == [("proxy-b.jsonl", "Last-Event-ID", 1)]
    assert gate["status"] == "fail" and gate["value"] == 5.1, gate


def test_reconnect_qps_and_reconnect_storm_judge_a_window_alike(tmp_path):
    # One stage holding every request: per number of unseen first GETs and of 503s beside
    # 41 shown reconnects (S's first GET unseen too), the gate is insufficient exactly when
    # the detector cannot tell, fails exactly when it finds the window, passes otherwise.
    seen = {}
    for extra, refused in ((0, 0), (8, 0), (9, 0), (30, 0), (30, 9), (30, 10)):
        first = [
            px(5000 + i, "GET", 200, session_hmac=f"{i:064x}", protocol_version=V)
            for i in range(extra)
        ]
        busy = [px(6000 + i, "POST", 503, protocol_version=V) for i in range(refused)]
        (found, told), gate = _storm_gate(
            tmp_path / f"{extra}-{refused}",
            **{"proxy-a": [_SEEN], "proxy-b": _tipped()[:41] + first + busy},
        )
        expected = "fail" if found else "insufficient" if told else "pass"
        assert gate["status"] == expected, (extra, refused, found, told, gate)
        seen[extra, refused] = expected
    assert seen == {
        (0, 0): "pass",
        (8, 0): "pass",
        (9, 0): "insufficient",
        (30, 0): "insufficient",
        (30, 9): "insufficient",
        (30, 10): "fail",
    }


# -- stream ledgers: one server's file records payload digests, another's does not -------


def _rb_streams(tmp_path, **ledgers):
    from .test_detectors_focused import ROLLOUT as RB_ROLLOUT

    found, _ = run(tmp_path, rollout=RB_ROLLOUT, sessions=[active()], **ledgers)
    return found.get("rollback_post_storm", 0), _cannot_tell(tmp_path).get(
        "rollback_post_storm", []
    )


# Stream 1 opened before the rollback (T + 10 s) and broke after it, in the ledger that
# records digests; stream 2, a POST a second later, in another server's ledger.
_BROKE = [
    stm(9_000, "1", "STREAM_OPEN", method="POST", payload_digest="p"),
    stm(12_000, "1", "DISCONNECTED"),
    stm(12_001, "1", "CLOSED"),
]


def _repost(t, **kw):
    return [
        stm(t, "2", "STREAM_OPEN", method="POST", **kw),
        stm(t + 500, "2", "CLOSED", close_reason="completed"),
    ]


def _rollback_of(tmp_path) -> tuple[dict, list[str]]:
    """The rollback's verification and the reasons of the stage after it."""
    from replaygate.queries import gates as gm

    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    doc = gm.document(con, CONF, all_stages=True)
    con.close()
    (rb,) = doc["rollback_verification"]
    return rb, [r for s in doc["stages"] for r in s["reasons"] if "rollback of" in r]


def test_rollback_post_storm_a_repost_a_digestless_ledger_may_hold_is_cannot_tell(tmp_path):
    # Stream 2 is in a ledger that records no payload digest: it may be stream 1 re-POSTed
    # after the rollback. Neither a finding nor a pass: cannot_tell, naming that file, and
    # the rollback is not verifiable, never verified.
    assert _rb_streams(tmp_path, **{"streams-a": _BROKE, "streams-b": _repost(13_000)}) == (
        0,
        [("streams-b.jsonl", "same payload", 1)],
    )
    rb, reasons = _rollback_of(tmp_path)
    assert (rb["status"], rb["verified"]) == ("not verifiable", False), rb
    assert rb["cannot_tell"] == {
        "rollback_resumable_new_stream": 0,
        "rollback_cursor_dropped": 0,
        "rollback_post_storm": 1,
    }
    why = "1 unit its hygiene checks cannot tell (rollback_post_storm)"
    assert rb["unverifiable"] == why
    assert reasons == [f"rollback of w: not verifiable ({why})"]


def test_rollback_verification_a_broken_stream_of_a_digestless_ledger_is_not_verified(
    tmp_path,
):
    # The broken stream itself is in the ledger without digests (its own unit, by the
    # detector's `-- facts:`): whether it was re-POSTed cannot be told, so neither. With
    # the digests recorded and no re-POST, the rollback is verified.
    plain = [{k: v for k, v in r.items() if k != "payload_digest"} for r in _BROKE]
    digests = [stm(0, "9", "STREAM_OPEN", method="GET", payload_digest="q", h=S2)]
    _rb_streams(tmp_path / "blind", **{"streams-a": digests, "streams-b": plain})
    rb, _ = _rollback_of(tmp_path / "blind")
    assert (rb["status"], rb["cannot_tell"]["rollback_post_storm"]) == ("not verifiable", 1)
    _rb_streams(tmp_path / "seen", **{"streams-a": _BROKE})
    rb, reasons = _rollback_of(tmp_path / "seen")
    assert (rb["status"], rb["unverifiable"], reasons) == ("verified", None, []), rb


def test_rollback_post_storm_a_digestless_stream_out_of_reach_decides_nothing(tmp_path):
    # The blind ledger's POST opened an hour later (outside the retry window), or a GET:
    # neither can be stream 1's re-POST, so stream 1 is judged (no finding).
    late = _rb_streams(tmp_path / "late", **{"streams-a": _BROKE, "streams-b": _repost(HOUR)})
    assert late == (0, [])
    get = [dict(r, method="GET") for r in _repost(13_000)]
    assert _rb_streams(tmp_path / "get", **{"streams-a": _BROKE, "streams-b": get}) == (0, [])


def test_rollback_post_storm_a_repost_shown_is_found_whatever_a_blind_ledger_holds(tmp_path):
    # The re-POST with its digest is in the capable ledger: a finding, whatever stream 3
    # of the digest-less ledger is; a ledger that records no method likewise leaves a
    # stream of the same digest undecided.
    shown = _BROKE + _repost(13_000, payload_digest="p")
    other = [dict(r, stream_id="3") for r in _repost(13_200)]
    assert _rb_streams(tmp_path / "a", **{"streams-a": shown, "streams-b": other}) == (1, [])
    no_method = [{k: v for k, v in r.items() if k != "method"} for r in _repost(13_000)]
    no_method = [dict(r, payload_digest="p") for r in no_method]
    assert _rb_streams(tmp_path / "b", **{"streams-a": _BROKE, "streams-c": no_method}) == (
        0,
        [("streams-c.jsonl", "same payload", 1)],
    )


# -- payload digests: one producer's dispatch file records them, another's does not ------

U = "u" * 64


def _d(t, did, **kw):
    from .test_detectors_focused import dp

    return dp(t, did, principal="u", session_hmac=U, **kw)


def test_duplicate_dispatch_a_resend_a_digestless_file_may_hold_is_cannot_tell(tmp_path):
    # d1 (digests recorded) broke with a 502; d2, 50 ms later from the same sender and tool,
    # is in a file that records no digest: it may be d1's re-send. Neither a finding nor a
    # pass for d1; d2's own unit is the blind file's. A write an hour away is judged.
    found, _ = run(
        tmp_path,
        **{
            "dispatches-a": [_d(0, "d1", payload_digest="p1", http_status=502),
                             _d(HOUR, "d3", payload_digest="p3")],
            "dispatches-b": [_d(50, "d2")],
        },
    )  # fmt: skip
    assert "duplicate_dispatch" not in found
    assert sorted(_cannot_tell(tmp_path)["duplicate_dispatch"]) == [
        ("dispatches-b.jsonl", "dispatches.payload_digest", 1),
        ("dispatches-b.jsonl", "same payload", 1),
    ]


def test_duplicate_dispatch_a_keys_repeat_without_a_digest_is_cannot_tell(tmp_path):
    # One key executed in both files, a day apart: the same payload (a duplicate) or
    # another (a conflict) cannot be told, so neither conflict_executed nor
    # duplicate_dispatch may say anything of it: no finding, and the key and the capable
    # file's write are cannot_tell.
    found, _ = run(
        tmp_path,
        **{
            "dispatches-a": [_d(0, "d1", idempotency_key="k", payload_digest="p1")],
            "dispatches-b": [_d(24 * HOUR, "d2", idempotency_key="k")],
        },
    )
    assert not {"duplicate_dispatch", "conflict_executed", "idempotency_conflict"} & set(found)
    told = _cannot_tell(tmp_path)
    assert sorted(told["duplicate_dispatch"]) == [
        ("dispatches-b.jsonl", "dispatches.payload_digest", 1),
        ("dispatches-b.jsonl", "same payload", 1),
    ]
    assert told["conflict_executed"] == [("dispatches-b.jsonl", "dispatches.payload_digest", 1)]


def test_a_pair_both_files_with_digests_show_is_still_found(tmp_path):
    # The re-send and its broken first attempt both have digests: a finding, whatever the
    # digest-less file holds beside them; a key used twice with two payloads likewise.
    found, _ = run(
        tmp_path,
        **{
            "dispatches-a": [_d(0, "d1", payload_digest="p1", http_status=502),
                             _d(50, "d2", payload_digest="p1"),
                             _d(HOUR, "d4", idempotency_key="k", payload_digest="p1"),
                             _d(HOUR + 9, "d5", idempotency_key="k", payload_digest="p2")],
            "dispatches-b": [_d(70, "d3")],
        },
    )  # fmt: skip
    assert found.get("duplicate_dispatch") == 1
    assert found.get("conflict_executed") == 1
    assert _cannot_tell(tmp_path)["duplicate_dispatch"] == [
        ("dispatches-b.jsonl", "dispatches.payload_digest", 1)
    ]


@pytest.mark.slow
def test_duplicate_dispatch_undecided_after_an_append(tmp_path):
    # An analysis after an append counts the capable file's undecided writes as a full one.
    import json

    from replaygate.ingest.load import ingest
    from replaygate.queries import runner

    from .test_cannot_tell import CONF

    # (a ledger of many sessions, so that an append to one is analysed incrementally)
    many = [f"{i:064x}" for i in range(40)]
    tables = {
        "sessions": [active(h) for h in many],
        "dispatches-a": [_d(0, "d1", payload_digest="p1", http_status=502)],
        "dispatches-b": [_d(50, "d2")],
    }
    for name, rows in tables.items():
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    ingest(con, [tmp_path], CONF)
    runner.analyse(con, CONF)
    with open(tmp_path / "dispatches-a.jsonl", "a") as fh:
        row = dict(_d(HOUR, "d9", payload_digest="p9"), session_hmac=many[0], principal="v")
        fh.write(json.dumps(row) + "\n")
    ingest(con, [tmp_path], CONF)
    runner.analyse(con, CONF)
    told = runner.cannot_tell(con)["duplicate_dispatch"]
    con.close()
    assert sorted((Path(t["file"]).name, t["missing"], t["units"]) for t in told) == [
        ("dispatches-b.jsonl", "dispatches.payload_digest", 1),
        ("dispatches-b.jsonl", "same payload", 1),
    ]


# -- gates whose detector has units it cannot tell leave them out of their sample --------


def test_duplicate_dispatches_a_stage_whose_writes_are_all_undecided_is_no_pass(tmp_path):
    # dispatches-a records digests (a read shows it); the stage's one write is in
    # dispatches-b, which records none: its detector cannot tell it, so the gate judged no
    # write and cannot pass. With a write of dispatches-a beside it, one write is judged.
    read = _d(0, "r1", cls="read", tool="get_ticket", payload_digest="p0")
    run(tmp_path / "all", rollout=ROLLOUT,
        **{"dispatches-a": [read], "dispatches-b": [_d(HOUR, "d2")]})  # fmt: skip
    gate = _gate_of(tmp_path / "all", "duplicate_dispatches")
    assert (gate["status"], gate["sample"], gate["cannot_tell"]) == ("insufficient", 0, 1), gate
    assert gate["no_evidence"] == "all 1 unit in this stage cannot tell", gate
    mixed = {"dispatches-a": [read, _d(0, "d1", payload_digest="p1")],
             "dispatches-b": [_d(HOUR, "d2")]}  # fmt: skip
    run(tmp_path / "mixed", rollout=ROLLOUT, **mixed)
    gate = _gate_of(tmp_path / "mixed", "duplicate_dispatches")
    assert (gate["status"], gate["sample"], gate["cannot_tell"]) == ("pass", 1, 1), gate


def test_allowed_origin_refusals_leaves_out_a_log_that_cannot_show_origins(tmp_path):
    # proxy-a logs Origin; proxy-b does not, so its 403 may have refused a foreign Origin:
    # its detector is kept from that log and the gate's sample has only proxy-a's request.
    shown = [px(0, origin="https://app.example.com", session_hmac=S, protocol_version=V)]
    run(tmp_path / "mixed", rollout=ROLLOUT,
        **{"proxy-a": shown, "proxy-b": [px(10, status=403) for _ in range(3)]})  # fmt: skip
    gate = _gate_of(tmp_path / "mixed", "allowed_origin_refusals")
    assert (gate["status"], gate["sample"], gate["cannot_tell"]) == ("pass", 1, 3), gate
    # proxy-a's one request before the stage: the stage judged nothing
    early = [dict(shown[0], ts=T - 3 * HOUR)]
    run(tmp_path / "none", rollout=ROLLOUT,
        **{"proxy-a": early, "proxy-b": [px(10, status=403) for _ in range(3)]})  # fmt: skip
    gate = _gate_of(tmp_path / "none", "allowed_origin_refusals")
    assert (gate["status"], gate["sample"]) == ("insufficient", 0), gate


def test_rollback_post_storm_a_resume_in_a_digestless_ledger_is_seen(tmp_path):
    # Stream 1 broke and was resumed before the POST of the same payload; the resume is in
    # the ledger that records no payload digest (its server answered the resume). The
    # resume still counts: no re-POST, so no finding and nothing undecided. Without the
    # resume the POST is a re-POST (a finding).
    repost = _repost(13_000, payload_digest="p")
    resumed = [stm(12_300, "1", "RESUME_PENDING", resume_from_event_id="1:1"),
               stm(12_301, "1", "STREAM_OPEN")]  # fmt: skip
    digests = _BROKE + repost
    assert _rb_streams(tmp_path / "r", **{"streams-a": digests, "streams-b": resumed}) == (0, [])
    rb, reasons = _rollback_of(tmp_path / "r")
    assert (rb["status"], reasons) == ("verified", []), rb
    other = [dict(r, stream_id="7") for r in resumed]
    assert _rb_streams(tmp_path / "n", **{"streams-a": digests, "streams-b": other}) == (1, [])


def _filtered_gate(tmp_path, gate_id: str, **kw) -> dict:
    from datetime import UTC, datetime

    from replaygate.queries import gates as gm
    from replaygate.queries.filters import Filters

    def at(ms):
        return datetime.fromtimestamp(ms / 1000, UTC)

    window = {k: at(v) for k, v in kw.items() if k in ("start", "end")}
    f = Filters(stage=kw.get("stage"), **window)
    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    found = [r.as_dict() for r in gm.under_filter(con, CONF, f)]
    con.close()
    return next(g for g in found if g["id"] == gate_id)


def test_duplicate_dispatches_a_filtered_view_of_undecided_writes_is_no_pass(tmp_path):
    # d1 (digests recorded) broke and d2, in the file without digests, may be its re-send:
    # neither write can be judged. d3, an hour later, is. A view of d1 and d2's minute,
    # with no stage filter, judged no write; one of d3's hour within the stage judged d3
    # (not d3 less the stage's two undecided writes).
    run(tmp_path, rollout=ROLLOUT,
        **{"dispatches-a": [_d(0, "d1", payload_digest="p1", http_status=502),
                            _d(HOUR, "d3", payload_digest="p3")],
           "dispatches-b": [_d(50, "d2")]})  # fmt: skip
    gate = _filtered_gate(tmp_path, "duplicate_dispatches", start=T - 1000, end=T + 60_000)
    assert (gate["status"], gate["sample"]) == ("insufficient", 0), gate
    gate = _filtered_gate(tmp_path, "duplicate_dispatches", stage="s", start=T + HOUR - 1000)
    assert (gate["status"], gate["sample"]) == ("pass", 1), gate


# -- the units a gate's detector returned undecided, as the gate samples count them ------


def _undecided_fleet(tmp_path):
    """Two sessions of stage s on two servers, each with a 404 on a session. p2's (server
    b) is re-initialized and judged. The other is `replaygate probe`'s (server a): a
    request of its principal through proxy-b, which logs no JSON-RPC method, 10 s after it
    may be its initialize, so reinit_missing cannot tell it."""
    probe = "replaygate-probe"
    ledger = [
        active(S, principal=probe, client_name=probe, rollout_stage="s", server_instance="a"),
        active(S2, principal="p2", rollout_stage="s", server_instance="b"),
    ]
    run(
        tmp_path,
        rollout=ROLLOUT,
        sessions=ledger,
        **{
            "proxy-a": [
                px(0, principal=probe, jsonrpc_method="initialize"),
                px(1000, status=404, session_hmac=S, principal=probe, jsonrpc_method="tools/call"),
                px(0, principal="p2", jsonrpc_method="initialize"),
                px(1000, status=404, session_hmac=S2, principal="p2", jsonrpc_method="tools/call"),
                px(5000, principal="p2", jsonrpc_method="initialize"),
            ],
            "proxy-b": [px(11_000, principal=probe)],
        },
    )
    assert _cannot_tell(tmp_path)["reinit_missing"] == [("proxy-b.jsonl", "re-initialize", 1)]


def _reinit_under(tmp_path, f) -> dict:
    from replaygate.dashboard import model as dashmodel
    from replaygate.queries import named

    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    named.prepare(con)
    shown = dashmodel.gate_measures(con, CONF, f, "read")
    con.close()
    return next(g for g in shown if g["id"] == "reinit_after_404")


@pytest.mark.slow
def test_the_probes_undecided_units_leave_the_sample_only_where_its_units_count(tmp_path):
    """The probe's own 404 is no unit of reinit_after_404 (`probe_gates`: replay gates
    only), so its undecided one takes nothing from the gate's sample: p2's judged 404 is
    the sample, and the stage passes on it, in the decision and the dashboard alike."""
    from replaygate.queries.filters import Filters

    _undecided_fleet(tmp_path)
    gate = _reinit_gate(tmp_path)
    assert (gate["status"], gate["sample"], gate["value"]) == ("pass", 1, 1.0), gate
    shown = _reinit_under(tmp_path, Filters(stage="s"))
    assert (shown["status"], shown["sample"]) == ("pass", 1), shown


@pytest.mark.slow
def test_a_filter_without_a_stage_counts_the_units_it_keeps_that_cannot_tell(tmp_path):
    """Under a server filter the units that cannot tell are those of that server's
    sessions, not the whole database's: server b's view has p2's judged 404 and none it
    cannot tell; server a's has only the probe's, which it cannot tell (with probe_gates
    = all its units count: a sample of 0, insufficient, not a pass)."""
    from dataclasses import replace

    from replaygate.dashboard import model as dashmodel
    from replaygate.queries import named
    from replaygate.queries.filters import Filters

    _undecided_fleet(tmp_path)
    b = _reinit_under(tmp_path, Filters(servers=("b",)))
    assert (b["status"], b["sample"], b["cannot_tell"]) == ("pass", 1, 0), b
    every = replace(CONF, probe_gates="all")
    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    named.prepare(con)
    shown = dashmodel.gate_measures(con, every, Filters(servers=("a",)), "read")
    con.close()
    a = next(g for g in shown if g["id"] == "reinit_after_404")
    assert (a["status"], a["sample"], a["cannot_tell"]) == ("insufficient", 0, 1), a
