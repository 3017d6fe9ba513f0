"""Detectors against the simulator's ground truth: exact precision and recall."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from replaygate.queries import catalog
from replaygate.sim.faults import CATALOGUE

from .conftest import build, findings_of, match_truth


def _per_detector(pairs, missed, extra):
    tp = Counter(e["detector"] for e, _ in pairs)
    fn = Counter(e["detector"] for e in missed)
    fp = Counter(f["detector"] for f in extra)
    out = {}
    for d in catalog.detectors():
        p = tp[d] / (tp[d] + fp[d]) if tp[d] + fp[d] else 1.0
        r = tp[d] / (tp[d] + fn[d]) if tp[d] + fn[d] else 1.0
        out[d] = (p, r)
    return out


def _assert_exact(con, truth):
    pairs, missed, extra = match_truth(findings_of(con), truth)
    scores = _per_detector(pairs, missed, extra)
    bad = {d: s for d, s in scores.items() if s != (1.0, 1.0)}
    assert not bad, f"precision/recall off: {bad}; missed {missed[:3]}; extra {extra[:3]}"
    for e, f in pairs:
        assert f["severity"] == e["severity"], (e, f)
        assert f["stage"] == e["stage"], (e, f)


def test_default_fleet_is_exact(fleet):
    con, truth, _ = fleet
    _assert_exact(con, truth)


def test_every_detector_is_exercised(fleet):
    con, truth, _ = fleet
    expected = {e["detector"] for f in truth["faults"] for e in f["expect"]}
    # Detectors of what replaygate itself recorded have no simulated input: their own
    # tests (test_history.py) build the history they read.
    of_logs = {n for n, q in catalog.detectors().items() if "decision_history" not in q.needs}
    assert expected == of_logs


def test_every_fault_is_in_truth(fleet):
    _, truth, _ = fleet
    assert {f["fault"] for f in truth["faults"]} == set(CATALOGUE)


@pytest.mark.parametrize(
    ("seed", "sessions", "fmt"),
    [(1, 200, "jsonl"), (2, 250, "csv"), (3, 250, "parquet"), (11, 600, "mixed")],
)
def test_other_seeds_sizes_and_formats(tmp_path, seed, sessions, fmt):
    con, truth, _ = build(tmp_path, seed=seed, sessions=sessions, fmt=fmt)
    _assert_exact(con, truth)


@pytest.mark.slow
def test_larger_fleet_with_repeated_faults(tmp_path):
    con, truth, _ = build(tmp_path, seed=5, sessions=4500)
    assert len({f["id"] for f in truth["faults"]}) > len(CATALOGUE)  # two rounds
    _assert_exact(con, truth)


def test_normal_traffic_yields_no_findings(tmp_path):
    con, truth, _ = build(tmp_path, seed=21, sessions=800, faults="none")
    assert truth["faults"] == []
    assert findings_of(con) == []


@pytest.mark.parametrize(("seed", "sessions", "fmt"), [(7, 300, "mixed"), (4, 250, "jsonl")])
def test_server_only_fleets_are_exact(tmp_path, seed, sessions, fmt):
    """Recorder ledgers, event log and dispatch records plus proxy logs, no client inbox:
    every detector with a server basis finds exactly the injected faults."""
    con, truth, out = build(tmp_path, seed=seed, sessions=sessions, fmt=fmt, server_only=True)
    assert truth["server_only"] and not list(out.glob("inbox*"))
    _assert_exact(con, truth)
    found = {f["detector"] for f in findings_of(con)}
    # the server bases, seen without a single client receipt
    assert {
        "replay_gap",
        "silent_truncation",
        "dropped_terminal",
        "cross_stream_acceptance",
        "priming_lost",
        "duplicate_dispatch",
    } <= found
    bases = {
        (f["detector"], f["detail"].get("basis"))
        for f in findings_of(con)
        if f["detector"] in ("replay_gap", "cross_stream_acceptance", "duplicate_dispatch")
    }
    assert ("replay_gap", "server") in bases and ("cross_stream_acceptance", "server") in bases
    assert {("duplicate_dispatch", "retry"), ("duplicate_dispatch", "suspected")} <= bases


def test_server_only_normal_traffic_yields_no_findings(tmp_path):
    con, truth, _ = build(tmp_path, seed=22, sessions=600, faults="none", server_only=True)
    assert findings_of(con) == []


PAST_PROXIES = ("answer_lost_past_nginx", "answer_lost_past_envoy", "answer_lost_past_caddy")


def _cannot_tell_of(con, files: tuple[str, ...]) -> Counter:
    """The cannot_tell units of these files, by (detector, file name, missing fact, stage)."""
    rows = con.execute(
        "SELECT detector, file, missing, stage, units FROM cannot_tell_stages"
    ).fetchall()
    return Counter({(d, Path(f).name, m, s): n for d, f, m, s, n in rows if Path(f).name in files})


@pytest.mark.parametrize("server_only", [True, False])
def test_the_proxy_basis_on_each_proxys_own_log(tmp_path, server_only):
    """Sessions only a proxy's own log shows (nginx, Envoy, Caddy, each in the format
    docs/sources.md gives it): an empty event stream the row shows the client did not end
    is `undelivered_result` (exact precision and recall), one the client ended is nothing,
    and one the row cannot tell (nginx `$request_completion` empty, any Caddy 200 of 0
    bytes) is `cannot_tell` in its file and stage, as truth.json lists them."""
    con, truth, out = build(
        tmp_path, seed=12, sessions=150, fmt="jsonl", faults=",".join(PAST_PROXIES),
        server_only=server_only,
    )  # fmt: skip
    assert {p.name for p in out.glob("proxy-*.jsonl")} >= {
        "proxy-nginx.jsonl", "proxy-envoy.jsonl", "proxy-caddy.jsonl"
    }  # fmt: skip
    # exact precision and recall for every detector, these proxy-only units included
    _assert_exact(con, truth)
    scores = _per_detector(*match_truth(findings_of(con), truth))
    assert scores["undelivered_result"] == (1.0, 1.0)
    lost = [f for f in findings_of(con) if f["detector"] == "undelivered_result"]
    # one answer lost past nginx, one past Envoy; none past Caddy, whose log cannot tell
    assert len(lost) == 2
    assert all(f["detail"]["bases"] == ["proxy"] and f["stream_id"] is None for f in lost)
    expected = Counter(
        (u["detector"], u["file"], u["missing"], u["stage"])
        for f in truth["faults"]
        for u in f.get("cannot_tell", [])
    )
    nginx, envoy, caddy = (_stage(truth, x) for x in PAST_PROXIES)
    closed, subject = "proxy.client_closed", "proxy.auth_subject"
    assert expected == Counter({
        ("undelivered_result", "proxy-nginx.jsonl", closed, nginx): 1,
        ("undelivered_result", "proxy-caddy.jsonl", closed, caddy): 2,
        # the documented nginx and Envoy formats log no token subject
        ("auth_subject_mismatch", "proxy-nginx.jsonl", subject, nginx): 1,
        ("auth_subject_mismatch", "proxy-envoy.jsonl", subject, envoy): 1,
    })  # fmt: skip
    files = ("proxy-nginx.jsonl", "proxy-envoy.jsonl", "proxy-caddy.jsonl")
    assert _cannot_tell_of(con, files) == expected
    # what ingest read of who ended each request, line by line: initialize, the lost
    # answer, a client gone after the answer's headers, one gone before them, an answer
    # delivered
    by_file = {
        Path(p).name: [r[0] for r in con.execute(
            "SELECT client_closed FROM proxy JOIN files f USING (file_id) "
            "WHERE f.path = ? ORDER BY ts", [p]).fetchall()]
        for (p,) in con.execute("SELECT path FROM files WHERE path LIKE '%proxy-%'").fetchall()
    }  # fmt: skip
    assert by_file["proxy-nginx.jsonl"] == [False, False, None, True, False]
    assert by_file["proxy-envoy.jsonl"] == [False, False, True, True, False]
    assert by_file["proxy-caddy.jsonl"] == [None, None, None, True, None]
    # an initialize is a request without a session whose answer issued one (nginx's flag,
    # Envoy's first character of the id); Caddy's REDACTED answer header is neither
    inits = dict(
        con.execute(
            "SELECT f.path, list(p.jsonrpc_method ORDER BY p.ts) FROM proxy p "
            "JOIN files f USING (file_id) WHERE f.path LIKE '%proxy-%.jsonl' GROUP BY 1"
        ).fetchall()
    )
    inits = {Path(k).name: v for k, v in inits.items()}
    for name in ("proxy-nginx.jsonl", "proxy-envoy.jsonl"):
        assert inits[name] == ["initialize", None, None, None, None], name
    assert inits["proxy-caddy.jsonl"] == [None] * 5


def _stage(truth: dict, fault: str) -> str | None:
    (item,) = [f for f in truth["faults"] if f["fault"] == fault]
    (stage,) = {u["stage"] for u in item["cannot_tell"]}
    return stage


def _expected_cannot_tell(truth: dict, which: set[tuple[str, str]]) -> Counter:
    return Counter(
        (u["detector"], u["file"], u["missing"], u["stage"])
        for f in truth["faults"]
        for u in f.get("cannot_tell", [])
        if (u["detector"], u["missing"]) in which
    )


def _cannot_tell_units(con, which: set[tuple[str, str]]) -> Counter:
    """The cannot_tell units of these (detector, missing) by (detector, file name, what is
    missing, stage)."""
    rows = con.execute(
        "SELECT detector, file, missing, stage, units FROM cannot_tell_stages"
    ).fetchall()
    return Counter({(d, Path(f).name, m, s): n for d, f, m, s, n in rows if (d, m) in which})


# Detectors whose evidence may lie in another file than their unit's, and what such a
# unit misses: a file of that source that cannot show it (partial blindness) makes the
# unit `cannot_tell`.
PARTIAL = {
    ("delete_fabricated", "proxy.session_hmac"),
    ("reinit_missing", "re-initialize"),
    ("priming_lost", "sessions.resumable|sessions.protocol_version"),
    ("auth_subject_mismatch", "sessions.auth_subject"),
    ("session_after_terminal", "use after the end"),
}


@pytest.mark.slow
def test_partially_blind_proxy_logs_are_cannot_tell_not_findings(tmp_path):
    """Partially blind files: one of two proxy logs keeps session ids out and carries a
    session's DELETE, another names no JSON-RPC method and carries a re-initialize, one of
    two session ledgers records no resumability, revision nor token subject. Exact
    precision and recall for every detector (no finding where the deciding evidence may
    be in a blind file), and the cannot_tell units are those truth.json lists, in their
    file and stage."""
    faults = (
        "delete_past_blind_proxy,delete_response_lost,delete_405_fabricated,"
        "reinit_past_blind_proxy,reinit_missing,reinit_shared_client,"
        "ledger_past_blind_server,priming_lost,old_token_new_session"
    )
    con, truth, out = build(tmp_path, seed=31, sessions=120, fmt="jsonl", faults=faults)
    assert (out / "proxy-blind.jsonl").exists()
    _assert_exact(con, truth)
    scores = _per_detector(*match_truth(findings_of(con), truth))
    assert all(scores[d] == (1, 1) for d, _ in PARTIAL), scores
    expected = _expected_cannot_tell(truth, PARTIAL)
    assert {k[:3] for k in expected} >= {
        ("delete_fabricated", "proxy-blind.jsonl", "proxy.session_hmac"),
        ("reinit_missing", "proxy-noinit.jsonl", "re-initialize"),
        ("priming_lost", "sessions-blind.jsonl", "sessions.resumable|sessions.protocol_version"),
        ("auth_subject_mismatch", "sessions-blind.jsonl", "sessions.auth_subject"),
        ("session_after_terminal", "proxy-noinit.jsonl", "use after the end"),
    }
    assert _cannot_tell_units(con, PARTIAL) == expected


def test_the_default_fleets_partial_blindness_is_as_truth_lists(fleet):
    con, truth, _ = fleet
    expected = _expected_cannot_tell(truth, PARTIAL)
    assert {k[:2] for k in expected} >= {
        ("delete_fabricated", "proxy-blind.jsonl"),
        ("reinit_missing", "proxy-noinit.jsonl"),
        ("priming_lost", "sessions-blind.jsonl"),
        ("auth_subject_mismatch", "sessions-blind.jsonl"),
        ("session_after_terminal", "proxy-noinit.jsonl"),
    }
    assert _cannot_tell_units(con, PARTIAL) == expected
