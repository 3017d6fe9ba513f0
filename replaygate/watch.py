"""`replaygate watch`: ingest -> analysis -> gates in a loop, one line per cycle.

Storage: watch works on a private copy of the database (`.NAME.watch` next to it) and,
after each cycle that changed something, publishes it: the copy is checkpointed and
copied to a temporary file that replaces the database in one rename. Readers (the
dashboard, `gates`, `findings`) open the published file read-only and never meet
watch's write lock; one that has the previous version open keeps reading it (a rename
does not touch an open file). While watch runs it is the database's only writer.

A failed cycle (a file that cannot be read, a database error) is reported and tried
again at the next tick; a cycle that runs past the next tick skips the ticks it missed
and says so, so work never queues up behind itself. Notifications still queued at a
stop are delivered within a grace period, or logged (replaygate/notify.py).

Stopping: SIGINT and SIGTERM end watch promptly, whatever its cycle is doing (a cycle
over 100,000 stages runs for minutes). A cycle runs in a thread of its own while the
main thread, which receives signals, waits for it: a DuckDB operator can run for a minute
without returning to Python, so a handler on the cycle's own thread would wait that long.
The handler interrupts the connection's query (`interrupt()`, which DuckDB's operators
heed); a cycle still running half a second later (in Python code, or going on after an
error it caught) gets `Interrupted` raised in its thread. The cycle is abandoned:
everything it wrote is in the working copy, which is discarded, so the published
database stays as it was. The rename that publishes runs shielded (`_shield`): a stop
before it publishes nothing; after it, the cycle is complete and ends normally, its
notifications sent. A decision history append is one write of whole lines, so an
abandoned cycle leaves rows it recorded whole (they are true: watch evaluated that),
never half a line. Copies are made in steps, so a large database's copy is no wait.

Probes: with `--probe URL`, watch also runs `replaygate probe` against the endpoint every
`--probe-every` (a process of its own, bounded by the probe's deadline, never more than
one at a time and never holding up a cycle), writes its evidence under `--probe-out` and
ingests it with the rest: a stage with probes running has client evidence each cycle.

Liveness: after every cycle watch writes `NAME.watch.json` beside the database, with
`stale_after`, the time by which the next one is due. A supervisor runs
`replaygate watch --check --db NAME`: watch is alive while it holds the database's
writer lock (which dies with it, `kill -9` included) and its heartbeat is not stale.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import duckdb

from replaygate.api import (
    RECORD_TYPES,
    Config,
    ReplaygateError,
    Status,
    ingest,
    outputs,
    staging,
    terminal,
)
from replaygate.api import db as dbm
from replaygate.api import lock as dblock

from . import duration
from .notify import Notifier, message

# How much a copy moves between two looks for a stop.
_COPY_STEP = 16 << 20
# How long a stopped cycle may take to end through its interrupted query before
# `Interrupted` is raised into it.
_GRACE = 0.5

# Finding identity across cycles (what "added" and "resolved" count).
_FINDING_KEY = (
    "hash(detector, ts, session_hmac, generation, stream_id, event_id, dispatch_id, "
    "idempotency_key)"
)


@dataclass
class ProbeSpec:
    """What `--probe` asks for: the endpoint, how often, where to, and the probe's other
    options as given (`--probe-args`)."""

    url: str
    out: Path
    every: float = 60.0
    args: list[str] = field(default_factory=list)
    config_path: str | None = None


class Prober:
    """Runs `replaygate probe` in a process of its own, one at a time: started at most
    every `spec.every`, never waited for by a cycle; a finished run is reported once."""

    def __init__(self, spec: ProbeSpec) -> None:
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self._started = -float("inf")
        self._out: tempfile.SpooledTemporaryFile[bytes] | None = None
        self._err: tempfile.SpooledTemporaryFile[bytes] | None = None

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "replaygate", "probe", self.spec.url]
        cmd += ["--out", str(self.spec.out), "--json", *self.spec.args]
        if self.spec.config_path:
            cmd += ["--config", self.spec.config_path]
        return cmd

    def poll(self, now: float | None = None) -> str | None:
        """Start a run when one is due; the line of a run that ended since, if any."""
        now = time.monotonic() if now is None else now
        line = None
        if self.proc is not None and self.proc.poll() is not None:
            line = self._finished()
        if self.proc is None and now - self._started >= self.spec.every:
            self.spec.out.mkdir(parents=True, exist_ok=True)
            self._out = tempfile.SpooledTemporaryFile(1 << 20)  # noqa: SIM115 - kept open
            self._err = tempfile.SpooledTemporaryFile(1 << 16)  # noqa: SIM115
            self.proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._err
            )
            self._started = now
            self.runs += 1
        return line

    def _finished(self) -> str:
        assert self.proc is not None and self._out is not None and self._err is not None
        code = self.proc.returncode
        self._out.seek(0)
        self._err.seek(0)
        out, err = self._out.read(), self._err.read()
        self._out.close()
        self._err.close()
        self.proc = None
        try:
            doc = json.loads(out)
        except ValueError:
            last = err.decode("utf-8", "replace").strip().splitlines()
            return f"probe #{self.runs} failed (exit {code}): {last[-1] if last else 'no output'}"
        scen = [x for r in doc.get("rounds", []) for x in r.get("scenarios", [])]
        parts = ", ".join(f"{x.get('scenario')} {str(x.get('status')).upper()}" for x in scen)
        return (
            f"probe #{self.runs} {str(doc.get('verdict')).upper()}: {parts} "
            f"({doc.get('requests')} requests, {duration.show(float(doc.get('seconds') or 0))})"
        )

    def stop(self) -> str | None:
        """End a run in progress (its evidence so far stays on disk)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self._finished()


class Interrupted(BaseException):  # noqa: N818 - not an error: a stop asked mid-cycle
    """A stop signal arrived during a cycle: the cycle is abandoned, nothing of it is
    published. A BaseException, so no handler of errors takes it for a failed step."""


def work_path(db: str) -> Path:
    p = Path(db)
    return p.with_name(f".{p.name}.watch")


def heartbeat_path(db: str) -> Path:
    p = Path(db)
    return p.with_name(f"{p.name}.watch.json")


@dataclass
class Cycle:
    n: int
    at: dt.datetime
    seconds: float = 0.0
    rows: dict[str, int] = field(default_factory=dict)
    quarantined: int = 0
    added: int = 0
    resolved: int = 0
    decisions: dict[str, str] = field(default_factory=dict)
    open_stages: list[str] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    lag: float | None = None
    stale: list[str] = field(default_factory=list)  # sources far behind the others
    published: bool = False
    error: str | None = None

    def line(self) -> str:
        head = f"{self.at:%H:%M:%S} #{self.n}"
        if self.error:
            return f"{head} failed: {self.error}; trying again next cycle"
        rows = " ".join(f"+{n} {t}" for t, n in sorted(self.rows.items()) if n)
        parts = [rows or "no new rows"]
        if self.quarantined:
            parts[0] += f" ({self.quarantined} quarantined)"
        parts.append(f"findings +{self.added} -{self.resolved}")
        shown = self.open_stages or list(self.decisions)[-1:]
        if shown:
            parts.append(", ".join(f"{s} {self.decisions[s]}" for s in shown))
        else:
            parts.append("no stages")
        parts.append("lag " + (duration.show(self.lag) if self.lag is not None else "-"))
        if self.stale:
            parts[-1] += " (stale: " + ", ".join(self.stale) + ")"
        parts.append(duration.show(self.seconds))
        return f"{head} " + " | ".join(parts)


class Watcher:
    def __init__(
        self,
        paths: list[str],
        db: str,
        config: Config,
        every: float = 15.0,
        notifier: Notifier | None = None,
        dashboard_url: str = "http://127.0.0.1:8501",
        source: str = "auto",
        say: Callable[[str], object] = print,
        probe: ProbeSpec | None = None,
    ) -> None:
        # The probe's folder is read with the rest, so its evidence is in the next cycle.
        if probe is not None and str(probe.out) not in paths:
            paths = [*paths, str(probe.out)]
            probe.out.mkdir(parents=True, exist_ok=True)
        self.prober = Prober(probe) if probe is not None else None
        self.paths = paths
        self.db = db
        self.config = config
        self.every = every
        self.notifier = notifier or Notifier([])
        self.dashboard_url = dashboard_url
        self.source = source
        self.say = say
        self.work = work_path(db)
        self.con: duckdb.DuckDBPyConnection | None = None
        self.started = False
        self.known: dict[str, dict[str, Any]] | None = None  # stage -> {decision, gates}
        # False until there is a state to compare with: without one (nothing analysed
        # when watch started), the first cycle's decisions are that state, not changes.
        self.baselined = False
        self._last_heartbeat: dict[str, Any] | None = None
        self.lock: dblock.Lock | None = None
        # Stopping (see the module's docstring): a stop was asked; a cycle is running and
        # may still be abandoned; how many shielded steps are under way.
        self.stop_asked = False
        self.abandoned: int | None = None
        # Guards the flags below between the cycle's thread and the handler; reentrant,
        # as the handler may run while the main thread holds it.
        self._state = threading.RLock()
        self._abandonable = False
        self._shielded = 0
        self._raised = False
        self._asked_at = 0.0
        self._worker: threading.Thread | None = None

    # -- stopping --------------------------------------------------------------------------
    def interrupt(self) -> None:
        """Ask watch to stop; called by the signal handler, on the main thread. A cycle
        that can still be abandoned is abandoned: its DuckDB query is interrupted now
        (the cycle ends through the error it raises); a cycle still running
        `_GRACE` later (in Python code, or going on after a caught error) gets
        `Interrupted` raised in its thread (`_abandon`)."""
        self.stop_asked = True
        self._asked_at = time.monotonic()
        with self._state:
            if self._abandonable and not self._shielded:
                self._interrupt_query()

    def _interrupt_query(self) -> None:
        if self.con is not None:
            with contextlib.suppress(duckdb.Error):  # closed meanwhile: nothing runs
                self.con.interrupt()

    def _abandon(self, worker: threading.Thread) -> None:
        with self._state:
            if not self._abandonable or self._shielded or self._raised:
                return
            self._raised = True
            self._interrupt_query()
            _raise_in(worker, Interrupted)

    def _check(self) -> None:
        """Abandon the cycle here if a stop was asked and it still may be."""
        if self.stop_asked and self._abandonable and not self._shielded:
            raise Interrupted

    @contextlib.contextmanager
    def _shield(self) -> Iterator[None]:
        """A step a stop must not cut in two: a stop asked before it abandons the cycle
        here (an `Interrupted` already on its way arrives before the step starts)."""
        with self._state:
            self._shielded += 1
        try:
            self._check_now()
            yield
        finally:
            with self._state:
                self._shielded -= 1

    def _copy(self, src: Path, dst: Path) -> None:
        """Copy a file in steps, looking for a stop between two."""
        with open(src, "rb") as i, open(dst, "wb") as o:
            size, done = os.fstat(i.fileno()).st_size, 0
            while done < size:
                self._check()
                n = os.sendfile(o.fileno(), i.fileno(), done, min(_COPY_STEP, size - done))
                if n == 0:
                    break
                done += n

    # -- storage ---------------------------------------------------------------------------
    def own(self) -> None:
        """Take the database's writer lock for as long as watch runs (core/lock.py): a
        write beside watch would be lost at its next publish, so others are refused."""
        if self.lock is None:
            self.lock = dblock.acquire(self.db, dblock.WATCH, wait=0)

    def _open(self) -> duckdb.DuckDBPyConnection:
        self.own()
        if self.con is None:
            if not self.started:
                # Start from what readers see (a copy left by a watch that was killed may
                # hold less, or more that was never published: the logs are read again).
                self._discard_work()
                if Path(self.db).exists():
                    self._copy(Path(self.db), self.work)
                self.started = True
            try:
                self.con = dbm.connect(str(self.work), role=dblock.WATCH)
            except ReplaygateError as exc:
                raise ReplaygateError(f"{exc} (is another watch running on {self.db}?)") from None
            from replaygate.api import decisionlog

            # The decision history belongs to the published database, not to this copy.
            decisionlog.bind(self.con, decisionlog.file_for_db(self.db))
        return self.con

    def _discard_work(self) -> None:
        for p in (self.work, _wal(self.work)):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    def publish(self) -> None:
        """Replace the database readers open with the working copy, in one rename. A stop
        before the rename publishes nothing; once it is renamed, the cycle is complete."""
        con = self._open()
        con.execute("CHECKPOINT")
        target = Path(self.db)
        target.parent.mkdir(parents=True, exist_ok=True)
        # A new file of its own (never one planted at a fixed name), held while it is
        # written; one a killed watch left is removed at the next publish.
        with staging.temp_file(target.parent, f".{target.name}.", ".publish") as tmp:
            self._copy(self.work, tmp)
            shutil.copymode(self.work, tmp)  # the new file's own mode is private
            with self._shield():
                # A write-ahead log left by another writer belongs to the file replaced.
                with contextlib.suppress(FileNotFoundError):
                    _wal(target).unlink()
                os.replace(tmp, target)
                with self._state:
                    self._abandonable = False  # published: the cycle is complete

    def _check_now(self) -> None:
        """Abandon the cycle if a stop was asked before it was published."""
        if self.stop_asked and self._abandonable:
            raise Interrupted

    def close(self) -> None:
        if self.con is not None:
            with contextlib.suppress(duckdb.Error):
                self.con.close()
            self.con = None
        # The working copy is closed and checkpointed; the next watch starts from the
        # published database.
        if self.lock is not None:
            self._discard_work()
            self.lock.release()
            self.lock = None

    # -- one cycle -------------------------------------------------------------------------
    def cycle(self, n: int) -> Cycle:
        """Run one cycle; `Interrupted` if a stop abandoned it (nothing of it published;
        the working copy, which may hold part of it, is to be discarded)."""
        try:
            with self._state:
                self._abandonable = True
            return self._cycle(n)
        except BaseException:
            # Whatever a stop made fail (an interrupted query raises DuckDB's own error),
            # the cycle was abandoned.
            if self.stop_asked and self._abandonable:
                raise Interrupted from None
            raise
        finally:
            with self._state:
                self._abandonable = False
                self._shielded = 0

    def _in_thread(self, n: int) -> Cycle:
        """`cycle(n)` in a thread of its own, waited for here (the main thread, which
        runs the signal handler meanwhile)."""
        out: list[Cycle] = []
        failed: list[BaseException] = []

        def work() -> None:
            try:
                out.append(self.cycle(n))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                failed.append(exc)

        worker = threading.Thread(target=work, name=f"watch-cycle-{n}", daemon=True)
        with self._state:
            self._worker = worker
            self._raised = False
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.1)
                if self.stop_asked and time.monotonic() - self._asked_at > _GRACE:
                    self._abandon(worker)
        finally:
            with self._state:
                self._worker = None
        if failed:
            raise failed[0]
        return out[0]

    def _cycle(self, n: int) -> Cycle:
        from replaygate import api

        c = Cycle(n, dt.datetime.now(dt.UTC))
        t0 = time.perf_counter()
        try:
            con = self._open()
            if not self.baselined:
                self.known = self._decisions(con, baseline=True)
                self.baselined = True
            version = dbm.get_meta(con, "data_version", "0")
            rep = ingest(con, list(self.paths), self.config, source=self.source)
            c.rows, c.quarantined = rep.rows_by_type(), rep.quarantined
            changed = dbm.get_meta(con, "data_version", "0") != version
            if changed or not api.is_current(con, self.config):
                before = self._finding_keys(con)
                api.analyse(con, self.config)
                after = self._finding_keys(con)
                c.added, c.resolved = len(after - before), len(before - after)
                changed = True
            # Unchanged data and configuration: the same decisions as last cycle.
            state = (self._decisions(con) if changed else self.known) or {}
            c.decisions = {s: v["decision"] for s, v in state.items()}
            c.open_stages = [s for s, v in state.items() if v["open"]]
            c.changes = self._changes(state, c.at) if self.known is not None else []
            self.known = state
            c.lag = _lag(con, c.at)
            c.stale = _stale(con)
            if changed or n == 1 or not Path(self.db).exists():
                self.publish()
                c.published = True
        except (ReplaygateError, duckdb.Error, OSError) as exc:
            self._check()
            c.error = _one_line(exc)
            if isinstance(exc, duckdb.Error) and self.con is not None:
                # Start the next cycle on a fresh connection.
                with contextlib.suppress(duckdb.Error):
                    self.con.close()
                self.con = None
        c.seconds = time.perf_counter() - t0
        return c

    def _finding_keys(self, con: duckdb.DuckDBPyConnection) -> set[int]:
        try:
            return {r[0] for r in con.execute(f"SELECT {_FINDING_KEY} FROM findings").fetchall()}
        except duckdb.CatalogException:
            return set()

    def _decisions(
        self, con: duckdb.DuckDBPyConnection, baseline: bool = False
    ) -> dict[str, dict[str, Any]] | None:
        """Every stage's decision now; for the baseline, None when nothing was analysed
        with this configuration yet (there is no earlier state to compare with)."""
        from replaygate import api

        try:
            if baseline and not api.is_current(con, self.config):
                return None
            doc = api.evaluate(con, self.config, all_stages=True)
        except duckdb.CatalogException:
            return None if baseline else {}  # nothing analysed yet
        # Each evaluation that differs from the last one recorded joins the history.
        api.record_decisions(con, doc, self.config, "watch", only_changes=True)
        return {
            s["stage"]: {
                "decision": s["decision"],
                "reasons": s["reasons"],
                "open": s["window"]["open"],
                "gates": {g["id"]: g["status"] for g in s["gates"]},
            }
            for s in doc.get("stages", [])
        }

    def _changes(self, state: dict[str, dict[str, Any]], at: dt.datetime) -> list[dict[str, Any]]:
        """Stages whose decision changed, or a gate that started or stopped failing, and
        stages that appeared since the last cycle (their first decision, whatever it is).
        Stages already known when watch started are not announced again."""
        out = []
        for stage, now in state.items():
            was = (self.known or {}).get(stage)
            if was is None:
                gate_changes = []
            else:
                gate_changes = [
                    {"id": g, "status": status, "previous": was["gates"].get(g)}
                    for g, status in now["gates"].items()
                    if status != was["gates"].get(g)
                    and Status.FAIL in (status, was["gates"].get(g))
                ]
                if now["decision"] == was["decision"] and not gate_changes:
                    continue
            out.append(
                {
                    "stage": stage,
                    "decision": now["decision"],
                    "previous": was["decision"] if was else None,
                    "reasons": now["reasons"],
                    "gates": gate_changes,
                    "at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
            )
        return out

    # -- the loop --------------------------------------------------------------------------
    def run(self, stop: threading.Event, cycles: int | None = None) -> int:
        """Run until `stop` is set or `interrupt()` is called (or `cycles` cycles ran); the
        number of cycles completed (`abandoned` names one a stop cut short)."""
        self.own()
        self.notifier.start()
        n = 0
        start = time.monotonic()
        tick = 0
        try:
            while not (stop.is_set() or self.stop_asked):
                n += 1
                if self.prober is not None:
                    self._probe_line(self.prober.poll())
                try:
                    c = self._in_thread(n)
                except Interrupted:
                    self.abandoned = n
                    n -= 1
                    break
                self.say(terminal(c.line()))
                for ch in c.changes:
                    self.say(_change_line(c, ch))
                    self.notifier.send(message(ch, self.dashboard_url))
                self._heartbeat(c)
                if cycles is not None and n >= cycles:
                    break
                elapsed = time.monotonic() - start
                due = int(elapsed // self.every) + 1  # the next tick still ahead
                skipped = due - tick - 1
                if skipped > 0:
                    self.say(
                        f"{dt.datetime.now(dt.UTC):%H:%M:%S} #{n} took "
                        f"{duration.show(c.seconds)}, longer than the "
                        f"{duration.show(self.every)} interval: skipped {skipped} "
                        f"cycle{'s' if skipped > 1 else ''}"
                    )
                tick = due
                stop.wait(max(0.0, start + due * self.every - time.monotonic()))
        finally:
            if self.prober is not None:
                self._probe_line(self.prober.stop())
            self.close()
            self.notifier.close()
            self._stopped()
        return n

    def _probe_line(self, line: str | None) -> None:
        if line:
            self.say(terminal(f"{dt.datetime.now(dt.UTC):%H:%M:%S} {line}"))

    def _heartbeat(self, c: Cycle) -> None:
        """A small JSON file next to the database: when watch last looked, and how it went
        (readers can tell "no new data" from "watch stopped")."""
        # The next heartbeat is due one interval plus one cycle later; twice that, and
        # at least 30 s more, before a reader may call this one stale.
        due = c.at + dt.timedelta(seconds=2 * (self.every + c.seconds) + 30)
        doc = {
            "state": "running",
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "cycle": c.n,
            "at": c.at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "stale_after": due.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "every_seconds": self.every,
            "seconds": round(c.seconds, 3),
            "ok": c.error is None,
            "error": c.error,
            "lag_seconds": None if c.lag is None else round(c.lag, 1),
            "stale_sources": c.stale,
            "rows": c.rows,
            "decisions": c.decisions,
        }
        self._last_heartbeat = doc
        _write_heartbeat(self.db, doc)

    def _stopped(self) -> None:
        """Say in the heartbeat that watch stopped on purpose (a killed watch cannot)."""
        doc = dict(self._last_heartbeat or {"pid": os.getpid(), "cycle": 0, "at": None})
        doc.update(
            state="stopped",
            stopped_at=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            stale_after=None,
        )
        _write_heartbeat(self.db, doc)


def _write_heartbeat(db: str, doc: dict[str, Any]) -> None:
    # Through the output guard: a link planted at the name is refused, not followed.
    guard = outputs.for_database(db)
    with contextlib.suppress(OSError, ReplaygateError):
        guard.write_text(heartbeat_path(db), json.dumps(doc, indent=1))


def check(db: str, now: dt.datetime | None = None) -> tuple[bool, str]:
    """Whether a watch is alive on `db` and keeping up, and one line saying so: it holds
    the database's writer lock (gone with the process, even after `kill -9`) and its
    last heartbeat is not past `stale_after` (a hung watch still holds the lock)."""
    now = now or dt.datetime.now(dt.UTC)
    try:
        hb = json.loads(heartbeat_path(db).read_text())
        if not isinstance(hb, dict):
            raise ValueError
    except FileNotFoundError:
        hb = None
    except (OSError, ValueError):
        return False, f"the heartbeat {heartbeat_path(db)} cannot be read"
    held = dblock.holder(db) or {}
    here = hb is None or hb.get("host") in (None, socket.gethostname())
    running = held.get("role") == dblock.WATCH if here else hb is not None
    pid = held.get("pid") or (hb or {}).get("pid")
    if hb is None:
        if running:
            return True, f"watch (pid {pid}) is running; its first cycle has not finished"
        return False, f"no watch has run on {db} (no heartbeat)"
    last = f"cycle #{hb.get('cycle')} at {hb.get('at')}"
    if not running:
        if hb.get("state") == "stopped":
            return False, f"watch is not running: it stopped at {hb.get('stopped_at')} ({last})"
        return False, (
            f"watch is not running: pid {hb.get('pid')} is gone without stopping (killed?); "
            f"its last {last}"
        )
    try:
        due = dt.datetime.strptime(str(hb.get("stale_after")), "%Y-%m-%dT%H:%M:%SZ")
        stale = now > due.replace(tzinfo=dt.UTC)
    except ValueError:
        stale = True
    if stale:
        return False, (
            f"watch (pid {pid}) holds the database but its heartbeat is stale: last {last}, "
            f"the next was due by {hb.get('stale_after')} (hung, or a cycle far too slow)"
        )
    if not hb.get("ok", False):
        return False, f"watch (pid {pid}) is running but its last {last} failed: {hb.get('error')}"
    return True, f"watch (pid {pid}) is running; last {last}"


def _raise_in(thread: threading.Thread, exc: type[BaseException]) -> None:
    """Raise `exc` in `thread` at its next Python step (CPython's asynchronous
    exception; a C call in progress, such as a DuckDB query, returns first)."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread.ident), ctypes.py_object(exc)
        )


def _wal(p: Path) -> Path:
    return p.with_name(p.name + ".wal")


def _lag(con: duckdb.DuckDBPyConnection, now: dt.datetime) -> float | None:
    """Seconds between now and the newest record of any type."""
    newest = None
    for rt in RECORD_TYPES:
        ts = dbm.one_row(con.execute(f"SELECT max(ts) FROM {rt.table}"))[0]
        if ts is not None and (newest is None or ts > newest):
            newest = ts
    return None if newest is None else max(0.0, (now - newest).total_seconds())


def _stale(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Sources far behind the others (queries/freshness.py), as "event log 3.6 days"."""
    from replaygate import api

    return api.stale_sources(con)


def _change_line(c: Cycle, ch: dict[str, Any]) -> str:
    from replaygate.api import terminal

    return terminal(_raw_change_line(c, ch))


def _raw_change_line(c: Cycle, ch: dict[str, Any]) -> str:
    from replaygate.api import title

    was = ch["previous"] or "new"
    reasons = "; ".join(ch["reasons"][:3]) or "all gates pass"
    # Gates by their titles, as the reasons, the tables and the dashboard name them.
    gates = ", ".join(f"{title(g['id'])} {g['previous']} -> {g['status']}" for g in ch["gates"])
    tail = f" [{gates}]" if gates else ""
    return (
        f"{c.at:%H:%M:%S} #{c.n} stage {ch['stage']}: {was} -> {ch['decision']}{tail} ({reasons})"
    )


def _one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def main(
    paths: Sequence[str],
    db: str,
    config_path: str | None,
    every: float,
    notify: Sequence[str],
    dashboard_url: str,
    source: str,
    cycles: int | None,
    probe: ProbeSpec | None = None,
) -> None:
    """The `watch` command: run until SIGINT/SIGTERM (or `cycles` cycles)."""
    import signal

    import click

    from replaygate.api import resolve_config

    from .notify import check_url

    for url in notify:
        why = check_url(url)
        if why:
            raise ReplaygateError(f"--notify URL {why}: webhooks are posted to over http(s)")
    # As every reader: --config, else the configuration the database was last analysed
    # with, else ./replaygate.toml; so a watch started without --config keeps the
    # decisions `gates` and the dashboard show.
    resolved = resolve_config(db, config_path)
    conf = resolved.config
    stop = threading.Event()
    say = lambda line: click.echo(line)  # noqa: E731
    notifier = Notifier(list(notify), log=lambda line: click.echo(line, err=True))
    w = Watcher(list(paths), db, conf, every, notifier, dashboard_url, source, say, probe)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        w.interrupt()  # abandons a cycle in progress

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    click.echo(
        f"watching {len(paths)} path{'s' if len(paths) > 1 else ''} every "
        f"{duration.show(every)}; publishing {db}"
        + (f"; notifying {len(notify)} URL{'s' if len(notify) > 1 else ''}" if notify else ""),
        err=True,
    )
    click.echo(f"configuration: {terminal(resolved.note)}", err=True)
    try:
        n = w.run(stop, cycles)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    tail = ""
    if w.abandoned is not None:
        tail = f"; cycle #{w.abandoned} was interrupted and nothing of it published"
    click.echo(f"stopped after {n} cycle{'s' if n != 1 else ''}{tail}", err=True)
