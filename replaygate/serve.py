"""`replaygate serve`: the gates over HTTP, read-only, for CD controllers.

    GET /gates/{release}/{stage}   -> the stage's decision and gates
        200 PROCEED, 409 HOLD, 412 ROLLBACK; 404 unknown stage; 503 no analysis yet

`{release}` is `-` for a rollout log without releases (the one spelling of "no release"
everywhere); `{stage}` is `_` for the release's newest stage. POST is answered the same
way (Flagger's webhooks POST; the body is read and ignored). `?ok=any` answers 200
whatever the decision, and for a stage not (yet) in the rollout log 200 with decision
HOLD (Argo Rollouts' `web` provider counts any other code as an error and aborts after
`consecutiveErrorLimit` of them); `?ok=rollback` answers 200 only on ROLLBACK (a Flagger
`rollback` webhook). `GET /healthz` is 200 once an analysis has been read.

The answer's top level is compact (`decision`, `stage`, `release`, `reasons`,
`data_version`, `analysed_at`) for a jsonPath such as `{$.decision}`; `stages` holds the
full evaluation.

Requests never analyse or open the database: a background thread reads the last
completed analysis (refreshing it when the data or the configuration changed, as
`replaygate gates` would) and swaps in a new snapshot, one per data version, so an
import or an analysis in progress never delays an answer. The evaluations the answers
gave are appended to the decision history (source `serve`) by that thread; its own
appends do not count as a change to analyse (see GateServer.refresh).
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import duckdb

from replaygate.api import Config, Decision, ReplaygateError

# What socketserver hands a server per request (typeshed's spelling).
_Request = socket.socket | tuple[bytes, socket.socket]

NEWEST = "_"
NO_RELEASE = "-"
NOT_IN_LOG = "stage not in the rollout log"
MAX_BODY = 1 << 20


def status_for(decision: str, ok: str | None) -> int:
    """The HTTP status of a decision, given the `ok` query parameter."""
    if ok == "any":
        return 200
    if ok == "rollback":
        return 200 if decision == Decision.ROLLBACK else Decision.HOLD.http_code
    return Decision(decision).http_code


@dataclass
class Snapshot:
    """The gates of every stage, as of one completed analysis."""

    key: str  # data version and configuration
    data_version: str
    analysed_at: str
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    # (release or None, stage name) -> stage key; per release, its stage keys by start
    by_name: dict[tuple[str | None, str], str] = field(default_factory=dict)
    newest: dict[str | None, str] = field(default_factory=dict)

    def find(self, release: str | None, stage: str | None) -> dict[str, Any] | None:
        if stage is None:
            key = self.newest.get(release)
        else:
            key = self.by_name.get((release, stage))
            if key is None and stage in self.stages:
                key = stage if self.stages[stage].get("release") == release else None
        return self.stages.get(key) if key else None


def build_snapshot(con: duckdb.DuckDBPyConnection, config: Config) -> Snapshot:
    """Every stage's evaluation on an analysed connection."""
    from datetime import UTC, datetime

    from replaygate import api
    from replaygate.api import db as dbm

    doc = api.gates_doc(con, config, all_stages=True)
    snap = Snapshot(
        key=api.stamp(con, config),
        data_version=dbm.get_meta(con, "data_version", "0"),
        analysed_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
    )
    for stage in doc.get("stages", []):
        snap.stages[stage["stage"]] = stage
    rows = con.execute(
        "SELECT stage, release, stage_name FROM a_stages ORDER BY start_ts, stage"
    ).fetchall()
    for key, release, name in rows:
        snap.by_name[(release, name)] = key
        snap.newest[release] = key
    return snap


class GateServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(
        self,
        address: tuple[str, int],
        db: str,
        config: Config,
        quiet: bool = False,
        refresh_s: float = 2.0,
        max_connections: int = 64,
        timeout_s: float = 10.0,
    ) -> None:
        super().__init__(address, Handler)
        self.db = db
        self.config = config
        self.quiet = quiet
        self.refresh_s = refresh_s
        self.timeout_s = timeout_s
        self.snapshot: Snapshot | None = None
        self.problem: str | None = "no analysis read yet"
        self.slots = threading.BoundedSemaphore(max_connections)
        self._asked: set[str] = set()
        self._asked_lock = threading.Lock()
        # The history's version right after this server's own last append, when the
        # analysis was current for the history before it.
        self._own_history: str | None = None
        self._stop = threading.Event()
        self._refresher = threading.Thread(target=self._refresh_loop, daemon=True)
        self._refresher.start()

    # -- the background snapshot

    def _refresh_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception as exc:  # noqa: BLE001 - the thread must outlive a bad pass
                self.problem = f"{type(exc).__name__}: the last refresh failed"
            self._stop.wait(self.refresh_s)

    def refresh(self) -> None:
        """Read the analysis (refreshing it first when out of date) into a new snapshot;
        while the database is busy, the last snapshot stays."""
        from replaygate import api
        from replaygate.api import db as dbm

        try:
            con = dbm.connect(self.db, read_only=True)
        except (ReplaygateError, duckdb.Error) as exc:
            self.problem = f"database unusable: {exc}".splitlines()[0]
            return
        try:
            try:
                current = api.is_current(con, self.config) or self._only_own_appends(con)
            except duckdb.Error:
                current = False
            if not current:
                con.close()
                try:
                    con = dbm.connect(self.db)
                except (ReplaygateError, duckdb.Error):
                    return  # another process writes: answer from the last analysis
                api.analyse(con, self.config)
            if self.snapshot is None or self.snapshot.key != api.stamp(con, self.config):
                self.snapshot = build_snapshot(con, self.config)
            self.problem = None
            self._record(con)
        finally:
            con.close()

    def _only_own_appends(self, con: duckdb.DuckDBPyConnection) -> bool:
        """Whether the analysis is current but for this server's own history appends.

        Those are evaluations of the analysis itself: re-analysing for them would take
        the database for writing (locking out other readers and writers) after every
        answered question, to re-run a detector (proceeded_while_rollback) whose result
        they can change only for rollout actions dated after them, which arrive as a
        data change and a full analysis anyway."""
        from replaygate import api
        from replaygate.api import db as dbm
        from replaygate.api import decisionlog

        return (
            self._own_history is not None
            and dbm.get_meta(con, "analysis_stamp") == api.stamp(con, self.config)
            and decisionlog.version(con) == self._own_history
        )

    def _record(self, con: duckdb.DuckDBPyConnection) -> None:
        """Append the evaluations answered since the last pass to the history (an
        unchanged evaluation of a stage is not repeated)."""
        from replaygate import api
        from replaygate.api import db as dbm
        from replaygate.api import decisionlog

        with self._asked_lock:
            asked, self._asked = self._asked, set()
        snap = self.snapshot
        if not asked or snap is None:
            return
        stages = [snap.stages[k] for k in sorted(asked) if k in snap.stages]
        before = decisionlog.version(con)
        current = before in (dbm.get_meta(con, "history_stamp", "0"), self._own_history)
        try:
            rows = api.record_decisions(
                con, {"stages": stages}, self.config, "serve", only_changes=True
            )
        except (ReplaygateError, OSError) as exc:
            self.problem = f"history not written: {exc}".splitlines()[0]
            return
        if rows:
            # Only an append onto a history the analysis had read is ours alone; one onto
            # another writer's change leaves that change to be analysed.
            self._own_history = decisionlog.version(con) if current else None

    def asked(self, key: str) -> None:
        with self._asked_lock:
            self._asked.add(key)

    def wait_ready(self, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        while self.snapshot is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.snapshot is not None

    @property
    def listening(self) -> tuple[str, int]:
        """The address and port it listens on (the port the system chose, for port 0)."""
        host, port = self.socket.getsockname()[:2]
        return str(host), int(port)

    def server_close(self) -> None:
        self._stop.set()
        super().server_close()

    # -- connections

    def process_request(self, request: _Request, client_address: Any) -> None:
        # A cap on connections held at once: past it, one short 503 and the socket closes
        # (idle or slow clients cannot pin a thread each without bound).
        if not self.slots.acquire(blocking=False):
            # a TCP server's request is its socket (a datagram server's is a pair)
            sock = request if isinstance(request, socket.socket) else request[1]
            try:
                sock.settimeout(1.0)
                body = b'{"error": "too many connections"}'
                sock.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                )
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: _Request, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class Handler(BaseHTTPRequestHandler):
    server: GateServer
    server_version = "replaygate"
    sys_version = ""
    protocol_version = "HTTP/1.0"
    error_content_type = "application/json"
    error_message_format = '{"error": "%(code)d %(message)s"}'

    def setup(self) -> None:
        super().setup()
        # A socket timeout: a client that connects and stays silent costs one slot for
        # at most this long.
        self.connection.settimeout(self.server.timeout_s)

    def do_GET(self) -> None:  # noqa: N802 - the http.server naming
        self._answer()

    def do_POST(self) -> None:  # noqa: N802
        raw = self.headers.get("Content-Length")
        try:
            length = int(raw) if raw is not None else 0
        except ValueError:
            length = -1
        if length < 0:
            self._send(400, {"error": "bad Content-Length"})
            return
        if length > MAX_BODY:
            self._send(413, {"error": f"body over {MAX_BODY} bytes"})
            return
        try:
            self.rfile.read(length)  # a webhook's payload: read, not used
        except OSError:
            self.close_connection = True
            return
        self._answer()

    def _refuse(self) -> None:
        self._send(405, {"error": "read-only: GET (or a webhook's POST) only"})

    do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815

    def _answer(self) -> None:
        url = urlsplit(self.path)
        parts = url.path.split("/")
        snap = self.server.snapshot
        if url.path == "/healthz":
            if snap is None:
                self._send(503, {"ok": False, "error": self.server.problem})
            else:
                self._send(200, {"ok": True, "data_version": snap.data_version,
                                 "analysed_at": snap.analysed_at})  # fmt: skip
            return
        if len(parts) != 4 or parts[:2] != ["", "gates"] or not parts[2] or not parts[3]:
            self._send(404, {"error": "not found: GET /gates/{release}/{stage}"})
            return
        release, stage = unquote(parts[2]), unquote(parts[3])
        oks = parse_qs(url.query).get("ok")
        ok = oks[0] if oks else None
        if ok not in (None, "any", "rollback"):
            self._send(400, {"error": "ok must be any or rollback"})
            return
        if snap is None:
            self._send(503, {"error": f"no analysis yet ({self.server.problem})"})
            return
        rel = None if release == NO_RELEASE else release
        found = snap.find(rel, None if stage == NEWEST else stage)
        if found is None:
            what = "no stage" if stage == NEWEST else f"no stage named {stage!r}"
            of = "without a release" if rel is None else f"of release {release!r}"
            if ok == "any":
                # Not imported yet is no reason to roll back: an Argo `web` metric would
                # count a 404 as an error and abort after consecutiveErrorLimit of them.
                self._send(200, self._doc(snap, Decision.HOLD, stage, rel, [NOT_IN_LOG], []))
            else:
                self._send(404, {"error": f"{what} {of} in the rollout log"})
            return
        self.server.asked(found["stage"])
        doc = self._doc(
            snap, found["decision"], found["stage"], found.get("release"), found["reasons"], [found]
        )
        self._send(status_for(found["decision"], ok), doc)

    @staticmethod
    def _doc(
        snap: Snapshot,
        decision: str,
        stage: str | None,
        release: str | None,
        reasons: Iterable[str],
        stages: list[dict[str, Any]],
    ) -> dict[str, Any]:
        return {
            "decision": decision,
            "stage": stage,
            "release": release,
            "reasons": list(reasons),
            "data_version": snap.data_version,
            "analysed_at": snap.analysed_at,
            "stages": stages,
        }

    def _send(self, code: int, doc: dict[str, Any]) -> None:
        body = json.dumps(doc, default=str).encode()
        try:
            self.send_response(code, HTTPStatus(code).phrase)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(body)
        except (TimeoutError, OSError):
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        if not self.server.quiet:
            # The path only (no query, no headers); repr keeps control characters inert. A
            # request refused before its line was parsed has no path.
            path = urlsplit(getattr(self, "path", "") or "").path[:200]
            sys.stderr.write(
                f"{self.log_date_time_string()} {getattr(self, 'command', None)} "
                f"{path!r} -> {args[1] if len(args) > 1 else args[0] if args else ''}\n"
            )


def make_server(
    db: str,
    config: Config,
    host: str = "127.0.0.1",
    port: int = 8765,
    quiet: bool = False,
    **kw: Any,
) -> GateServer:
    try:
        return GateServer((host, port), db, config, quiet=quiet, **kw)
    except OSError as exc:
        raise ReplaygateError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
