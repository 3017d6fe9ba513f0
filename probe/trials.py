"""The probe's scenarios against a live endpoint, each ending in a verdict (`pass`,
`fail`, `cannot_tell`, `skipped`) and leaving what the client received as evidence:

- resume: a streaming call cut after k events and resumed with Last-Event-ID, beside an
  uncut reference call of the same tool in the same session (seed 002: only the client
  can see that a replay lost an event while the answer still arrived);
- cursors: a cursor of another session's stream, and one the server does not hold;
- dead_session: DELETE, reuse, re-initialize;
- origin: a foreign Origin, a foreign Host, the allowed Origin;
- resend: (2026-07-28, only with --write-tool) a cut call sent again with its
  idempotency key;
- evicted: (on request) a real cursor presented after enough further calls for a bounded
  store to have evicted it."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .discover import Discovery
from .evidence import Evidence, Sink, payload_digest
from .wire import Answer, BudgetExhausted, DeadlineReached, Event, Pacer, Wire

SCENARIOS = ("resume", "cursors", "dead_session", "origin", "resend", "evicted")
DEFAULT_SCENARIOS = ("resume", "cursors", "dead_session", "origin")
FOREIGN_ORIGIN = "https://replaygate-probe.invalid"
FOREIGN_HOST = "replaygate-probe.invalid"
MAX_RESUMES = 8


@dataclass
class Settings:
    url: str
    out: Path
    run_id: str
    key: bytes
    version: str = "2025-11-25"
    origin: str | None = None  # an allowed Origin; default: the endpoint's own
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    cut_after: int = 2
    resume_after: float = 1.0  # the client is away at least this long (and `retry:`)
    write_tool: str | None = None
    write_arguments: dict[str, Any] = field(default_factory=dict)
    key_arg: str | None = None
    evict_calls: int = 20  # further calls of the tool before the evicted cursor is shown
    dead_statuses: tuple[int, ...] = (404,)
    timeout: float = 30.0
    deadline: float | None = None  # time.monotonic() by which the run ends
    stage: str | None = None
    release: str | None = None
    ledger: bool = True
    max_requests: int = 200
    rate: float = 10.0
    scenarios: tuple[str, ...] = DEFAULT_SCENARIOS
    agent: str = ""
    # Writes every file under `out` (the CLI's output guard): required, so no caller
    # writes the evidence without one.
    sink: Sink = field(kw_only=True)

    def allowed_origin(self) -> str:
        if self.origin:
            return self.origin
        u = urlsplit(self.url)
        return f"{u.scheme}://{u.netloc}"


@dataclass
class Verdict:
    scenario: str
    status: str  # pass, fail, cannot_tell, skipped
    line: str
    detail: dict[str, Any] = field(default_factory=dict)
    seconds: float | None = None  # how long the scenario took

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def ok(ans: Answer) -> bool:
    return 200 <= ans.status < 300


def refused(ans: Answer) -> bool:
    return 400 <= ans.status < 500


def _status(ans: Answer) -> str:
    return ans.error or f"HTTP {ans.status}"


def _answered(ans: Answer, rid: str) -> bool:
    return any(e.answers == rid for e in ans.events)


def _broken(ans: Answer) -> str:
    """What a call's stream that ended without its answer ended with: the error, or (an end
    that looked clean: a proxy that lost the rest of the answer on its way) the events."""
    return ans.error or f"it ended after {len(ans.events)} events"


def _unfinished(ref: Answer | None, stopped: str | None) -> str:
    """Why a reference call has no answer: what stopped or broke it, what it ended with, or
    that it was still running when the resumed call was judged."""
    if stopped is not None:
        return stopped
    if ref is None:
        return "still running when the resumed call ended"
    if ref.error is not None or not ok(ref):
        return _status(ref)
    return f"its stream ended after {len(ref.events)} events without the answer"


class Probe:
    """One probe run: its request budget, its evidence files and its discovery."""

    def __init__(self, s: Settings, discovery: Discovery) -> None:
        self.s = s
        self.discovery = discovery
        self.pacer = Pacer(s.max_requests, s.rate, s.deadline)
        self._reopening: set[int] = set()  # wires opening a session after losing one
        self.ev = Evidence(
            s.out,
            s.run_id,
            s.key,
            stage=s.stage,
            release=s.release,
            sink=s.sink,
            ledger=s.ledger,
        )

    # -- sessions ---------------------------------------------------------------------
    def wire(self, origin: str | None = None) -> Wire:
        w = Wire(
            self.s.url,
            self.pacer,
            run_id=self.s.run_id,
            version=self.s.version,
            origin=origin if origin is not None else self.s.allowed_origin(),
            timeout=self.s.timeout,
            agent=self.s.agent,
        )
        w.dead_statuses = self.s.dead_statuses
        w.on_dead = self.session_lost
        return w

    def session_lost(self, w: Wire, raw: str) -> None:
        """A request on `w`'s session got a dead-session answer no scenario asked for (the
        server restarted, or expired the session): the session is gone, and a client MUST
        start a new one (a new initialize without a session id), never use it again. The
        scenario goes on to its verdict on the new session, which its end closes."""
        self.ev.session(raw, w.generation, "REINITIALIZE_REQUIRED", version=self.s.version)
        w.session = None
        if id(w) in self._reopening:
            return  # the new session was lost while it opened: no chain of them
        self._reopening.add(id(w))
        try:
            # (the run's bounds may stop it: the session then stays closed)
            with contextlib.suppress(BudgetExhausted, DeadlineReached):
                self.open(w, generation=w.generation + 1, prev=raw)
        finally:
            self._reopening.discard(id(w))

    def open(self, w: Wire, generation: int = 1, prev: str | None = None, **kw: Any) -> Answer:
        w.generation = generation
        ans = w.initialize(**kw)
        if ok(ans) and w.session:
            self.ev.session(
                w.session,
                generation,
                "SESSION_ACTIVE",
                version=self.s.version,
                prev=prev,
                init_result=w.init_result,
                ts=ans.events[-1].ts if ans.events else None,
            )
        return ans

    def close(self, w: Wire) -> Answer | None:
        """DELETE the session (the probe leaves nothing behind on the server; past the
        deadline and its grace, the session is left to the server's expiry)."""
        if not w.session:
            w.close()
            return None
        raw, generation = w.session, w.generation
        left = self.pacer.left(cleanup=True)
        if left is not None and left <= 0:
            w.session = None
            w.close()
            return None
        self.ev.session(raw, generation, "DELETE_REQUESTED", version=self.s.version)
        try:
            ans = w.delete()
        except DeadlineReached:
            w.session = None
            w.close()
            return None
        if ok(ans):
            self.ev.session(raw, generation, "TERMINATED", version=self.s.version)
        w.session = None
        w.close()
        return ans

    # -- tools --------------------------------------------------------------------------
    def pick_tool(self) -> tuple[str | None, dict[str, Any], str]:
        """The tool to stream through: --tool (it must be annotated read-only), else a
        read-only tool that needs no arguments; or why there is none."""
        tools = {t.name: t for t in self.discovery.tools}
        if self.discovery.error and not tools:
            return None, {}, f"tools/list failed ({self.discovery.error})"
        if self.s.tool:
            t = tools.get(self.s.tool)
            if t is None:
                return None, {}, f"the endpoint lists no tool {self.s.tool!r}"
            if not t.read_only:
                return (
                    None,
                    {},
                    (
                        f"tool {t.name!r} is not annotated readOnlyHint; the probe calls a "
                        "tool with side effects only when named with --write-tool"
                    ),
                )
            return t.name, self.s.arguments, ""
        readers = [t for t in self.discovery.tools if t.read_only]
        for t in readers:
            if not t.required:
                return t.name, {}, ""
        if readers:
            names = ", ".join(t.name for t in readers[:6])
            return (
                None,
                {},
                (
                    f"every read-only tool needs arguments ({names}): name one that streams "
                    "several events with --tool NAME --arguments JSON"
                ),
            )
        return (
            None,
            {},
            (
                "no tool is annotated readOnlyHint: name a read-only tool that streams several "
                "events with --tool NAME [--arguments JSON]"
            ),
        )

    # -- scenarios ----------------------------------------------------------------------
    def run(self, name: str) -> Verdict:
        fn = getattr(self, f"scenario_{name}")
        t0 = time.monotonic()
        try:
            verdict: Verdict = fn()
        except (BudgetExhausted, DeadlineReached) as exc:
            # Stopped by its own bounds: what the endpoint does was not seen to the end.
            verdict = Verdict(name, "cannot_tell", f"stopped: {exc}")
        except Exception as exc:  # noqa: BLE001 - a scenario's failure is its verdict
            verdict = Verdict(name, "fail", f"{type(exc).__name__}: {exc}")
        verdict.seconds = round(time.monotonic() - t0, 2)
        return verdict

    def scenario_resume(self) -> Verdict:
        tool, args, why = self.pick_tool()
        if tool is None:
            return Verdict("resume", "cannot_tell", why)
        w = self.wire()
        try:
            init = self.open(w)
            if not ok(init):
                return Verdict("resume", "fail", f"initialize answered {_status(init)}")
            if not w.session:
                return Verdict(
                    "resume",
                    "cannot_tell",
                    "the endpoint opened no session: no resumption to probe",
                )
            return self._resume(w, tool, args)
        finally:
            self.close(w)

    def _resume(self, w: Wire, tool: str, args: dict[str, Any]) -> Verdict:
        sid = w.session
        assert sid is not None
        ref_rid, cut_rid = w.next_id(), w.next_id()
        digest = payload_digest(tool, args)
        call_fields = {
            "method": "POST",
            "tool_name": tool,
            "tool_class": "read",
            "payload_digest": digest,
        }
        # The reference call runs on a connection of its own in the same session, while
        # the cut one is resumed: an uncut answer to compare with, and a concurrent stream
        # whose events a store that mixes streams would replay into the resumed one.
        rw = self.wire()
        rw.session = sid
        box: dict[str, Answer] = {}
        why: dict[str, str] = {}
        self.ev.stream(sid, 1, ref_rid, "STREAM_OPEN", request_id=ref_rid, **call_fields)

        def reference() -> None:
            try:
                box["ans"] = rw.call(tool, args, ref_rid)
            except (BudgetExhausted, DeadlineReached) as exc:
                why["ref"] = f"not sent: {exc or type(exc).__name__}"
            except Exception as exc:  # a thread's exception is otherwise lost to stderr
                why["ref"] = f"failed: {type(exc).__name__}: {exc}"

        ref_thread = threading.Thread(target=reference, daemon=True)
        ref_thread.start()
        self.ev.stream(sid, 1, cut_rid, "STREAM_OPEN", request_id=cut_rid, **call_fields)
        cut = w.call(tool, args, cut_rid, cut_after=self.s.cut_after)
        gets: list[Answer] = []
        detail: dict[str, Any] = {"tool": tool, "cut_after": self.s.cut_after}
        done, rejected = False, None
        try:
            if not ok(cut):
                return Verdict("resume", "fail", f"tools/call answered {_status(cut)}", detail)
            ids = [e.event_id for e in cut.events if e.event_id]
            if not cut.cut and _answered(cut, cut_rid):
                return Verdict(
                    "resume",
                    "cannot_tell",
                    (
                        f"{tool} answered within {self.s.cut_after} events: name a tool that "
                        "streams more (--tool, --arguments) or lower --cut-after"
                    ),
                    detail,
                )
            if not cut.cut:
                # Not the server's answer: its stream ended before the cut (the connection
                # broke, or a proxy lost the rest on the way). Nothing to resume from here.
                return Verdict(
                    "resume",
                    "cannot_tell",
                    f"the call's stream ended before its answer and before the cut "
                    f"({_broken(cut)}): no cut stream to resume",
                    detail,
                )
            if not ids:
                return Verdict(
                    "resume",
                    "cannot_tell",
                    "the stream carried no event ids: the endpoint offers no resumption",
                    detail,
                )
            cursor = ids[-1]
            told = next((e.retry_ms for e in cut.events if e.retry_ms), None)
            # The server's `retry:` is obeyed up to --timeout: a retry of an hour would
            # otherwise hold the probe for that long.
            retry = min(told or 500, int(self.s.timeout * 1000))
            self.ev.stream(
                sid,
                1,
                cut_rid,
                "DISCONNECTED",
                close_reason="client_disconnect",
                last_acked_event_id=cursor,
                retry_ms=told,
                ts=cut.ended and int(cut.ended * 1000),
            )
            # A resumed stream that stays silent much longer than the call's own pace is
            # given up and resumed again (a replay then delivers what was stored since): a
            # server that stores the answer but never sends it on the open stream must not
            # hold each resume for the whole --timeout.
            ts = [e.ts for e in cut.events]
            gap = max((b - a for a, b in zip(ts, ts[1:], strict=False)), default=0) / 1000
            idle = min(self.s.timeout, max(2.0, 5 * gap, retry / 1000))
            detail["resume_idle_s"] = round(idle, 2)
            # Away for the server's `retry:` at least: what it produces meanwhile is stored,
            # and only a replay can deliver it.
            self.pacer.pause(max(retry / 1000, self.s.resume_after))
            for _ in range(MAX_RESUMES):
                self.ev.stream(
                    sid,
                    1,
                    cut_rid,
                    "RESUME_PENDING",
                    method="GET",
                    resume_from_event_id=cursor,
                    last_acked_event_id=cursor,
                )
                g = w.resume(cursor, until_answer=cut_rid, read_for=self.s.timeout, idle=idle)
                if not ok(g):
                    rejected = g
                    self.ev.stream(sid, 1, cut_rid, "CURSOR_REJECTED", resume_from_event_id=cursor)
                    self.ev.stream(sid, 1, cut_rid, "CLOSED", close_reason="cursor_rejected")
                    break
                self.ev.stream(
                    sid, 1, cut_rid, "STREAM_OPEN", method="GET", ts=int(g.started * 1000)
                )
                gets.append(g)
                fresh = [e.event_id for e in g.events if e.event_id]
                cursor = fresh[-1] if fresh else cursor
                if any(e.answers == cut_rid for e in g.events):
                    done = True
                    self.ev.stream(
                        sid,
                        1,
                        cut_rid,
                        "CLOSED",
                        close_reason="completed",
                        last_acked_event_id=cursor,
                    )
                    break
                self.ev.stream(
                    sid,
                    1,
                    cut_rid,
                    "DISCONNECTED",
                    # The probe gave up on a silent stream, or the server ended it.
                    close_reason="client_disconnect" if g.cut else "server_close",
                    last_acked_event_id=cursor,
                )
                self.pacer.pause(retry / 1000)
        finally:
            # The reference call's exchange is bounded by the deadline as well; its
            # thread is waited for no longer than that.
            left = self.pacer.left(cleanup=True)
            ref_thread.join(self.s.timeout + 5 if left is None else max(0.0, left))
            if rw.session != sid:
                self.close(rw)  # it re-initialized after losing the session: its own
            else:
                rw.close()
        ref = box.get("ans")
        ref_done = ref is not None and any(e.answers == ref_rid for e in ref.events)
        if ref_done:
            assert ref is not None
            self.ev.stream(
                sid,
                1,
                ref_rid,
                "CLOSED",
                close_reason="completed",
                last_acked_event_id=_last_id(ref.events),
            )
        judged = self._receipts(sid, ref_rid, cut_rid, ref, cut, gets)
        detail.update(judged)
        detail["resumes"] = len(gets) + (1 if rejected else 0)
        if rejected is not None:
            return Verdict(
                "resume",
                "fail",
                f"the resume with Last-Event-ID was refused ({_status(rejected)})",
                detail,
            )
        if not done:
            return Verdict(
                "resume",
                "fail",
                f"the resumed stream never delivered the answer ({len(gets)} reconnects)",
                detail,
            )
        if judged["foreign"]:
            return Verdict(
                "resume",
                "fail",
                f"{judged['foreign']} events of another stream "
                "were replayed into the resumed one (cross-stream replay)",
                detail,
            )
        if not ref_done:
            return Verdict(
                "resume",
                "cannot_tell",
                "the reference call did not finish: no answer to compare with ("
                + _unfinished(ref, why.get("ref"))
                + ")",
                detail,
            )
        if judged["unaligned"]:
            return Verdict(
                "resume",
                "cannot_tell",
                f"{judged['unaligned']} events differ from "
                f"the reference call: {tool} does not stream the same events twice",
                detail,
            )
        if judged["missing"]:
            kinds = ", ".join(f"{s} ({k})" for s, k in judged["missing"])
            return Verdict(
                "resume",
                "fail",
                f"lost on replay: seq {kinds}; the answer still "
                "arrived (a complete-looking, truncated result)",
                detail,
            )
        return Verdict(
            "resume",
            "pass",
            f"cut after {self.s.cut_after} events, resumed: "
            f"{judged['replayed']} replayed, none missing, none foreign; the "
            "answer equals the reference",
            detail,
        )

    def _receipts(
        self,
        sid: str,
        ref_rid: str,
        cut_rid: str,
        ref: Answer | None,
        cut: Answer,
        gets: list[Answer],
    ) -> dict[str, Any]:
        """Write a receipt for every event received on both streams and judge the cut one
        against the reference. Seq: the reference call's events are numbered as they
        arrived (priming 0); an event of the cut call takes the seq of the same step of the
        reference (the same message, without ids and tokens); an event whose id arrived
        first on the other stream keeps that stream as its origin and its seq there."""
        first_stream: dict[str, str] = {}
        seq_of: dict[str, int] = {}
        ref_content: list[str] = []
        ref_kinds: list[str] = []
        seen: set[tuple[str, str, str]] = set()

        def write(
            e: Event, stream: str, origin: str | None, seq: int | None, delivery: str
        ) -> bool:
            assert e.event_id is not None
            key = (stream, e.event_id, e.digest)
            verdict = "duplicate" if key in seen else "accepted"
            seen.add(key)
            self.ev.receipt(
                sid,
                1,
                ts=e.ts,
                stream_id=stream,
                event_id=e.event_id,
                verdict=verdict,
                origin_stream_id=origin,
                seq=seq,
                kind=e.kind,
                delivery=delivery,
                message_digest=e.digest,
                jsonrpc_id=e.answers,
            )
            return verdict == "accepted"

        for e in ref.events if ref else []:
            ref_seq = 0 if e.kind == "priming" else len(ref_content) + 1
            if e.kind != "priming":
                ref_content.append(e.content)
                ref_kinds.append(e.kind)
            if e.event_id:
                first_stream.setdefault(e.event_id, ref_rid)
                seq_of.setdefault(e.event_id, ref_seq)
                write(e, ref_rid, ref_rid, ref_seq, "live")
        used: set[int] = set()
        got: set[int] = set()
        foreign = unaligned = replayed = 0
        for delivery, events in [("live", cut.events)] + [("replay", g.events) for g in gets]:
            for e in events:
                if not e.event_id:
                    continue
                if delivery == "replay" and e.kind != "priming":
                    replayed += 1
                origin = first_stream.get(e.event_id)
                if origin is None:
                    named = e.answers or e.progress_token
                    origin = named if named in (ref_rid, cut_rid) else cut_rid
                    first_stream[e.event_id] = origin
                seq: int | None
                if origin != cut_rid:
                    seq = seq_of.get(e.event_id)
                elif e.kind == "priming":
                    seq = 0
                else:
                    seq = next(
                        (
                            i + 1
                            for i, c in enumerate(ref_content)
                            if c == e.content and i + 1 not in used
                        ),
                        None,
                    )
                    if seq is not None:
                        used.add(seq)
                accepted = write(e, cut_rid, origin, seq, delivery)
                if accepted and origin != cut_rid:
                    foreign += 1
                elif accepted and seq is None and ref_content:
                    unaligned += 1
                elif accepted and seq:
                    got.add(seq)
        missing = [(i, ref_kinds[i - 1]) for i in range(1, len(ref_content) + 1) if i not in got]
        return {
            "reference_events": len(ref_content),
            "replayed": replayed,
            "foreign": foreign,
            "unaligned": unaligned,
            "missing": missing if ref_content and not unaligned else [],
        }

    def _some_events(self, w: Wire) -> tuple[str | None, list[Event], str]:
        """One uncut call of the probe's tool, for a cursor of a real stream."""
        tool, args, why = self.pick_tool()
        if tool is None:
            return None, [], why
        rid = w.next_id()
        ans = w.call(tool, args, rid)
        if not ok(ans):
            return None, [], f"tools/call answered {_status(ans)}"
        events = [e for e in ans.events if e.event_id]
        if not events and not _answered(ans, rid):
            # No cursor, and no sign either way of whether the endpoint offers one.
            return None, [], f"the call's stream ended before its answer ({_broken(ans)})"
        return rid, events, ""

    def _cursor_source(self, w: Wire, scenario: str) -> tuple[str, list[Event]] | Verdict:
        """A session opened on `w` and one call's stream with its events (their ids the
        cursors to present), or the verdict that the scenario cannot tell."""
        if not ok(self.open(w)) or not w.session:
            return Verdict(scenario, "cannot_tell", "could not open a session")
        stream, events, why = self._some_events(w)
        if stream is None:
            return Verdict(scenario, "cannot_tell", why)
        if not events:
            return Verdict(
                scenario,
                "cannot_tell",
                "the stream carried no event ids: the endpoint offers no resumption",
            )
        return stream, events

    def _replayed(
        self,
        w: Wire,
        cursor: str,
        stream_of: Callable[[], str],
        known: dict[str | None, tuple[str, int]],
    ) -> tuple[Answer, list[Event]]:
        """Resume `cursor` on `w`; every data event replayed is a receipt accepted on the
        stream `stream_of()` names, with the stream and place it was first sent at
        (`known`): another call's events replayed here are a cross-stream replay."""
        g = w.resume(cursor, read_for=min(2.0, self.s.timeout))
        data = [e for e in g.events if e.event_id and e.data.strip()]
        stream_id = stream_of()
        assert w.session is not None
        for e in data:
            assert e.event_id is not None
            origin, seq = known.get(e.event_id, (None, None))
            self.ev.receipt(
                w.session,
                1,
                ts=e.ts,
                stream_id=stream_id,
                event_id=e.event_id,
                verdict="accepted",
                origin_stream_id=origin,
                seq=seq,
                kind=e.kind,
                delivery="replay",
                message_digest=e.digest,
                jsonrpc_id=e.answers,
            )
        return g, data

    def scenario_cursors(self) -> Verdict:
        a, b = self.wire(), self.wire()
        try:
            source = self._cursor_source(a, "cursors")
            if isinstance(source, Verdict):
                return source
            stream, events = source
            if not ok(self.open(b)) or not b.session:
                return Verdict("cursors", "cannot_tell", "could not open a second session")
            known = {e.event_id: (stream, i) for i, e in enumerate(events)}
            results: dict[str, dict[str, Any]] = {}
            for label, cursor in (
                ("foreign", events[-1].event_id or ""),
                ("stale", _stale(events[-1].event_id or "")),
            ):
                g, data = self._replayed(b, cursor, lambda: f"get-{b.next_id()}", known)
                results[label] = {"status": g.status, "error": g.error, "replayed": len(data)}
            detail = {"cursors": results}
            bad = [k for k, r in results.items() if r["replayed"]]
            if bad:
                what = " and ".join(
                    f"{results[k]['replayed']} events for a {k} cursor" for k in bad
                )
                return Verdict("cursors", "fail", f"replayed {what} (expected a rejection)", detail)
            errors = [k for k, r in results.items() if r["error"] or r["status"] >= 500]
            if errors:
                return Verdict(
                    "cursors",
                    "cannot_tell",
                    "no answer for the " + ", ".join(errors) + " cursor",
                    detail,
                )
            how = "; ".join(
                f"{k}: "
                + ("refused" if r["status"] >= 400 else "nothing replayed")
                + f" (HTTP {r['status']})"
                for k, r in results.items()
            )
            return Verdict("cursors", "pass", how, detail)
        finally:
            self.close(a)
            self.close(b)

    def scenario_evicted(self) -> Verdict:
        """The first cursor of a call, presented after `evict_calls` further calls of the
        tool in the same session: a bounded store has evicted it by then. Nothing may be
        replayed for it (a 4xx, or a stream that delivers nothing): a store that replays
        from wherever it still can hands the client a stream with a silent hole."""
        tool, args, why = self.pick_tool()
        if tool is None:
            return Verdict("evicted", "cannot_tell", why)
        w = self.wire()
        try:
            source = self._cursor_source(w, "evicted")
            if isinstance(source, Verdict):
                return source
            stream, events = source
            cursor = events[0].event_id or ""
            # Where each event id came from (its call and place there): an event replayed
            # for the cursor is then an event of its own call, or of another one.
            known = {e.event_id: (stream, i) for i, e in enumerate(events)}
            produced = len(events)
            for _ in range(self.s.evict_calls):
                later, more, why = self._some_events(w)
                if later is None:
                    return Verdict("evicted", "cannot_tell", why, {"events": produced})
                known.update({e.event_id: (later, i) for i, e in enumerate(more)})
                produced += len(more)
            # Received on the cursor's stream.
            g, data = self._replayed(w, cursor, lambda: stream, known)
            detail = {"events": produced, "status": g.status, "replayed": len(data)}
            if g.error or g.status >= 500:
                return Verdict(
                    "evicted", "cannot_tell", f"no answer for the cursor ({_status(g)})", detail
                )
            own = [e for e in data if stream in (e.answers, e.progress_token)]
            if own:
                return Verdict(
                    "evicted",
                    "cannot_tell",
                    f"the cursor was still held after {produced} events (its call was "
                    "replayed): the store keeps more; raise --evict-calls",
                    detail,
                )
            if data:
                return Verdict(
                    "evicted",
                    "fail",
                    f"replayed {len(data)} events for a cursor evicted {produced} events ago "
                    "(expected a rejection): what came after it is lost without a word",
                    detail,
                )
            how = "refused" if refused(g) else "nothing replayed"
            return Verdict(
                "evicted",
                "pass",
                f"a cursor {produced} events old: {how} (HTTP {g.status})",
                detail,
            )
        finally:
            self.close(w)

    def scenario_dead_session(self) -> Verdict:
        w = self.wire()
        new: Wire | None = None
        try:
            if not ok(self.open(w)) or not w.session:
                return Verdict("dead_session", "cannot_tell", "could not open a session")
            raw = w.session
            self.ev.session(raw, 1, "DELETE_REQUESTED", version=self.s.version)
            d = w.delete()
            detail: dict[str, Any] = {"delete": d.status}
            if d.status == 405:
                return Verdict(
                    "dead_session",
                    "cannot_tell",
                    "the endpoint does not allow DELETE (405): no dead session to reuse",
                    detail,
                )
            if not ok(d):
                return Verdict("dead_session", "fail", f"DELETE answered {_status(d)}", detail)
            self.ev.session(raw, 1, "TERMINATED", version=self.s.version)
            rid = w.next_id()
            # Its dead answer is asked for: the scenario re-initializes itself, below.
            reuse = w.exchange(
                "POST",
                {"jsonrpc": "2.0", "id": rid, "method": "tools/list"},
                until_answer=rid,
                dead_expected=True,
            )
            detail["reuse"] = reuse.status
            w.session = None
            if reuse.status in self.s.dead_statuses:
                self.ev.session(raw, 1, "REINITIALIZE_REQUIRED", version=self.s.version)
            new = self.wire()
            again = self.open(new, generation=2, prev=raw)
            detail["reinitialize"] = again.status
            if ok(reuse):
                return Verdict(
                    "dead_session",
                    "fail",
                    f"a deleted session was served again (HTTP {reuse.status})",
                    detail,
                )
            if reuse.status not in self.s.dead_statuses:
                expected = "/".join(map(str, self.s.dead_statuses))
                return Verdict(
                    "dead_session",
                    "fail",
                    f"reuse of a deleted session answered {_status(reuse)}, not {expected}",
                    detail,
                )
            if not ok(again) or not new.session:
                return Verdict(
                    "dead_session", "fail", f"re-initialize answered {_status(again)}", detail
                )
            return Verdict(
                "dead_session",
                "pass",
                f"DELETE {d.status}, reuse {reuse.status}, re-initialized ({again.status})",
                detail,
            )
        finally:
            w.close()
            if new is not None:
                self.close(new)

    def scenario_origin(self) -> Verdict:
        checks = (
            ("foreign_origin", FOREIGN_ORIGIN, None, False),
            ("foreign_host", None, FOREIGN_HOST, False),
            ("allowed_origin", self.s.allowed_origin(), None, True),
        )
        detail: dict[str, Any] = {}
        problems, unknown = [], []
        for label, origin, host, expect_served in checks:
            w = self.wire(origin=origin)
            extra = {"Host": host} if host else None
            ans = self.open(w, extra=extra)
            # Served means the MCP server answered the initialize or issued a session for it
            # (its answer may be lost on the way while the session id in its headers is
            # not); a 2xx with neither came from something else (Caddy answers a Host it
            # has no site for with an empty 200): the request never reached the server.
            served = ok(ans) and w.initialized
            detail[label] = ans.status
            if ans.error or ans.status >= 500:
                unknown.append(f"{label.replace('_', ' ')}: {_status(ans)}")
            elif expect_served and not served:
                problems.append(f"allowed Origin not served ({ans.status})")
            elif not expect_served and served:
                problems.append(f"{label.replace('_', ' ')} served ({ans.status})")
            elif not expect_served and not refused(ans):
                detail[label + "_not_mcp"] = True
            self.close(w)
        if problems:
            return Verdict("origin", "fail", "; ".join(problems), detail)
        if unknown:
            return Verdict("origin", "cannot_tell", "; ".join(unknown), detail)
        return Verdict(
            "origin",
            "pass",
            f"foreign Origin refused ({detail['foreign_origin']}), "
            f"foreign Host refused ({detail['foreign_host']}), allowed Origin "
            f"served ({detail['allowed_origin']})",
            detail,
        )

    def scenario_resend(self) -> Verdict:
        if not self.s.write_tool:
            return Verdict(
                "resend",
                "skipped",
                "no --write-tool named: the probe calls no tool with side effects",
            )
        if not self.s.key_arg:
            return Verdict(
                "resend",
                "cannot_tell",
                "--idempotency-key-arg names the argument that carries the key",
            )
        if self.discovery.error:
            # Not "does not speak 2026-07-28": nothing was negotiated.
            return Verdict("resend", "cannot_tell", f"discovery failed ({self.discovery.error})")
        if not self.discovery.modern:
            return Verdict(
                "resend",
                "skipped",
                "the endpoint does not speak 2026-07-28 "
                f"(negotiated {self.discovery.protocol_version})",
            )
        from .discover import resend

        # Each request of the re-send counts against the run's budget too.
        for _ in range(4):
            self.pacer.take()
        left = self.pacer.left()
        try:
            res = resend(
                self.s.url,
                run_id=self.s.run_id,
                agent=self.s.agent,
                origin=self.s.allowed_origin(),
                timeout=self.s.timeout,
                tool=self.s.write_tool,
                arguments=self.s.write_arguments,
                key_arg=self.s.key_arg,
                key=f"replaygate-probe-{self.s.run_id}-{uuid.uuid4().hex[:8]}",
                limit=left,
            )
        except TimeoutError as exc:
            return Verdict("resend", "cannot_tell", f"stopped at the probe's deadline: {exc}")
        if "skipped" in res:
            return Verdict("resend", "skipped", res["skipped"], res)
        if res.get("errors"):
            return Verdict(
                "resend",
                "cannot_tell",
                f"{res['errors']} of the re-sends answered an error: no receipt to compare "
                "(check --write-arguments and --idempotency-key-arg)",
                res,
            )
        if res["same_receipt"]:
            return Verdict(
                "resend",
                "pass",
                "re-sent twice with the same key: the same receipt both times (one execution)",
                res,
            )
        return Verdict(
            "resend",
            "fail",
            "re-sent with the same key: different answers (each re-send executed)",
            res,
        )


def _last_id(events: list[Event]) -> str | None:
    ids = [e.event_id for e in events if e.event_id]
    return ids[-1] if ids else None


def _stale(event_id: str) -> str:
    """A cursor of the same shape as a real one that the server does not hold: hex digits
    replaced by others, or a trailing number far past anything produced."""
    if re.fullmatch(r"[0-9a-fA-F-]{16,}", event_id):
        fresh = uuid.uuid4().hex * 2
        it = iter(fresh)
        return "".join(next(it) if c != "-" else "-" for c in event_id)
    m = re.search(r"(\d+)$", event_id)
    if m:
        return event_id[: m.start()] + str(int(m.group(1)) + 10**9)
    return event_id + "-" + uuid.uuid4().hex[:12]


def summary_line(v: Verdict) -> str:
    return f"{v.scenario:<13} {v.status.upper():<11} {v.line}"


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=False, default=str)
