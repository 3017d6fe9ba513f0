"""The recorder stamps the server's release on its sessions, not a rollout stage: the
stage is a window of the rollout log, the release is what the process is."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mcp")

from replaygate.recorder import LedgerMiddleware, LedgerWriter, RecordingEventStore  # noqa: E402


def _open(tmp_path, **kw):
    writer = LedgerWriter(tmp_path, b"k")
    mw = LedgerMiddleware(None, writer, RecordingEventStore(writer), **kw)
    mw._open_session("raw-session-id", {"params": {"protocolVersion": "2025-06-18"}})
    writer.close()
    files = sorted(tmp_path.glob("sessions-*.jsonl"))
    rows = [json.loads(x) for f in files for x in f.read_text().splitlines()]
    assert len(rows) == 1
    return rows[0]


def test_sessions_carry_the_release(tmp_path):
    row = _open(tmp_path, release="2.4.0")
    assert row["release"] == "2.4.0"
    assert row.get("rollout_stage") is None
    assert "raw-session-id" not in json.dumps(row)


def test_release_comes_from_the_environment(tmp_path, monkeypatch):
    from mcp.server.mcpserver import MCPServer

    from replaygate.recorder import instrument

    monkeypatch.setenv("REPLAYGATE_RELEASE", "84f7b9c6d2")
    app, _ = instrument(MCPServer("t"), tmp_path, hmac_key=b"k")
    assert app.release == "84f7b9c6d2"
