"""`replaygate serve`: the gates over HTTP, read-only, for CD controllers.

    GET /gates/{release}/{stage}   -> the gates JSON of that stage
        200 PROCEED, 409 HOLD, 412 ROLLBACK; 404 unknown stage; 503 database unusable

`{release}` is `-` for a rollout log without releases; `{stage}` is `_` for the release's
newest stage. POST is answered the same way (Flagger's webhooks POST; the body is
ignored). `?ok=any` answers 200 whatever the decision (Argo Rollouts' `web` provider
treats any other code as an error; judge `result.decision` instead); `?ok=rollback`
answers 200 only on ROLLBACK (a Flagger `rollback` webhook). `GET /healthz` is 200.

Nothing here changes the data; one evaluation runs at a time (an out-of-date analysis is
refreshed first, as by `replaygate gates`).
"""

from __future__ import annotations

import json
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from replaygate.ingest.errors import ReplaygateError

CODES = {"PROCEED": 200, "HOLD": 409, "ROLLBACK": 412}
NEWEST = "_"


def status_for(decision: str, ok: str | None) -> int:
    """The HTTP status of a decision, given the `ok` query parameter."""
    if ok == "any":
        return 200
    if ok == "rollback":
        return 200 if decision == "ROLLBACK" else 409
    return CODES[decision]


class GateServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, db: str, config, quiet: bool = False):
        super().__init__(address, Handler)
        self.db = db
        self.config = config
        self.quiet = quiet
        self.lock = threading.Lock()

    def evaluate(self, release: str | None, stage: str | None) -> dict:
        from .gatewait import evaluate_once

        with self.lock:
            return evaluate_once(self.db, self.config, stage, release)


class Handler(BaseHTTPRequestHandler):
    server: GateServer
    server_version = "replaygate"
    sys_version = ""

    def do_GET(self) -> None:  # noqa: N802 - the http.server naming
        self._answer()

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        if 0 < length <= 1 << 20:
            self.rfile.read(length)  # a webhook's payload: read, not used
        self._answer()

    def _refuse(self) -> None:
        self._send(405, {"error": "read-only: GET (or a webhook's POST) only"})

    do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815

    def _answer(self) -> None:
        url = urlsplit(self.path)
        parts = url.path.split("/")
        if url.path == "/healthz":
            self._send(200, {"ok": True})
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
        try:
            doc = self.server.evaluate(release, None if stage == NEWEST else stage)
        except ReplaygateError as exc:
            code = 404 if "no stage" in str(exc) else 503
            self._send(code, {"error": str(exc)})
            return
        except Exception as exc:  # noqa: BLE001 - one request fails, never the server
            self._send(500, {"error": type(exc).__name__})
            return
        if not doc.get("stages"):
            self._send(404, {"error": doc.get("note", "no stage")})
            return
        self._send(status_for(doc["stages"][0]["decision"], ok), doc)

    def _send(self, code: int, doc: dict) -> None:
        body = json.dumps(doc, default=str).encode()
        self.send_response(code, HTTPStatus(code).phrase)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base's name
        if not self.server.quiet:
            # The path only (no query, no headers); repr keeps control characters inert.
            path = urlsplit(self.path).path
            sys.stderr.write(
                f"{self.log_date_time_string()} {self.command} {path!r} -> {args[1]}\n"
                if len(args) > 1
                else f"{self.log_date_time_string()} {path!r}\n"
            )


def make_server(db: str, config, host: str = "127.0.0.1", port: int = 8765, quiet=False):
    try:
        return GateServer((host, port), db, config, quiet=quiet)
    except OSError as exc:
        raise ReplaygateError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
