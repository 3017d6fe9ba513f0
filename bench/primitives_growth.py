"""Benchmark: the bare DuckDB primitives the large analysis steps are made of — a scan of
the key columns, a grouping by session and by stream, the receipts' hash join with the
events, a window by session and time — with their user and system CPU, disk reads and
peak RSS, on the stored text keys and on an integer key per session and per stream.

    python bench/primitives_growth.py DB [--keys text,int] [--int SCRATCH]
        [--build-int {keys,join-events,join-inbox}] [--only NAME,...] [--repeat 2]
        [--drop-caches] [--temp-dir DIR] [--json OUT]

`DB` is an ingested database, opened read-only under the analysis' memory limit for the
events it stores (`core/db.py`: 3 GB up to 10M events; `REPLAYGATE_MEMORY_LIMIT`
overrides, 12GB at 100M). Every primitive answers one row of counts (nothing of the data
comes back to Python). Each runs `--repeat` times in a connection of its own, so its first
run starts with DuckDB's buffer empty; with `--drop-caches` (root) the kernel's page cache is
dropped before that first run too (`cold`), the later runs are `warm`. With `--temp-dir`
DuckDB spills there and each run reports the folder's peak (`spill_mb`; another process
spilling into the same folder is counted too).

`--int SCRATCH` names a database (ATTACHed read-only) holding the columns the primitives
read of `events` and `inbox` with the session as a dense integer `sid` and the stream
(session, generation, stream id) as a dense integer `stid`, in the tables' own row order:
`ev` and `ib` for the scans, groupings and window, `evj` and `ibj` for the join.
`--build-int PART` writes a part of it first (not timed: it prints the build's CPU and
checks that each table's distinct sessions, and streams, are as many as the text keys');
at 100M one part at a time fits a small disk (1.1 GB for `keys`, 2.6 GB for the join's two).
Not a timed test: figures depend on the machine, its load and its page cache.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import drop_page_cache, page_cache_mb  # noqa: E402

from replaygate.core import db  # noqa: E402

_PAGE = os.sysconf("SC_PAGE_SIZE")

# Each primitive in its two spellings: the stored text keys, and the integer keys of the
# scratch database (`k.ev`, `k.ib`). The same work on the same rows; only the keys differ.
PRIMITIVES: dict[str, dict[str, str]] = {
    "scan_events": {
        "text": "SELECT count(*), sum(strlen(session_hmac)), sum(generation),"
        " sum(strlen(stream_id)), max(ts) FROM events",
        "int": "SELECT count(*), sum(sid), sum(generation), sum(stid), max(ts) FROM k.ev",
    },
    "scan_inbox": {
        "text": "SELECT count(*), sum(strlen(session_hmac)), sum(generation),"
        " sum(strlen(stream_id)), max(ts), count(seq) FROM inbox",
        "int": "SELECT count(*), sum(sid), sum(generation), sum(stid),"
        " max(ts), count(seq) FROM k.ib",
    },
    "group_session_events": {
        "text": "SELECT count(*), sum(n) FROM"
        " (SELECT session_hmac, count(*) AS n FROM events GROUP BY session_hmac)",
        "int": "SELECT count(*), sum(n) FROM (SELECT sid, count(*) AS n FROM k.ev GROUP BY sid)",
    },
    # the same 2^18 groups at every scale (more sessions than that from 1M on): a growth
    # over x10 here is per row, not the hash table outgrowing the CPU's cache
    "group_fixed_events": {
        "text": "SELECT count(*), sum(n) FROM (SELECT hash(session_hmac) % 262144 AS g,"
        " count(*) AS n FROM events GROUP BY g)",
        "int": "SELECT count(*), sum(n) FROM (SELECT sid % 262144 AS g, count(*) AS n"
        " FROM k.ev GROUP BY g)",
    },
    # the same 2^20 groups (about the 10M fleet's 1.6M streams) at every scale: what a
    # grouping by stream whose hash table stays the 10M one's size would grow
    "group_fixed_streams": {
        "text": "SELECT count(*), sum(n) FROM (SELECT hash(session_hmac, generation,"
        " stream_id) % 1048576 AS g, count(*) AS n FROM events GROUP BY g)",
        "int": "SELECT count(*), sum(n) FROM (SELECT stid % 1048576 AS g, count(*) AS n"
        " FROM k.ev GROUP BY g)",
    },
    "group_stream_events": {
        "text": "SELECT count(*), sum(n) FROM (SELECT session_hmac, generation, stream_id,"
        " count(*) AS n FROM events GROUP BY session_hmac, generation, stream_id)",
        "int": "SELECT count(*), sum(n) FROM (SELECT stid, count(*) AS n FROM k.ev GROUP BY stid)",
    },
    "group_stream_inbox": {
        "text": "SELECT count(*), sum(n) FROM (SELECT session_hmac, generation, stream_id,"
        " count(*) AS n FROM inbox GROUP BY session_hmac, generation, stream_id)",
        "int": "SELECT count(*), sum(n) FROM (SELECT stid, count(*) AS n FROM k.ib GROUP BY stid)",
    },
    # a_inbox_resolved's join in one bucket: the receipts without a place looked up among
    # every event by (session, generation, event id)
    "join_receipts_events": {
        "text": "SELECT count(*), count(e.seq) FROM inbox i JOIN events e"
        " ON e.session_hmac = i.session_hmac AND e.generation = i.generation"
        " AND e.event_id = i.event_id WHERE i.seq IS NULL",
        "int": "SELECT count(*), count(e.seq) FROM k.ibj i JOIN k.evj e"
        " ON e.sid = i.sid AND e.generation = i.generation"
        " AND e.event_id = i.event_id WHERE i.seq IS NULL",
    },
    "window_session_ts": {
        "text": "SELECT count(*), sum(d) FROM (SELECT epoch_ms(ts) - epoch_ms(lag(ts)"
        " OVER (PARTITION BY session_hmac ORDER BY ts)) AS d FROM events)",
        "int": "SELECT count(*), sum(d) FROM (SELECT epoch_ms(ts) - epoch_ms(lag(ts)"
        " OVER (PARTITION BY sid ORDER BY ts)) AS d FROM k.ev)",
    },
}

# The scratch database, in parts (one at a time is what fits a small disk at 100M, each
# built in a few minutes): `keys`, the columns of the scans, groupings and window (`ev`,
# `ib`), and the join's (`evj` by `join-events`, `ibj` by `join-inbox`). One numbering of
# every stream key of either table (NULLs are keys too), each session numbered once, in
# the keys' order (so every part numbers alike); the rows copied in their stored order
# (`ORDER BY rowid`), keeping the text tables' locality.
_SESSIONS = """CREATE TEMP TABLE session_ids AS
    SELECT session_hmac, row_number() OVER (ORDER BY session_hmac) AS sid
    FROM (SELECT session_hmac FROM events UNION SELECT session_hmac FROM inbox)"""
_STREAMS = """CREATE TEMP TABLE stream_ids AS
    SELECT k.session_hmac, k.generation, k.stream_id, s.sid,
           row_number() OVER (ORDER BY k.session_hmac, k.generation, k.stream_id) AS stid
    FROM (SELECT session_hmac, generation, stream_id FROM events
          UNION SELECT session_hmac, generation, stream_id FROM inbox) k
    JOIN session_ids s ON s.session_hmac IS NOT DISTINCT FROM k.session_hmac"""
_COPY = """CREATE OR REPLACE TABLE k.{k} AS
    SELECT m.sid::INTEGER AS sid, {cols}
    FROM {t} x JOIN {m} m ON m.session_hmac IS NOT DISTINCT FROM x.session_hmac{on}
    ORDER BY x.rowid"""
_STREAM_ON = """
     AND m.generation IS NOT DISTINCT FROM x.generation
     AND m.stream_id IS NOT DISTINCT FROM x.stream_id"""
_JOIN_COLS = "x.generation, x.event_id, x.seq"
# part: (statements, [(text table, integer table)] it writes)
PARTS: dict[str, tuple[list[str], list[tuple[str, str]]]] = {
    "keys": (
        [
            _SESSIONS,
            _STREAMS,
            _COPY.format(k="ev", t="events", m="stream_ids", on=_STREAM_ON,
                         cols="m.stid::INTEGER AS stid, x.generation, x.ts"),
            _COPY.format(k="ib", t="inbox", m="stream_ids", on=_STREAM_ON,
                         cols="m.stid::INTEGER AS stid, x.generation, x.ts, x.seq"),
        ],
        [("events", "ev"), ("inbox", "ib")],
    ),
    "join-events": (
        [_SESSIONS, _COPY.format(k="evj", t="events", m="session_ids", on="", cols=_JOIN_COLS)],
        [("events", "evj")],
    ),
    "join-inbox": (
        [_SESSIONS, _COPY.format(k="ibj", t="inbox", m="session_ids", on="", cols=_JOIN_COLS)],
        [("inbox", "ibj")],
    ),
}  # fmt: skip

# The integer tables hold what the text tables hold: as many rows, sessions and streams.
_CHECK_SESSIONS = """SELECT (SELECT count(*) FROM {t}), (SELECT count(*) FROM k.{k}),
    (SELECT count(DISTINCT session_hmac) + max((session_hmac IS NULL)::INT) FROM {t}),
    (SELECT count(DISTINCT sid) FROM k.{k})"""
_CHECK_STREAMS = """SELECT
    (SELECT count(*) FROM (SELECT DISTINCT session_hmac, generation, stream_id FROM {t})),
    (SELECT count(DISTINCT stid) FROM k.{k})"""


class Peak:
    """The resident set's peak since the last `take()`, sampled every 5 ms in a thread,
    and the peak bytes of DuckDB's temporary folder (what it spilled), when given."""

    def __init__(self, temp: Path | None = None) -> None:
        self.peak = self.spill = 0
        self.temp = temp
        threading.Thread(target=self._run, daemon=True).start()
        if temp is not None:
            threading.Thread(target=self._run_spill, daemon=True).start()

    def _run_spill(self) -> None:
        assert self.temp is not None
        while True:
            with contextlib.suppress(OSError):
                size = sum(f.stat().st_size for f in self.temp.rglob("*") if f.is_file())
                self.spill = max(self.spill, size)
            time.sleep(0.05)

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, self.rss())
            time.sleep(0.005)

    def take(self) -> int:
        p, self.peak = max(self.peak, self.rss()), 0
        return p

    def take_spill(self) -> int:
        p, self.spill = self.spill, 0
        return p


def read_bytes() -> int:
    """Bytes this process had read from the disk (not the page cache); 0 off Linux."""
    try:
        with open("/proc/self/io") as fh:
            for line in fh:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def connect(
    path: Path, scratch: Path | None, temp: Path | None, settings: dict[str, str]
) -> duckdb.DuckDBPyConnection:
    """The database read-only under the analysis' limit for its events, spilling into
    `temp` when given, the scratch database attached as `k` (read-only) when given, with
    DuckDB's `settings` (name: value) set."""
    con = duckdb.connect(str(path), read_only=True)
    con.execute("SET memory_limit = $m", {"m": db.memory_limit("analysis", db.stored_events(con))})
    for name, value in settings.items():
        con.execute(f"SET {name} = $v", {"v": value})
    if temp is not None:
        con.execute("SET temp_directory = $t", {"t": str(temp)})
    if scratch is not None:
        con.execute(f"ATTACH '{scratch}' AS k (READ_ONLY)")
    return con


def timed(con: duckdb.DuckDBPyConnection, sql: str, peak: Peak) -> dict[str, Any]:
    """One statement: its CPU (user, system), wall, disk reads, peak RSS, answer."""
    peak.take()
    peak.take_spill()
    r0, io0, t0 = resource.getrusage(resource.RUSAGE_SELF), read_bytes(), time.perf_counter()
    row = con.execute(sql).fetchone()
    t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    user, sys_ = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
    return {
        "cpu_s": round(user + sys_, 3),
        "user_s": round(user, 3),
        "sys_s": round(sys_, 3),
        "s": round(t1 - t0, 3),
        "read_mb": round((read_bytes() - io0) / 2**20),
        "peak_mb": round(peak.take() / 2**20),
        "spill_mb": round(peak.take_spill() / 2**20),
        "minor_faults": r1.ru_minflt - r0.ru_minflt,
        "answer": [v if isinstance(v, int | float | None) else str(v) for v in row or ()],
    }


def build_int(path: Path, scratch: Path, part: str, temp: Path | None) -> dict[str, Any]:
    """Write a part of the scratch database (its tables replaced); its build's CPU and the
    checks."""
    with duckdb.connect(str(path), read_only=True) as src:
        limit = db.memory_limit("analysis", db.stored_events(src))
    # A read-only database opens every database attached to it read-only: both attached
    con = duckdb.connect(config={"memory_limit": limit})
    if temp is not None:
        con.execute("SET temp_directory = $t", {"t": str(temp)})
    con.execute(f"ATTACH '{path}' AS src (READ_ONLY)")
    con.execute(f"ATTACH '{scratch}' AS k")
    con.execute("USE src")
    c0, t0 = time.process_time(), time.perf_counter()
    statements, tables = PARTS[part]
    for sql in statements:
        con.execute(sql)
    con.execute("CHECKPOINT k")
    out: dict[str, Any] = {
        "part": part,
        "build_cpu_s": round(time.process_time() - c0, 2),
        "build_s": round(time.perf_counter() - t0, 2),
    }
    for t, k in tables:
        n = con.execute(_CHECK_SESSIONS.format(t=t, k=k)).fetchone()
        assert n is not None
        out[t] = {"rows": n[0], "sessions": n[2]}
        ok = (n[0], n[2]) == (n[1], n[3])
        if part == "keys":
            m = con.execute(_CHECK_STREAMS.format(t=t, k=k)).fetchone()
            assert m is not None
            out[t]["streams"] = m[0]
            ok = ok and m[0] == m[1]
        if not ok:
            raise SystemExit(f"{t}: the integer keys do not match the text keys")
    con.close()
    out["scratch_mb"] = round(scratch.stat().st_size / 2**20)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", type=Path)
    ap.add_argument("--keys", default="text,int", help="text, int or both (default both)")
    ap.add_argument("--int", dest="scratch", type=Path, help="the integer keys' database")
    ap.add_argument(
        "--build-int", choices=sorted(PARTS), help="write this part of --int's database first"
    )
    ap.add_argument("--only", help="the primitives to run, comma-separated (default all)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each (default 2)")
    ap.add_argument(
        "--drop-caches",
        action="store_true",
        help="drop the kernel's page cache before each primitive's first run (root)",
    )
    ap.add_argument("--temp-dir", type=Path, help="DuckDB's temporary folder (its spill)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a DuckDB setting for every primitive's connection (repeatable)",
    )
    ap.add_argument("--json", type=Path, help="write the figures here too")
    args = ap.parse_args()
    keys = [k for k in args.keys.split(",") if k]
    names = args.only.split(",") if args.only else list(PRIMITIVES)
    unknown = set(names) - set(PRIMITIVES) or set(keys) - {"text", "int"}
    if unknown:
        ap.error(f"unknown: {', '.join(sorted(unknown))}")
    settings = dict(kv.split("=", 1) for kv in args.set)
    if not all(re.fullmatch(r"[a-z_]+", name) for name in settings):
        ap.error("--set takes NAME=VALUE, NAME a DuckDB setting")
    if "int" in keys and args.scratch is None:
        ap.error("--keys int needs --int SCRATCH")
    out: dict[str, Any] = {
        "db": str(args.db),
        "load": [round(os.getloadavg()[0], 1)],
        "settings": settings,
    }
    if args.build_int:
        out["build"] = build_int(args.db, args.scratch, args.build_int, args.temp_dir)
        print(json.dumps(out["build"]), file=sys.stderr)
    peak = Peak(args.temp_dir)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for name in names:
        for key in keys:
            con = connect(args.db, args.scratch if key == "int" else None, args.temp_dir, settings)
            out["memory_limit"] = con.execute("SELECT current_setting('memory_limit')").fetchone()[
                0
            ]  # type: ignore[index]  # noqa: E501
            series = []
            for i in range(args.repeat):
                if i == 0 and args.drop_caches:
                    drop_page_cache()
                step = timed(con, PRIMITIVES[name][key], peak)
                step["cache"] = "cold" if i == 0 and args.drop_caches else "warm"
                step["page_cache_mb"] = page_cache_mb()
                step["load"] = round(os.getloadavg()[0], 1)
                series.append(step)
                print(
                    f"{name:22} {key:4} {step['cache']:4} {step['cpu_s']:8.2f} CPU s"
                    f" ({step['user_s']:.2f} + {step['sys_s']:.2f}) {step['s']:7.2f} s"
                    f" read {step['read_mb']:6} MB peak {step['peak_mb']:6} MB"
                    f" spill {step['spill_mb']:5} MB"
                    f" load {step['load']}",
                    file=sys.stderr,
                )
            con.close()
            runs.setdefault(name, {})[key] = series
    out["runs"] = runs
    out["load"].append(round(os.getloadavg()[0], 1))
    text = json.dumps(out, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
