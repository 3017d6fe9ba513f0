"""End to end on what an operator of servers and proxies has (no client inbox): the
official MCP Python SDK server with the recorder wrapping a faulty operator event store,
behind real Caddy and nginx, driven by clients that keep no receipts.

- Lossy store (seed 002): resumed streams of a tool that logs 1..6 each lose the first
  event after the cursor, while the client still gets "counted to 6".
- Cross-stream store (seed 004): a resume replays a concurrent call's events too.
- Blind re-send (seed 000): a client stops reading a keyless write after two events and
  re-sends the same call under a new JSON-RPC id; the server runs it twice.

replaygate ingests only the recorder's ledgers and the proxies' access logs; the findings
must be exactly those this traffic produces, on the server's own evidence."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from .procs import REAL_PROXIES, caddy, example_server, stop
from .procs import free_port as _port
from .procs import wait_port as _wait
from .test_e2e_real import CADDYFILE, KEY, NGINX_CONF, Client

pytest.importorskip("mcp")
pytestmark = REAL_PROXIES
STAGE = "e2e-server"
RESUMED = 6


class BlindClient(Client):
    """A client that keeps no inbox: the operator has nothing from its side."""

    def __init__(self, port: int, agent: str):
        super().__init__(port, Path(os.devnull), agent=agent)

    def receipt(self, stream: str, event_id: str) -> None:
        return None

    def hmac(self) -> str:
        return hmac.new(KEY.encode(), self.session.encode(), hashlib.sha256).hexdigest()

    def read_until_result(self, resp, rid: str, timeout: float = 10.0) -> list[dict]:
        """Every event of a response until the answer to `rid` (whatever else arrives)."""
        resp.fp.raw._sock.settimeout(timeout)
        got, cur = [], {}
        while True:
            line = resp.readline()
            if not line:
                return got
            line = line.decode().rstrip("\r\n")
            if line == "":
                if "id" in cur:
                    got.append(cur)
                    with contextlib.suppress(ValueError):
                        doc = json.loads(cur.get("data") or "null")
                        if isinstance(doc, dict) and str(doc.get("id")) == rid:
                            return got
                cur = {}
                continue
            field, _, value = line.partition(":")
            cur[field] = value.lstrip(" ")


def _start(d: Path, name: str, store: str | None, procs: list, logs) -> int:
    extra = ["--event-store", store] if store else []
    ledger, log = d / "logs" / f"ledger-{name}", d / f"server-{name}.log"
    proc, port = example_server(ledger, log, logs, KEY, "--stage", STAGE, *extra)
    procs.append(proc)
    return port


def _wait_completed(ledger: Path, session_hmac: str, stream: str, timeout: float = 30) -> None:
    """Return once the recorder's stream ledger has the stream CLOSED as completed. The
    recorder writes that row when the SDK's handler of the POST has returned: the answer
    is in the event store and the POST's stream is no longer registered, so a resume is
    served from the store whole and stays open for the rest."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in sorted(ledger.glob("streams-*.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except ValueError:  # a line being written
                    continue
                if (row.get("session_hmac"), row.get("stream_id"), row.get("state")) == (
                    session_hmac,
                    stream,
                    "CLOSED",
                ):
                    assert row.get("close_reason") == "completed", row
                    return
        time.sleep(0.05)
    raise AssertionError(f"stream {stream} never completed on the server")


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    d = tmp_path_factory.mktemp("e2e-server")
    (d / "logs").mkdir()
    for sub in ("nb", "np", "nf", "nu", "ns", "alt-logs"):
        (d / sub).mkdir()
    t0 = int(time.time() * 1000) - 60_000
    (d / "logs" / "rollout.jsonl").write_text(
        json.dumps({"ts": t0, "stage": STAGE, "action": "start", "scope": "write"}) + "\n"
    )
    procs: list = []
    logs = contextlib.ExitStack()
    seen: dict = {"lossy": {}, "foreign": set(), "cross": None, "blind": []}
    try:
        lossy = _start(d, "lossy", "tests.e2e_stores:LossyStore", procs, logs)
        cross = _start(d, "cross", "tests.e2e_stores:CrossStreamStore", procs, logs)
        caddy_port, nginx_port = _port(), _port()
        procs.append(caddy(d, CADDYFILE.format(d=d, port=caddy_port, server=lossy), logs))
        (d / "nginx.conf").write_text(
            NGINX_CONF.format(d=d, port=nginx_port, alt_port=_port(), server=cross)
        )
        procs.append(
            subprocess.Popen(
                ["nginx", "-c", str(d / "nginx.conf"), "-p", str(d)],
                stdout=subprocess.DEVNULL,
                stderr=logs.enter_context(open(d / "nginx.out", "w")),  # noqa: SIM115
            )
        )
        for p in (lossy, cross, caddy_port, nginx_port):
            _wait(p)

        # 1. Lossy store, through Caddy: six streams cut after two log messages, resumed
        #    once everything is stored; each replay loses the first event after the cursor.
        a = BlindClient(caddy_port, "e2e-lossy/1")
        assert a.initialize() == 200
        for _ in range(RESUMED):
            c, r, s = a.call("count", {"n": 6})
            head = a.events(r, s, limit=3)  # priming, "1", "2"
            c.sock.close()
            # Not a pause: a resume while the call still runs is replayed only what the
            # store holds so far, and the SDK ends it there (the POST's stream is still
            # registered) — with the store skipping the one event stored after the
            # cursor, nothing at all.
            _wait_completed(d / "logs" / "ledger-lossy", a.hmac(), s)
            rest = a.resume(s, head[-1]["id"])
            assert '"counted to 6"' in rest[-1]["data"]
            numbers = {
                json.loads(e["data"])["params"]["data"]
                for e in head[1:] + rest
                if '"notifications/message"' in e.get("data", "")
            }
            seen["lossy"][(a.hmac(), s)] = sorted(set(map(str, range(1, 7))) - numbers)

        # 2. Cross-stream store, through nginx: a long call runs while a short one is cut
        #    and resumed; the replay carries the long call's events.
        b = BlindClient(nginx_port, "e2e-cross/1")
        assert b.initialize() == 200
        long_c, long_r, long_s = b.call("count", {"n": 12})
        b.events(long_r, long_s, limit=2)
        c, r, s = b.call("slow", {"n": 3})
        head = b.events(r, s, limit=2)
        c.sock.close()
        time.sleep(1.5)
        g, rg = b.request("GET", extra={"Last-Event-ID": head[-1]["id"]})
        assert rg.status == 200
        replay = b.read_until_result(rg, s)
        g.close()
        seen["foreign"] = {
            e["id"] for e in replay if '"notifications/message"' in e.get("data", "")
        }
        seen["cross"] = (b.hmac(), s, long_s)
        long_c.close()

        # 3. Blind re-send of a keyless write, once through each proxy.
        for port, agent in ((caddy_port, "e2e-blind/1"), (nginx_port, "e2e-blind/2")):
            k = BlindClient(port, agent)
            assert k.initialize() == 200
            c, r, s = k.call("create_ticket", {"title": "printer on fire"})
            k.events(r, s, limit=2)
            c.sock.close()
            time.sleep(0.3)
            c2, r2, s2 = k.call("create_ticket", {"title": "printer on fire"})
            answer = k.events(r2, s2)[-1]["data"]
            assert "printer on fire" in answer
            seen["blind"].append((k.hmac(), s, s2))
        time.sleep(1.0)  # the first attempts finish on the server
    finally:
        stop(procs)
        logs.close()
    return d, seen


@pytest.fixture(scope="module")
def analysed(traffic):
    from replaygate.core import db as dbm
    from replaygate.core.config import from_mapping
    from replaygate.ingest.load import ingest
    from replaygate.queries import runner

    d, seen = traffic
    os.environ["REPLAYGATE_HMAC_KEY_E2E"] = KEY
    config = from_mapping(
        {"hmac_key_env": "REPLAYGATE_HMAC_KEY_E2E", "origin_allowlist": ["http://localhost:*"]}
    )
    con = dbm.connect(str(d / "e2e.duckdb"))
    report = ingest(con, [d / "logs"], config)
    runner.analyse(con, config)
    return con, config, report, seen


def _findings(con, detector: str) -> list[dict]:
    cur = con.execute(
        "SELECT session_hmac, stream_id, event_id, dispatch_id, severity, detail "
        "FROM findings WHERE detector = $d ORDER BY ts",
        {"d": detector},
    )
    cols = [c[0] for c in cur.description]
    out = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    for f in out:
        f["detail"] = json.loads(f["detail"])
    return out


def test_only_server_side_sources(analysed):
    con, _, report, _ = analysed
    assert report.quarantined == 0, report.quarantine_reasons
    rows = report.rows_by_type()
    assert not rows.get("inbox")
    assert rows["dispatches"] >= 2 * RESUMED and rows["proxy"] >= 20


def test_lossy_replay_is_a_server_based_gap_on_exactly_the_streams_that_lost_events(
    analysed,
):
    con, _, _, seen = analysed
    lost = {key: missing for key, missing in seen["lossy"].items() if missing}
    assert len(lost) == RESUMED  # the client got "counted to 6" and lost a message each time
    gaps = {
        (f["session_hmac"], f["stream_id"]): f
        for f in _findings(con, "replay_gap")
        if (f["session_hmac"], f["stream_id"]) in seen["lossy"]
    }
    assert set(gaps) == set(lost)
    for key, f in gaps.items():
        assert f["detail"]["basis"] == "server" and f["severity"] == "high"
        assert len(f["detail"]["missing_seqs"]) == len(lost[key])
        assert set(f["detail"]["missing_kinds"]) == {"message"}
    # Each closed with its result delivered: a complete-looking, truncated answer.
    trunc = {
        (f["session_hmac"], f["stream_id"])
        for f in _findings(con, "silent_truncation")
        if f["detail"]["basis"] == "server"
    }
    assert trunc == set(lost)


def test_cross_stream_replay_is_a_server_based_cross_stream_acceptance(analysed):
    con, _, _, seen = analysed
    session, short, long = seen["cross"]
    assert seen["foreign"], "the faulty store replayed nothing of the other stream"
    found = [f for f in _findings(con, "cross_stream_acceptance") if f["session_hmac"] == session]
    assert found and all(f["stream_id"] == short for f in found)
    assert all(f["detail"] == {**f["detail"], "basis": "server"} for f in found)
    assert {f["detail"]["origin_stream_id"] for f in found} == {long}
    assert seen["foreign"] <= {f["event_id"] for f in found}
    # The gate that counts them fails on the server's evidence alone.
    from replaygate.queries import gates

    con_, config = con, analysed[1]
    stage = gates.evaluate(con_, config, STAGE)["stages"][0]
    g = {x["id"]: x for x in stage["gates"]}
    assert g["cross_stream_acceptances"]["status"] == "fail"
    assert g["cross_stream_acceptances"]["sample"] > 0


def test_blind_resend_is_a_suspected_duplicate_and_two_missing_keys(analysed):
    con, _, _, seen = analysed
    dup = _findings(con, "duplicate_dispatch")
    missing = _findings(con, "missing_idempotency_key")
    for session, first, second in seen["blind"]:
        ids = dict(
            con.execute(
                "SELECT request_id, dispatch_id FROM dispatches WHERE session_hmac = $s "
                "AND tool_name = 'create_ticket' AND outcome = 'executed'",
                {"s": session},
            ).fetchall()
        )
        assert set(ids) == {first, second}  # executed twice
        mine = [f for f in dup if f["session_hmac"] == session]
        assert len(mine) == 1
        assert mine[0]["dispatch_id"] == ids[first]
        assert mine[0]["detail"]["dispatches"] == [ids[first], ids[second]]
        # No server-side source saw the cut: both proxies logged 200, the server's
        # stream completed. A duplicate that cannot be proven: suspected, high.
        assert mine[0]["detail"]["basis"] == "suspected" and mine[0]["severity"] == "high"
        assert {f["dispatch_id"] for f in missing if f["session_hmac"] == session} == set(
            ids.values()
        )


def test_findings_are_exactly_what_this_traffic_produced(analysed):
    con, _, _, seen = analysed
    counts = dict(
        con.execute("SELECT detector, count(*) FROM findings GROUP BY 1 ORDER BY 1").fetchall()
    )
    # Every resumed stream had been written CLOSED/completed: its result went into the
    # proxy's socket after the client had cut it. The client's resume is the only sign
    # of that, and the ledger shows it as CLOSED -> RESUME_PENDING.
    resumed = len(seen["lossy"]) + 1
    assert counts == {
        "cross_stream_acceptance": counts.get("cross_stream_acceptance", 0),
        "duplicate_dispatch": 2,
        "missing_idempotency_key": 4,
        "raw_session_id_logged": 2,  # both proxies log the Mcp-Session-Id header
        "replay_gap": RESUMED,
        "silent_truncation": RESUMED,
        "state_violation": resumed,
        # The cross-stream story's long call: its client closes it before the answer.
        "undelivered_result": 1,
    }
    session, _, long = seen["cross"]
    assert con.execute(
        "SELECT session_hmac, stream_id, detail->>'basis' FROM findings "
        "WHERE detector = 'undelivered_result'"
    ).fetchall() == [(session, long, "server")]
    assert counts["cross_stream_acceptance"] >= 1
    proxies = dict(con.execute("SELECT status, count(*) FROM proxy GROUP BY 1").fetchall())
    assert set(proxies) <= {200, 202}  # no proxy saw a cut
