"""Decision-change notifications: JSON POSTed to webhooks, off the ingest path.

A message carries a Slack-compatible `text` (so an incoming-webhook URL works as it is)
and the structured change: stage, decision, previous decision, reasons, the gates
that changed and a link to the stage in the dashboard. Deliveries run in one background
thread and retry with exponential backoff; a failure is logged, never raised, and never
delays a watch cycle.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

ICON = {
    "PROCEED": ":large_green_circle:",
    "HOLD": ":large_yellow_circle:",
    "ROLLBACK": ":red_circle:",
}
BACKOFF = (1, 2, 4, 8, 16, 32)  # seconds before each retry
TIMEOUT = 10


def slack_escape(text: str) -> str:
    """Logged values in Slack's mrkdwn: one line, no markup (queries/escape.py)."""
    from replaygate.queries.escape import slack_text

    return slack_text(text)


def stage_url(dashboard_url: str, stage: str) -> str:
    return dashboard_url.rstrip("/") + "/?" + urllib.parse.urlencode({"stage": stage})


def message(change: dict, dashboard_url: str) -> dict:
    """The JSON document for one stage's change (see docs: During a rollout)."""
    stage, decision, previous = change["stage"], change["decision"], change["previous"]
    url = stage_url(dashboard_url, stage)
    head = (
        f"{ICON.get(decision, '')} replaygate: stage *{slack_escape(stage)}* is "
        f"{slack_escape(decision)}"
    )
    head += f" (was {slack_escape(previous)})" if previous and previous != decision else ""
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


@dataclass
class Notifier:
    urls: list[str]
    log: Callable[[str], object] | None = field(default=None)
    backoff: tuple = BACKOFF
    _q: queue.Queue = field(default_factory=queue.Queue)
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    sent: int = 0
    failed: int = 0

    def start(self) -> Notifier:
        if self.urls:
            self._thread = threading.Thread(target=self._run, name="notify", daemon=True)
            self._thread.start()
        return self

    def send(self, doc: dict) -> None:
        for url in self.urls:
            self._q.put((url, doc))

    def close(self, grace: float = 5.0) -> None:
        """Deliver what is queued within `grace` seconds, then give up on the rest."""
        if not self._thread:
            return
        deadline = time.monotonic() + grace
        while not self._q.empty() and time.monotonic() < deadline:
            time.sleep(0.05)
        self._stop.set()
        self._q.put(None)
        self._thread.join(max(0.0, deadline - time.monotonic()) + 0.5)

    def _say(self, line: str) -> None:
        if self.log is not None:
            self.log(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            url, doc = item
            self._deliver(url, doc)
            self._q.task_done()

    def _deliver(self, url: str, doc: dict) -> None:
        body = json.dumps(doc).encode()
        last = ""
        for attempt in range(len(self.backoff) + 1):
            if attempt and self._stop.wait(self.backoff[attempt - 1]):
                break
            try:
                req = urllib.request.Request(
                    url, data=body, method="POST", headers={"Content-Type": "application/json"}
                )
                with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
                    resp.read()
                self.sent += 1
                return
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    break  # the receiver refuses this message: retrying will not help
            except (OSError, ValueError) as exc:
                last = type(exc).__name__
        self.failed += 1
        self._say(
            f"notify: could not deliver the {doc.get('stage')} change to {_where(url)} "
            f"({last}); given up"
        )
