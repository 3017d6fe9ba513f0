"""Partial blindness: when only some files of a source cannot show a fact, a unit whose
deciding evidence one of them could hold (a_blind_spans, blind_could_hold) is
`cannot_tell`, naming the fact and that file, never a finding nor a pass; units outside
every blind file's reach are judged as before."""

from __future__ import annotations

from pathlib import Path

from replaygate.ingest import db as dbm

from .test_cannot_tell import run
from .test_detectors_focused import S2, S, active, px, ses

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
