"""The acknowledged position at a resume (prep a_resumes), as every cursor rule reads it."""

from __future__ import annotations

from .test_detectors_focused import active, ev, findings, rc, stm

BASE = [ev(0, "1", 1, "message"), ev(10, "1", 2, "message"), ev(20, "1", 3, "message")]
INBOX = [rc(1, "1", "1:1"), rc(11, "1", "1:2"), rc(21, "1", "1:3")]


def _stream(disc_acked=None, cursor=None, pending_acked=None):
    return [
        stm(0, "1", "STREAM_OPEN", method="POST", last_acked_event_id=None),
        stm(100, "1", "DISCONNECTED", close_reason="network", last_acked_event_id=disc_acked),
        stm(
            1600,
            "1",
            "RESUME_PENDING",
            resume_from_event_id=cursor,
            last_acked_event_id=pending_acked,
        ),
        stm(1650, "1", "STREAM_OPEN", method="GET"),
    ]


def _replay(*seqs):
    return [ev(1700 + s, "1", s, "message", "replayed") for s in seqs]


def _run(tmp_path, streams, replayed):
    got = findings(
        tmp_path, sessions=[active()], events=BASE + replayed, inbox=INBOX, streams=streams
    )
    return got.get("replay_after_ack", [])


def test_ack_recorded_only_on_the_disconnect_row(tmp_path):
    # The cursor on the resume row is older than what the stream recorded as acknowledged.
    got = _run(tmp_path / "a", _stream(disc_acked="1:2", cursor="1:1"), _replay(2, 3))
    assert len(got) == 1 and got[0]["detail"]["acked_seq"] == 2
    assert got[0]["detail"]["replayed_seqs"] == [2]


def test_ack_only_as_the_resume_cursor(tmp_path):
    # No last_acked_event_id anywhere: the resume cursor is the acknowledged position,
    # and replaying the cursor event itself is the violation.
    got = _run(tmp_path / "a", _stream(cursor="1:2"), _replay(2, 3))
    assert len(got) == 1 and got[0]["detail"]["replayed_seqs"] == [2]


def test_the_later_of_ack_and_cursor_wins(tmp_path):
    got = _run(tmp_path / "a", _stream(disc_acked="1:1", cursor="1:2"), _replay(2, 3))
    assert len(got) == 1 and got[0]["detail"]["acked_seq"] == 2


def test_replaying_only_after_the_acknowledged_position_is_fine(tmp_path):
    assert _run(tmp_path / "a", _stream(disc_acked="1:2", cursor="1:1"), _replay(3)) == []
    assert _run(tmp_path / "b", _stream(cursor="1:2"), _replay(3)) == []


def test_a_cursor_of_another_stream_orders_nothing_here(tmp_path):
    # A misrouted cursor is cursor_misrouted's finding; its seq says nothing about this
    # stream's events.
    other = [ev(5, "2", 3, "message")]
    streams = _stream(cursor="2:3")
    got = findings(
        tmp_path,
        sessions=[active()],
        events=BASE + other + _replay(2),
        inbox=INBOX,
        streams=streams,
    )
    assert "replay_after_ack" not in got
    assert [f["stream_id"] for f in got["cursor_misrouted"]] == ["1"]
