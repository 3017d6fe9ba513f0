"""What real nginx logs of a client that hangs up on an event stream, read by the nginx
adapter: Debian's nginx in front of a small local SSE upstream, logging in
docs/sources.md's `mcp_json` format (taken from the document itself), and clients that
complete a stream or leave it at each point. `client_closed` must be true only where the
line shows the client ended the request (499: it left before the answer's headers), false
only where `$request_completion` is `OK`, and unknown where the line cannot tell (nginx
keeps the headers' 200 for a client that leaves after them, `$request_completion` empty);
an empty event stream nginx completed is an answer lost on the way (`undelivered_result`),
one it cannot tell from a client's hang-up is `cannot_tell`."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from .procs import free_port, stop, wait_port

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed"),
]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "sources.md"
CASES = ("complete", "left_mid_stream", "left_before_headers", "upstream_closed", "left_early")


def _documented_format() -> str:
    """docs/sources.md's nginx `log_format mcp_json` (the raw-id one), as written there."""
    m = re.search(r"```nginx\n(log_format mcp_json escape=json .*?'\}';)\n", DOCS.read_text(), re.S)
    assert m, "docs/sources.md has no nginx mcp_json format"
    return m.group(1)


class _Upstream(BaseHTTPRequestHandler):
    """An SSE answer per case (the case is the query string)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        case = self.path.partition("?")[2]
        if case == "left_before_headers":
            time.sleep(1.5)  # the client leaves while the answer has not begun
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        if case == "upstream_closed":
            # the answer's headers went out; the server dies before the first event
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if case == "left_early":
            time.sleep(1.0)  # the client reads the headers and leaves before any event
        n = 3 if case == "complete" else 30
        try:
            for i in range(n):
                body = f'id: {i}\ndata: {{"jsonrpc":"2.0","method":"ping"}}\n\n'.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(body), body))
                self.wfile.flush()
                time.sleep(0.05)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # nginx closed the upstream connection after the client left
            pass


def _request(port: int, case: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}'
    s.sendall(
        f"POST /mcp?{case} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    return s


def _read_until(s: socket.socket, marker: bytes) -> bytes:
    got = b""
    while marker not in got:
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    return got


def _client(port: int, case: str) -> None:
    s = _request(port, case)
    try:
        if case in ("complete", "upstream_closed"):
            _read_until(s, b"\x00")  # to the end: nginx closes (Connection: close)
        elif case == "left_mid_stream":
            _read_until(s, b"id: 1\n")
        elif case == "left_early":
            _read_until(s, b"\r\n\r\n")
        else:
            time.sleep(0.3)
    finally:
        s.close()


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """The access log's line per case, and the log file."""
    d = tmp_path_factory.mktemp("nginx")
    up_port, port = free_port(), free_port()
    upstream = ThreadingHTTPServer(("127.0.0.1", up_port), _Upstream)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    (d / "nginx.conf").write_text(
        f"daemon off; worker_processes 1; user root; pid {d}/nginx.pid;\n"
        f"error_log {d}/nginx-error.log info;\nevents {{}}\nhttp {{\n"
        f"  client_body_temp_path {d}/nb; proxy_temp_path {d}/np; fastcgi_temp_path {d}/nf;\n"
        f"  uwsgi_temp_path {d}/nu; scgi_temp_path {d}/ns;\n"
        f"  {_documented_format()}\n"
        f"  server {{\n    listen 127.0.0.1:{port};\n"
        f"    access_log {d}/mcp-access.log mcp_json;\n"
        "    location /mcp {\n"
        f"      proxy_pass http://127.0.0.1:{up_port};\n"
        "      proxy_http_version 1.1;\n      proxy_set_header Host $http_host;\n"
        "      proxy_buffering off;\n      proxy_read_timeout 1h;\n    }\n  }\n}\n"
    )
    proc = subprocess.Popen(
        [NGINX, "-c", str(d / "nginx.conf"), "-p", str(d)],
        stdout=subprocess.DEVNULL,
        stderr=(d / "nginx.out").open("w"),
    )
    log = d / "mcp-access.log"
    try:
        wait_port(port, timeout=10)
        threads = [threading.Thread(target=_client, args=(port, c)) for c in CASES]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
        # nginx writes a request's line when it finalizes it
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if log.exists() and len(log.read_text().splitlines()) >= len(CASES):
                break
            time.sleep(0.1)
    finally:
        stop([proc])
        upstream.shutdown()
        upstream.server_close()
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    by_case = {x["uri"].partition("?")[2]: x for x in lines}
    assert set(by_case) == set(CASES), (lines, (d / "nginx-error.log").read_text())
    return by_case, log


def test_what_nginx_logs_of_each_hang_up(logged):
    """The lines themselves: the shapes the adapter's reading rests on."""
    by_case, _ = logged
    seen = {
        c: (x["status"], x["body_bytes_sent"] == "0", x["request_completion"])
        for c, x in by_case.items()
    }
    assert seen == {
        "complete": ("200", False, "OK"),
        # the answer's headers (and events) went out: their status stays
        "left_mid_stream": ("200", False, ""),
        "left_early": ("200", True, ""),
        # NGX_HTTP_CLIENT_CLOSED_REQUEST: the client left before the answer began
        "left_before_headers": ("499", True, ""),
        # nginx ended the request itself ("upstream prematurely closed connection")
        "upstream_closed": ("200", True, "OK"),
    }


def test_the_adapter_reads_who_ended_each_request(logged, tmp_path):
    from replaygate.core import db as dbm
    from replaygate.core.config import Config
    from replaygate.ingest.load import ingest
    from replaygate.queries import runner

    _, log = logged
    con = dbm.connect(str(tmp_path / "n.duckdb"))
    try:
        report = ingest(con, [log], Config())
        assert report.quarantined == 0, report.quarantine_reasons
        closed = dict(con.execute("SELECT path, client_closed FROM proxy").fetchall())
        runner.analyse(con, Config())
        lost = con.execute(
            "SELECT count(*) FROM findings WHERE detector = 'undelivered_result'"
        ).fetchone()[0]
        undecided = runner.cannot_tell(con).get("undelivered_result", [])
    finally:
        con.close()
    assert {p.partition("?")[2]: v for p, v in closed.items()} == {
        "complete": False,
        "upstream_closed": False,
        "left_before_headers": True,
        # a client that left after the headers: nginx's line cannot show it
        "left_mid_stream": None,
        "left_early": None,
    }
    # the empty stream nginx completed is a lost answer; the empty one a client may have
    # ended cannot be told; the one that carried events is delivered as far as nginx knows
    assert lost == 1
    assert [(u["missing"], u["units"]) for u in undecided] == [("proxy.client_closed", 1)]
