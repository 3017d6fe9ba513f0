"""Decision-change notifications: JSON POSTed to webhooks, off the ingest path.

A message carries a Slack-compatible `text` (so an incoming-webhook URL works as it is)
and the structured change: stage, decision, previous decision, reasons, the gates
that changed and a link to the stage in the dashboard.

Each URL has its own delivery thread and its own bounded queue, so a webhook that is
slow or accepts and never answers delays only its own messages: never another URL's,
never a watch cycle (`send` does not block). Deliveries retry with exponential backoff;
a failure is logged with the HTTP status (or what went wrong) and never raised. A full
queue drops its oldest message and says so. On stop, what is queued is delivered within
a grace period and whatever is still pending then is logged, message by message, never
dropped silently. Only http and https URLs are accepted, and redirects are not followed
(a redirect could lead to another scheme or host).
"""

from __future__ import annotations

import collections
import http.client
import json
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import IO, Any

from replaygate.api import Decision

ICON = {
    Decision.PROCEED: ":large_green_circle:",
    Decision.HOLD: ":large_yellow_circle:",
    Decision.ROLLBACK: ":red_circle:",
}
BACKOFF = (1, 2, 4, 8, 16, 32)  # seconds before each retry
TIMEOUT = 10  # seconds one POST may take, connection included
QUEUE_LIMIT = 100  # messages waiting per URL; beyond it the oldest is dropped (and said)
FLUSH_SECONDS = 10.0  # on stop: time to deliver what is queued, for all URLs together
SCHEMES = ("http", "https")


def check_url(url: str) -> str | None:
    """Why a --notify URL is refused, or None: only http(s) URLs with a host (a
    `file:` or `data:` URL would make watch read or post somewhere no webhook lives)."""
    try:
        p = urllib.parse.urlsplit(url)
        p.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return "is not a URL"
    if p.scheme.lower() not in SCHEMES:
        got = f"a {p.scheme}: URL" if p.scheme else "no scheme"
        return f"must be an http:// or https:// URL (got {got})"
    if not p.hostname:
        return "has no host"
    return None


def slack_escape(text: str) -> str:
    """Logged values in Slack's mrkdwn: one line, no markup (queries/escape.py)."""
    from replaygate.api import slack_text

    return slack_text(text)


def stage_url(dashboard_url: str, stage: str) -> str:
    return dashboard_url.rstrip("/") + "/?" + urllib.parse.urlencode({"stage": stage})


def message(change: dict[str, Any], dashboard_url: str) -> dict[str, Any]:
    """The JSON document for one stage's change (see docs: During a rollout)."""
    stage, decision, previous = change["stage"], change["decision"], change["previous"]
    url = stage_url(dashboard_url, stage)
    head = (
        f"{ICON.get(decision, '')} replaygate: stage *{slack_escape(stage)}* is "
        f"{slack_escape(decision)}"
    )
    if previous is None:
        head += " (new stage)"
    elif previous != decision:
        head += f" (was {slack_escape(previous)})"
    lines = [head.strip()]
    lines += [f"• {slack_escape(r)}" for r in change["reasons"][:5]]
    if len(change["reasons"]) > 5:
        lines.append(f"• … and {len(change['reasons']) - 5} more")
    lines.append(f"<{url}|Open the stage in the dashboard>")
    return {
        "text": "\n".join(lines),
        "stage": stage,
        "decision": decision,
        "previous": previous,
        "reasons": change["reasons"],
        "gates": change.get("gates", []),
        "url": url,
        "at": change.get("at"),
    }


def _where(url: str) -> str:
    # Webhook URLs carry their secret in the path: name only scheme and host in logs.
    p = urllib.parse.urlsplit(url)
    return f"{p.scheme}://{p.hostname or ''}" + (f":{p.port}" if p.port else "")


def _what(doc: dict[str, Any]) -> str:
    from replaygate.api import terminal

    return terminal(f"{doc.get('stage')} {doc.get('decision')}")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx answer is the receiver's answer, not a place to go: a webhook that
    redirects could send the message to another host or scheme."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _failure(exc: BaseException, timeout: float) -> tuple[str, bool]:
    """What went wrong, for the log line, and whether trying again may help."""
    if isinstance(exc, urllib.error.HTTPError):
        phrase = exc.reason if isinstance(exc.reason, str) and exc.reason else ""
        phrase = phrase or http.client.responses.get(exc.code, "")
        text = f"HTTP {exc.code}" + (f" {phrase}" if phrase else "")
        if 300 <= exc.code < 400:
            return text + ", a redirect (not followed)", False
        # The receiver refuses this message: retrying will not help, unless it says so.
        return text, not (400 <= exc.code < 500 and exc.code not in (408, 425, 429))
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError) or "timed out" in str(reason):
        return f"no answer within {timeout:g} s", True
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused", True
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror, True
    return type(reason).__name__, True


class _Lane:
    """One URL: its queue, its thread, the message being delivered."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.queue: collections.deque[dict[str, Any]] = collections.deque()
        self.inflight: dict[str, Any] | None = None
        self.thread: threading.Thread | None = None


class Notifier:
    """Deliveries to `urls`, one lane each; `log` takes every line it has to say."""

    def __init__(
        self,
        urls: list[str],
        log: Callable[[str], object] | None = None,
        backoff: tuple[float, ...] = BACKOFF,
        timeout: float = TIMEOUT,
        limit: int = QUEUE_LIMIT,
        grace: float = FLUSH_SECONDS,
    ) -> None:
        for url in urls:
            why = check_url(url)
            if why:
                raise ValueError(f"notify URL {why}")
        self.urls = list(urls)
        self.log = log
        self.backoff = backoff
        self.timeout = timeout
        self.limit = limit
        self.grace = grace
        self._lanes = [_Lane(u) for u in self.urls]
        self._cond = threading.Condition()
        self._closing = False  # no more messages; deliver what is queued
        self._abort = threading.Event()  # the grace period is over: stop trying
        self.sent = 0
        self.failed = 0
        self.dropped = 0

    def start(self) -> Notifier:
        for i, lane in enumerate(self._lanes):
            lane.thread = threading.Thread(
                target=self._run, args=(lane,), name=f"notify-{i}", daemon=True
            )
            lane.thread.start()
        return self

    def send(self, doc: dict[str, Any]) -> None:
        """Queue `doc` for every URL; never waits on a delivery."""
        with self._cond:
            for lane in self._lanes:
                if len(lane.queue) >= self.limit:
                    old = lane.queue.popleft()
                    self.dropped += 1
                    self._say(
                        f"notify: {self.limit} messages waiting for {_where(lane.url)}; "
                        f"dropped the oldest ({_what(old)})"
                    )
                lane.queue.append(doc)
            self._cond.notify_all()

    def close(self, grace: float | None = None) -> list[tuple[str, dict[str, Any]]]:
        """Deliver what is queued within `grace` seconds (default: the notifier's), then
        stop; every message not delivered by then is logged. Returns them as (where,
        message)."""
        grace = self.grace if grace is None else grace
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        deadline = time.monotonic() + grace
        for lane in self._lanes:
            if lane.thread is not None:
                lane.thread.join(max(0.0, deadline - time.monotonic()))
        self._abort.set()  # backoff waits end now; a request in flight runs to its timeout
        with self._cond:
            self._cond.notify_all()
            pending = []
            for lane in self._lanes:
                left = ([lane.inflight] if lane.inflight is not None else []) + list(lane.queue)
                lane.queue.clear()
                pending += [(_where(lane.url), doc) for doc in left]
        for where, doc in pending:
            self._say(f"notify: stopped before the {_what(doc)} change reached {where}")
        if pending:
            self._say(f"notify: {len(pending)} message(s) not delivered at stop")
        return pending

    def _say(self, line: str) -> None:
        if self.log is not None:
            self.log(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def _run(self, lane: _Lane) -> None:
        while True:
            with self._cond:
                while not lane.queue and not self._closing:
                    self._cond.wait()
                if not lane.queue or self._abort.is_set():
                    return
                doc = lane.queue.popleft()
                lane.inflight = doc
            delivered = self._deliver(lane.url, doc)
            with self._cond:
                if delivered is not None:  # None: cut short by the stop, still pending
                    lane.inflight = None

    def _deliver(self, url: str, doc: dict[str, Any]) -> bool | None:
        """True when delivered, False when given up, None when the stop cut it short."""
        body = json.dumps(doc).encode()
        last = ""
        for attempt in range(len(self.backoff) + 1):
            if attempt and self._abort.wait(self.backoff[attempt - 1]):
                return None
            if self._abort.is_set():
                return None
            try:
                req = urllib.request.Request(
                    url, data=body, method="POST", headers={"Content-Type": "application/json"}
                )
                with _OPENER.open(req, timeout=self.timeout) as resp:
                    resp.read()
                with self._cond:
                    self.sent += 1
                return True
            except (OSError, ValueError, http.client.HTTPException) as exc:
                last, again = _failure(exc, self.timeout)
                if not again:
                    break
        with self._cond:
            self.failed += 1
        self._say(
            f"notify: could not deliver the {_what(doc)} change to {_where(url)} ({last}); given up"
        )
        return False
