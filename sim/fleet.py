"""The simulated fleet: record emitters, session and stream life, stage bookkeeping.

Everything is driven by one seeded random.Random, so a seed gives the same
files byte for byte. Emitters also keep the per-stage counters the truth needs
to state the expected gate decisions (see truth.py).
"""

from __future__ import annotations

import hashlib
import random
import re
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from replaygate.ingest.redact import hmac_hex

from .writers import LAYOUTS, NativeLog, _Base, make_writer

T0 = 1_795_824_000_000  # 2026-11-28T00:00:00Z in epoch ms
SEC = 1000
ALLOWED_ORIGINS = ("https://app.example.com", "http://localhost:6274")
ALLOWLIST = ("https://app.example.com", "http://localhost:*")
TOOLS = {
    "read": ("search_docs", "jobs_wait", "get_status"),
    "write": ("create_ticket", "update_record"),
    "paid": ("render_video", "script_run"),
}
CLIENTS = (
    ("claude-desktop", "1.4.2"),
    ("cursor", "0.51.0"),
    ("acme-agent", "2.0.1"),
    ("mcp-inspector", "0.17.0"),
)
SERVERS = ("mcp-a-0", "mcp-a-1", "mcp-b-0", "mcp-b-1")
# What a session ledger of a server that records less leaves out (Sess.ledger_file).
LEDGER_BLIND = ("resumable", "protocol_version", "auth_subject")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# With no allow-list configured, only loopback origins are allowed (any port, either scheme).
LOOPBACK = re.compile(r"https?://(localhost|127\.0\.0\.1|\[::1\])(:[0-9]+)?")


def origin_allowed(origin: str | None, allowlist: tuple[str, ...] | None = ALLOWLIST) -> bool:
    """Is an Origin allowed (or absent)? `allowlist` None: none configured, loopback only."""
    if origin is None:
        return True
    if allowlist is None:
        return LOOPBACK.fullmatch(origin) is not None
    return any(fnmatchcase(origin, p) for p in allowlist)


def origin_class(origin: str | None, method: str, allowlist: tuple[str, ...] | None) -> str:
    """How the Origin gates read a request: `none` (no Origin, or a CORS preflight: not an
    MCP request), `ok` (allowed), `invalid` (outside a configured allow-list) or `unjudged`
    (foreign, and no allow-list configured)."""
    if method == "OPTIONS" or origin is None:
        return "none"
    if origin_allowed(origin, allowlist):
        return "ok"
    return "invalid" if allowlist is not None else "unjudged"


@dataclass
class Sess:
    raw: str
    hmac: str
    gen: int
    principal: str
    subject: str
    protocol: str
    resumable: bool
    resumable_field: bool | None
    cohort: str | None
    server: str
    client: tuple[str, str]
    addr: str
    ua: str
    eid_style: str  # colon | ts | uuid
    inbox_full: bool  # the client records seq and origin_stream_id
    origin: str
    t: int
    next_req: int = 1
    missing_version: bool = False
    raw_logged: bool = False
    # The proxy logs no principal for it (a client known only by address and User-Agent).
    anonymous: bool = False
    # Its ledger rows go to this sessions file, whose server records neither resumable,
    # the revision nor the token subject (None: the fleet's one session ledger).
    ledger_file: str | None = None


@dataclass
class Stage:
    name: str
    scope: str
    percent: float
    start: int
    end: int | None = None


@dataclass
class StageStats:
    accepted: int = 0  # accepted receipts (sessions with an inbox)
    completed: int = 0
    recoveries: list = field(default_factory=list)
    n404: int = 0
    # 404s reinit_missing cannot judge: on a session whose client cannot be told apart (no
    # principal, and another session of its address and User-Agent live), and 404s whose
    # session a redacting proxy log hid (not in n404).
    undecided_404: int = 0
    hidden_404: int = 0
    invalid_origin: int = 0
    unjudged_origin: int = 0  # foreign Origins seen with no allow-list configured
    write_dispatches: int = 0
    raw_ids: int = 0
    reconnect_ts: list = field(default_factory=list)
    # POSTs answered with an event stream whose body size the proxy logged, not empty (the
    # proxy basis of undelivered_result judges them by their row alone)
    sized_answers: int = 0


class Fleet:
    def __init__(
        self,
        out,
        rng: random.Random,
        key: bytes,
        fmt: str,
        server_only: bool = False,
        gz_level: int = 9,
        allowlist: tuple[str, ...] | None = ALLOWLIST,
    ):
        self.out = out
        # The Origin allow-list the fleet is judged by (None: not configured).
        self.allowlist = allowlist
        self.gz_level = gz_level
        # What an operator who controls only servers and proxies has: the recorder's
        # ledgers, event log and dispatch records, and proxy logs; no client inbox, and
        # dispatch records know only what the server saw (a client's abort is not there).
        self.server_only = server_only
        self.with_receipts: set[tuple[str, int]] = set()
        self.server_delivered: dict[tuple[str, int], list] = defaultdict(list)
        self.rng = rng
        self.key = key
        self.fmt = fmt
        self.writers: dict[str, _Base] = {}
        self.natives: dict[str, NativeLog] = {}  # proxies' own logs, by file name
        self.stages: list[Stage] = []
        self.rollback_at: int | None = None
        self.cohort: dict[str, str | None] = {}
        self.stats: dict[str | None, StageStats] = defaultdict(StageStats)
        self.open_disconnects: dict[tuple, int] = {}
        self.events_written = 0
        # Events of the vector engine's bulk the gates count as delivered (by stage):
        # what its sessions' server logs show sent, where no client receipts exist.
        self.bulk_delivered: dict[str | None, int] = defaultdict(int)
        self.counter = 0
        self.capture: list | None = None  # proxy rows seen while a fault is traced
        self.gets: dict[str, int] = defaultdict(int)  # GETs seen per session
        # Per proxy file written: [first time, last time, whether a row names a session,
        # whether it shows an initialize] (truth.py: a log that names no session cannot
        # show where a session's DELETE went, one that shows no initialize a re-init).
        self.proxy_files: dict[str, list] = {}
        # Each session's first ledger row and its TERMINATED row (ms).
        self.ledger_first: dict[str, int] = {}
        self.terminated_at: dict[str, int] = {}

    # -- ids and time ---------------------------------------------------------------------
    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def seq_no(self) -> int:
        self.counter += 1
        return self.counter

    def jitter(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    # -- stages ---------------------------------------------------------------------------
    def stage_named(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def window_stage(self, ts: int) -> str | None:
        for stage in self.stages:
            if stage.start <= ts and (stage.end is None or ts < stage.end):
                return stage.name
        return None

    def stage_of(self, session_hmac: str | None, ts: int) -> str | None:
        """The rule of the gates: a cohort session's record counts for its stage
        inside that stage's window; baseline sessions never; no session: by window."""
        if session_hmac is None or session_hmac not in self.cohort:
            return self.window_stage(ts)
        name = self.cohort[session_hmac]
        if name is None:
            return None
        stage = self.stage_named(name)
        return name if stage.start <= ts and (stage.end is None or ts < stage.end) else None

    # -- writing --------------------------------------------------------------------------
    def writer(self, table: str, file_name: str | None = None) -> _Base:
        key = file_name or table
        wr = self.writers.get(key)
        if wr is None:
            wr = self.writers[key] = make_writer(
                self.out, table, self.fmt, file_name, gz_level=self.gz_level
            )
        return wr

    def w(self, table: str, row: dict, file_name: str | None = None) -> None:
        self.writer(table, file_name).add(row)

    def close(self) -> None:
        for wr in self.writers.values():
            wr.close()
        for log in self.natives.values():
            log.close()

    def native(
        self, file_name: str, line: dict, t: int, *, judged: bool, names_session: bool
    ) -> None:
        """One line of a proxy's own access log, as that proxy prints it (the faults that
        write them cite where each shape comes from). `judged`: a POST answered with an
        event stream that the row alone judges (bytes sent, or none and the client did not
        end the request), a sample of `lost_responses` in the stage whose window holds t
        (the line's session has no ledger: it is staged by window). `names_session`: the
        log shows session ids (a Caddy log that redacts them does not)."""
        log = self.natives.get(file_name)
        if log is None:
            log = self.natives[file_name] = NativeLog(self.out / file_name)
        log.add(line)
        if judged:
            self.stats[self.window_stage(t)].sized_answers += 1
        # (nginx's and Envoy's documented formats show an initialize by their keys)
        self._proxy_file(file_name, t, names_session, names_session)

    def _proxy_file(self, name: str, t: int, names_session: bool, shows_init: bool) -> None:
        span = self.proxy_files.get(name)
        if span is None:
            self.proxy_files[name] = [t, t, names_session, shows_init]
        else:
            span[0], span[1] = min(span[0], t), max(span[1], t)
            span[2], span[3] = span[2] or names_session, span[3] or shows_init

    # -- record emitters ------------------------------------------------------------------
    def led_session(self, s: Sess, t: int, state: str, **extra) -> None:
        row = {"ts": t, "session_hmac": s.hmac, "generation": s.gen, "state": state}
        if state == "SESSION_ACTIVE":
            row.update(
                principal=s.principal,
                auth_subject=s.subject,
                handshake_receipt=sha(f"init-{s.raw}"),
                protocol_version=s.protocol,
                origin_policy="strict-allowlist",
                created_at=t,
                expires_at=t + 3_600_000,
                server_instance=s.server,
                client_name=s.client[0],
                client_version=s.client[1],
                rollout_stage=s.cohort,
                resumable=s.resumable_field,
            )
        row.update(extra)
        if s.ledger_file:
            for name in LEDGER_BLIND:
                row.pop(name, None)
        self.w("sessions", row, s.ledger_file)
        self.ledger_first.setdefault(s.hmac, t)
        if state == "TERMINATED":
            self.terminated_at.setdefault(s.hmac, t)

    def led_stream(self, s: Sess, t: int, stream_id: str, state: str, **extra) -> None:
        row = {
            "ts": t,
            "session_hmac": s.hmac,
            "generation": s.gen,
            "stream_id": stream_id,
            "state": state,
        }
        row.update(extra)
        self.w("streams", row)
        key = (s.hmac, s.gen, stream_id)
        if state == "DISCONNECTED":
            self.open_disconnects[key] = t
        elif state == "STREAM_OPEN" and key in self.open_disconnects:
            t_disc = self.open_disconnects.pop(key)
            stage = self.stage_of(s.hmac, t_disc)
            self.stats[stage].recoveries.append((t - t_disc) / 1000)
        elif state == "CLOSED":
            self.open_disconnects.pop(key, None)
            if extra.get("close_reason") == "completed":
                self.stats[self.stage_of(s.hmac, t)].completed += 1

    def event(
        self,
        s,
        t,
        stream_id,
        eid,
        seq,
        kind,
        disp,
        cumulative=None,
        digest=None,
        jsonrpc_id=None,
        depth=None,
    ) -> None:
        self.events_written += 1
        if kind != "priming" and disp in ("sent", "replayed"):
            self.server_delivered[(s.hmac, s.gen)].append(self.stage_of(s.hmac, t))
        self.w(
            "events",
            {
                "ts": t,
                "session_hmac": s.hmac,
                "generation": s.gen,
                "stream_id": stream_id,
                "event_id": eid,
                "seq": seq,
                "kind": kind,
                "disposition": disp,
                "cumulative": cumulative,
                "message_digest": digest,
                "jsonrpc_id": jsonrpc_id,
                "buffer_depth": depth,
            },
        )

    def receipt(
        self,
        s,
        t,
        stream_id,
        eid,
        verdict,
        *,
        seq=None,
        origin=None,
        kind=None,
        delivery="live",
        digest=None,
        jsonrpc_id=None,
        dispatch_id=None,
        reject_reason=None,
    ) -> None:
        if self.server_only:
            return
        self.with_receipts.add((s.hmac, s.gen))
        full = s.inbox_full
        self.w(
            "inbox",
            {
                "ts": t,
                "session_hmac": s.hmac,
                "generation": s.gen,
                "stream_id": stream_id,
                "event_id": eid,
                "verdict": verdict,
                "reject_reason": reject_reason,
                "origin_stream_id": origin if full else None,
                "seq": seq if full else None,
                "kind": kind,
                "delivery": delivery,
                "message_digest": digest,
                "jsonrpc_id": jsonrpc_id,
                "dispatch_id": dispatch_id,
            },
        )
        if verdict == "accepted":
            self.stats[self.stage_of(s.hmac, t)].accepted += 1

    def proxy(
        self,
        t,
        method,
        status,
        s: Sess | None = None,
        *,
        session=True,
        origin="auto",
        jsonrpc_method=None,
        request_id=None,
        last_event_id=None,
        protocol="auto",
        duration=None,
        retry_after=None,
        subject=None,
        principal=None,
        file_name=None,
        addr=None,
        ua=None,
        body_bytes=None,
        content_type=None,
    ) -> None:
        # The session the request names, if it names one.
        named = s if s is not None and session else None
        has_session = named is not None
        if origin == "auto":
            origin = s.origin if s else ALLOWED_ORIGINS[0]
        if protocol == "auto":
            protocol = None if (s is None or not has_session or s.missing_version) else s.protocol
        raw = named is not None and named.raw_logged
        row = {
            "ts": t,
            "method": method,
            "status": status,
            "path": "/mcp",
            "duration_ms": float(duration if duration is not None else self.jitter(2, 40)),
            "session_hmac": named.hmac if named is not None and not raw else None,
            "session_id": named.raw if named is not None and raw else None,
            "origin": origin,
            "protocol_version": protocol,
            "last_event_id": last_event_id,
            "jsonrpc_method": jsonrpc_method,
            "request_id": request_id,
            "principal": principal or (s.principal if s and not s.anonymous else None),
            "auth_subject": subject or (s.subject if s else None),
            "client_addr": addr or (s.addr if s else None),
            "user_agent": ua or (s.ua if s else None),
            "upstream": s.server if s else "mcp-a-0",
            "retry_after_s": retry_after,
            "body_bytes_sent": body_bytes,
            "resp_content_type": content_type,
        }
        name = file_name if file_name else ("proxy-edge.jsonl" if raw else None)
        # through w(): the vector engine's capture keeps ordinary traffic in memory
        self.w("proxy", row, name)
        # (a contract log that names JSON-RPC methods shows an initialize)
        self._proxy_file(
            name or LAYOUTS[self.fmt]["proxy"][0], t, named is not None, jsonrpc_method is not None
        )
        hm = named.hmac if named is not None else None
        if self.capture is not None:
            self.capture.append(
                {
                    "t": t,
                    "session": hm,
                    "status": status,
                    "origin": origin,
                    "method": method,
                    "principal": row["principal"],
                }
            )
        stage = self.stage_of(hm, t)
        stats = self.stats[stage]
        if status == 404 and has_session and method != "DELETE":
            stats.n404 += 1
        seen = origin_class(origin, method, self.allowlist)
        if seen == "invalid":
            stats.invalid_origin += 1
        elif seen == "unjudged":
            stats.unjudged_origin += 1
        gets_before = self.gets.get(hm, 0) if hm is not None else 0
        if method == "GET" and hm is not None:
            self.gets[hm] = gets_before + 1
        # A resuming GET, a re-open of a session's stream without a cursor, 429 or 503.
        if (method == "GET" and (last_event_id or gets_before)) or status in (429, 503):
            stats.reconnect_ts.append(t)
        if raw:
            stats.raw_ids += 1
        # (these contract rows do not say who ended a request, so an empty event stream is
        # not judged by its row alone; the proxies' own logs of `native` do)
        if (
            method == "POST"
            and 200 <= status < 300
            and body_bytes
            and (content_type or "").startswith("text/event-stream")
        ):
            stats.sized_answers += 1

    def dispatch(
        self,
        t,
        *,
        s: Sess | None,
        tool,
        tool_class,
        outcome,
        principal,
        request_id,
        key,
        payload,
        receipt=None,
        status=200,
        server_status=None,
    ) -> str:
        """One dispatch record. `server_status` is what the server itself saw when it
        differs from the business record's status (a client abort the server never
        noticed); a server-only fleet writes that one."""
        did = f"d-{self.seq_no():08d}"
        if self.server_only:
            status = server_status if server_status is not None else status
            receipt = None
        self.w(
            "dispatches",
            {
                "ts": t,
                "dispatch_id": did,
                "outcome": outcome,
                "tool_name": tool,
                "tool_class": tool_class,
                "session_hmac": s.hmac if s else None,
                "generation": s.gen if s else None,
                "principal": principal,
                "request_id": request_id,
                "idempotency_key": key,
                "payload_digest": payload,
                "receipt_id": None if self.server_only else (receipt or f"rcpt-{did}"),
                "job_id": None,
                "http_status": status,
            },
        )
        if tool_class in ("write", "paid"):
            self.stats[self.stage_of(s.hmac if s else None, t)].write_dispatches += 1
        return did

    def rollout(self, t, stage, action, scope=None, percent=None, note=None) -> None:
        self.w(
            "rollout",
            {
                "ts": t,
                "stage": stage,
                "action": action,
                "percent": percent,
                "scope": scope,
                "actor": "deploy-bot",
                "note": note,
            },
        )

    # -- sessions -------------------------------------------------------------------------
    def new_session(
        self,
        t,
        cohort,
        *,
        resumable,
        principal=None,
        gen=1,
        prev=None,
        protocol=None,
        origin=None,
        client_at=None,
        init_log=None,
        ledger_file=None,
    ) -> Sess:
        """`client_at`: (address, User-Agent) of a client the proxy logs without a principal.
        `init_log`: the initialize went through a second proxy whose log (this file) names
        no JSON-RPC method, so it cannot show an initialize. `ledger_file`: see Sess."""
        rng = self.rng
        raw = self.uid()
        principal = principal or f"user-{rng.randint(1, 400):04d}"
        protocol = protocol or rng.choice(("2025-06-18", "2025-11-25"))
        # `resumable` absent + an older revision means resumable (detectors.md).
        field_value = resumable if (not resumable or rng.random() < 0.5) else None
        client = rng.choice(CLIENTS)
        s = Sess(
            raw=raw,
            hmac=hmac_hex(self.key, raw),
            gen=gen,
            principal=principal,
            subject=f"sub-{principal}-{self.seq_no()}",
            protocol=protocol,
            resumable=resumable,
            resumable_field=field_value,
            cohort=cohort,
            server=rng.choice(SERVERS),
            client=client,
            addr=f"10.{rng.randint(0, 9)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
            ua=f"{client[0]}/{client[1]}",
            eid_style=rng.choice(("colon", "ts", "uuid")),
            inbox_full=rng.random() < 0.5,
            origin=origin or rng.choice(ALLOWED_ORIGINS),
            t=t,
        )
        if client_at is not None:
            s.addr, s.ua = client_at
            s.anonymous = True
        s.ledger_file = ledger_file
        self.cohort[s.hmac] = cohort
        self.proxy(
            t,
            "POST",
            200,
            s,
            session=False,
            jsonrpc_method=None if init_log else "initialize",
            request_id="0",
            protocol=None,
            file_name=init_log,
            body_bytes=rng.randint(300, 900) if init_log else None,
            content_type="application/json" if init_log else None,
        )
        s.t = t + self.jitter(20, 80)
        self.led_session(s, s.t, "SESSION_ACTIVE", prev_session_hmac=prev)
        s.t += self.jitter(5, 30)
        self.proxy(s.t, "POST", 202, s, jsonrpc_method="notifications/initialized")
        s.t += self.jitter(50, 400)
        return s

    def reinit(self, old: Sess, t: int, *, new_token=True, init_log=None) -> Sess:
        """A new session of the next generation for the same client."""
        s = self.new_session(
            t,
            old.cohort,
            resumable=old.resumable,
            principal=old.principal,
            gen=old.gen + 1,
            prev=old.hmac,
            protocol=old.protocol,
            origin=old.origin,
            client_at=(old.addr, old.ua) if old.anonymous else None,
            init_log=init_log,
        )
        s.addr, s.ua, s.client = old.addr, old.ua, old.client
        if not new_token:
            s.subject = old.subject
        return s

    def delete(self, s: Sess, status=200, ledger=True) -> None:
        s.t += self.jitter(100, 2000)
        self.proxy(s.t, "DELETE", status, s)
        if ledger:
            self.led_session(s, s.t + 2, "DELETE_REQUESTED")
            self.led_session(s, s.t + 4, "TERMINATED")
        s.t += 10

    def expire(self, s: Sess, idle_ms=60_000) -> int:
        t = s.t + idle_ms
        self.led_session(s, t, "SESSION_EXPIRED")
        s.t = t
        return t

    def eid(self, s: Sess, stream_id: str, seq: int, t: int) -> str:
        if s.eid_style == "colon":
            return f"{stream_id}:{seq}"
        if s.eid_style == "ts":
            return f"{stream_id}_{t}_{self.rng.getrandbits(16):04x}"
        return self.uid()

    def delivered_by_stage(self) -> dict:
        """Events delivered per stage as the gates count them: accepted receipts where the
        client keeps an inbox, else the events the server's log shows it sent or replayed."""
        out: dict = defaultdict(int)
        for stage, stats in self.stats.items():
            out[stage] += stats.accepted
        for stage, n in self.bulk_delivered.items():
            out[stage] += n
        for key, stages in self.server_delivered.items():
            if key not in self.with_receipts:
                for stage in stages:
                    out[stage] += 1
        return out
