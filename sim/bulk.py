"""Clean bulk traffic for large fleets, written column-wise with numpy and pyarrow.

A large fleet is mostly ordinary sessions. Playing each of millions of them through
the per-event Python path (scenarios.py, calls.py) is what makes a large fleet slow,
so the vector engine plays a pool of sessions of every kind through that same path
once ("templates"), then writes the bulk as copies of them: each copy starts at its
own time and gets its own identifiers (session HMACs, event ids, digests, dispatch
ids, receipts, idempotency keys, token subjects), computed from the copy's number by
a bijective hash, so no two copies share an id and any row can compute the id another
row refers to. Faults are still played by the per-event path (faults.py) into the same
files, so truth.json keeps the same catalogue; the stage counters the truth's gate
decisions need are counted column-wise from the copies.

Everything that decides what ordinary traffic looks like stays in scenarios.py: a
template is whatever it plays, so the bulk cannot drift from the Python engine.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replaygate.core.contract import BY_TABLE

from .fleet import T0, Fleet, origin_class
from .scenarios import normal_session, refused_origin, sessionless

TABLES = ("sessions", "streams", "events", "inbox", "dispatches", "proxy")
INSTANCES_PER_CHUNK = 40_000  # about 0.8M server events per chunk: bounded memory

# Pools of templates: what a copy of each plays (cohort, resumable).
SESSION_POOLS = (
    ("baseline", None, False),
    ("shadow-10pct", "shadow-10pct", False),
    ("resume-read-25pct", "resume-read-25pct", True),
    ("write-10pct", "write-10pct", True),
    ("write-10pct-v2", "write-10pct-v2", True),
)
SESSIONLESS, REFUSED = "sessionless", "refused"

# Identifier shapes the Python engine produces; each is rewritten per copy.
HEX64, UUID, PFX16, TSEID = 0, 1, 2, 3
_HEX64 = re.compile(r"[0-9a-f]{64}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
_TSEID = re.compile(r"(\d+)_(\d+)_[0-9a-f]{4}")
_PREFIXED = (  # (pattern, prefix kept, what the hash is keyed on)
    (re.compile(r"(d-)\d{8}"), lambda m: m.group(0)),
    (re.compile(r"(rcpt-d-)\d{8}"), lambda m: m.group(0)[5:]),  # the dispatch it names
    (re.compile(r"(out-)\d{8}"), lambda m: m.group(0)),
    (re.compile(r"(idem-)[0-9a-f]{20}"), lambda m: m.group(0)),
    (re.compile(r"(sub-user-\d{4}-)\d+"), lambda m: m.group(0)),
)
# Values copied verbatim end up in JSON and CSV text unquoted: they must need no escaping.
_PLAIN = re.compile(r"[\x21-\x7e][\x20-\x7e]*")
_UNSAFE = re.compile(r'[",\\]')
MAX_TOKENS = 1 << 12  # identifiers per template; the hash key is (copy << 12) | token


@dataclass
class Templates:
    """Captured template rows per table, with identifiers replaced by token numbers."""

    # Per table, numpy columns: the contract's fields (strings as codes: >= 0 an index in
    # `vocab`, -1 null, <= -2 a token), __null_<field> masks, and the counters' flags.
    tables: dict[str, dict[str, np.ndarray]]
    offsets: dict[str, np.ndarray]  # per table: row range of each template
    recoveries: pa.Table  # tpl, t_off, dur_ms: a DISCONNECTED followed by its re-open
    tok_off: np.ndarray  # tokens are numbered template by template: each one's range
    tok_kind: np.ndarray
    tok_key: np.ndarray  # the token's hash key within its template
    tok_prefix: pa.Array
    tok_toff: np.ndarray  # for TSEID: the time in the id, relative to the template start
    vocab: pa.Array  # the verbatim strings
    pools: dict[str, np.ndarray]  # pool name -> template ids
    ts_cols: dict[str, list[str]]


class _Capture(Fleet):
    """A Fleet whose records are kept in memory, tagged with the template they belong to."""

    def __init__(self, base: Fleet, rng: random.Random):
        super().__init__(
            None, rng, base.key, base.fmt, server_only=base.server_only, allowlist=base.allowlist
        )
        self.stages = base.stages
        self.rollback_at = base.rollback_at
        self.tpl = -1
        self.t0 = 0
        self.rows: dict[str, list[dict]] = defaultdict(list)

    def w(self, table: str, row: dict, file_name: str | None = None) -> None:
        assert file_name is None, "ordinary traffic writes only the default files"
        self.rows[table].append({**row, "_tpl": self.tpl})


def capture(base: Fleet, per_pool: int, rng: random.Random) -> Templates:
    """Play `per_pool` sessions of each kind through the per-event path."""
    cf = _Capture(base, rng)
    pools: dict[str, list[int]] = defaultdict(list)
    plays: list[tuple[str, Callable[[], None]]] = [
        (name, partial(normal_session, cf, T0, c, resumable=r)) for name, c, r in SESSION_POOLS
    ]
    plays.append((SESSIONLESS, partial(sessionless, cf, T0)))
    plays.append((REFUSED, partial(refused_origin, cf, T0)))
    for name, play in plays:
        for _ in range(per_pool if name != REFUSED else max(8, per_pool // 20)):
            cf.tpl += 1
            pools[name].append(cf.tpl)
            play()
    n_tpl = cf.tpl + 1
    return _encode(cf, n_tpl, {k: np.array(v, np.int64) for k, v in pools.items()})


def _encode(cf: _Capture, n_tpl: int, pools: dict[str, np.ndarray]) -> Templates:
    tok_kind: list[int] = []
    tok_key: list[int] = []
    tok_prefix: list[str] = []
    tok_toff: list[int] = []
    tok_tpl: list[int] = []
    per_tpl: dict[tuple[int, str], int] = {}  # (tpl, hash key) -> token number in tpl
    count: dict[int, int] = defaultdict(int)
    seen: dict[tuple[int, str], int] = {}  # (tpl, value) -> global token id
    verbatim: set[str] = set()

    def token(tpl: int, value: str) -> int:
        if value in verbatim:
            return -1
        got = seen.get((tpl, value))
        if got is not None:
            return got
        kind, prefix, key, toff = _classify(value)
        if kind < 0:
            verbatim.add(value)
            return -1
        k = per_tpl.get((tpl, key))
        if k is None:
            k = per_tpl[(tpl, key)] = count[tpl]
            count[tpl] += 1
            assert k < MAX_TOKENS
        tok_tpl.append(tpl)
        tok_kind.append(kind)
        tok_key.append(k)
        tok_prefix.append(prefix)
        tok_toff.append(toff - T0 if kind == TSEID else 0)
        seen[(tpl, value)] = len(tok_kind) - 1
        return seen[(tpl, value)]

    with_receipts = cf.with_receipts
    vocab: dict[str, int] = {}
    tables: dict[str, dict[str, np.ndarray]] = {}
    offsets: dict[str, np.ndarray] = {}
    ts_cols: dict[str, list[str]] = {}
    for table in TABLES:
        rt = BY_TABLE[table]
        rows = cf.rows.get(table, [])
        tpl = np.array([r["_tpl"] for r in rows], np.int64)
        assert (np.diff(tpl) >= 0).all()
        offsets[table] = np.searchsorted(tpl, np.arange(n_tpl + 1)).astype(np.int64)
        cols: dict[str, np.ndarray] = {}
        ts_cols[table] = []
        for f in rt.fields:
            vals = [r.get(f.name) for r in rows]
            if f.type in ("text", "enum"):
                # >= 0: a verbatim value (its index in `vocab`); -1: null; <= -2: a token
                codes = np.empty(len(vals), np.int64)
                for i, (r, v) in enumerate(zip(rows, vals, strict=True)):
                    if v is None:
                        codes[i] = -1
                    elif (tk := token(r["_tpl"], v)) >= 0:
                        codes[i] = -2 - tk
                    else:
                        assert _PLAIN.fullmatch(v) and not _UNSAFE.search(v), v
                        codes[i] = vocab.setdefault(v, len(vocab))
                cols[f.name] = codes
                continue
            if f.type == "ts":
                ts_cols[table].append(f.name)
                vals = [None if v is None else v - T0 for v in vals]
            nulls = np.array([v is None for v in vals], bool)
            arr = np.array([0 if v is None else v for v in vals], _NUMPY[f.type])
            cols[f.name] = arr
            if nulls.any():
                cols["__null_" + f.name] = nulls
        for r in rows:
            extra = set(r) - {f.name for f in rt.fields} - {"_tpl"}
            assert not extra, (table, extra)
        # What the truth's stage counters count (fleet.py), per template row.
        named = [r.get("session_hmac") is not None for r in rows]
        cols["_named"] = np.array(named, bool)
        flag: list[bool] = [False] * len(rows)
        if table == "inbox":
            flag = [r["verdict"] == "accepted" for r in rows]
        elif table == "streams":
            flag = [r["state"] == "CLOSED" and r.get("close_reason") == "completed" for r in rows]
        elif table == "events":
            flag = [
                r["kind"] != "priming"
                and r["disposition"] in ("sent", "replayed")
                and (r["session_hmac"], r["generation"]) not in with_receipts
                for r in rows
            ]
        elif table == "dispatches":
            flag = [r["tool_class"] in ("write", "paid") for r in rows]
        elif table == "proxy":
            flag = [
                r["status"] == 404 and n and r["method"] != "DELETE"
                for r, n in zip(rows, named, strict=True)
            ]
            classes = [origin_class(r.get("origin"), r["method"], cf.allowlist) for r in rows]
            cols["_bad_origin"] = np.array([c == "invalid" for c in classes], bool)
            cols["_unjudged_origin"] = np.array([c == "unjudged" for c in classes], bool)
            cols["_reconnect"] = np.array(_reconnects(rows), bool)
        cols["_flag"] = np.array(flag, bool)
        tables[table] = cols
    # Renumber the tokens template by template, so each copy's identifiers are one range.
    order = np.argsort(np.array(tok_tpl, np.int64), kind="stable")
    renumber = np.empty(len(order), np.int64)
    renumber[order] = np.arange(len(order))
    for table in TABLES:
        rt = BY_TABLE[table]
        for f in rt.fields:
            if f.type in ("text", "enum"):
                c = tables[table][f.name]
                tok = c <= -2
                c[tok] = -2 - renumber[-2 - c[tok]]
    sorted_tpl = np.array(tok_tpl, np.int64)[order]
    return Templates(
        tables=tables,
        offsets=offsets,
        recoveries=_recoveries(cf.rows.get("streams", [])),
        tok_off=np.searchsorted(sorted_tpl, np.arange(n_tpl + 1)).astype(np.int64),
        tok_kind=np.array(tok_kind, np.int8)[order],
        tok_key=np.array(tok_key, np.int64)[order],
        tok_prefix=pa.array(tok_prefix, pa.string()).take(pa.array(order)),
        tok_toff=np.array(tok_toff, np.int64)[order],
        vocab=pa.array(list(vocab), pa.string()),
        pools=pools,
        ts_cols=ts_cols,
    )


_NUMPY = {"ts": np.int64, "int": np.int64, "float": np.float64, "bool": bool}


def _reconnects(rows: list[dict]) -> list[bool]:
    """Which proxy rows of the templates are reconnects: a resuming GET, a GET re-opening a
    session's stream without a cursor (the session's earlier GETs, template by template),
    429 or 503."""
    gets: dict[tuple, int] = defaultdict(int)
    out = []
    for r in rows:
        session = r.get("session_hmac")
        before = gets[(r["_tpl"], session)] if session else 0
        if r["method"] == "GET" and session:
            gets[(r["_tpl"], session)] += 1
        get = r["method"] == "GET" and (bool(r.get("last_event_id")) or before > 0)
        out.append(get or r["status"] in (429, 503))
    return out


def _classify(value: str) -> tuple[int, str, str, int]:
    """(kind, prefix, hash key, time) of an identifier; kind -1 for a verbatim value."""
    if _HEX64.fullmatch(value):
        return HEX64, "", value, 0
    if _UUID.fullmatch(value):
        return UUID, "", value, 0
    m = _TSEID.fullmatch(value)
    if m:
        return TSEID, m.group(1), value, int(m.group(2))
    for pat, key in _PREFIXED:
        m = pat.fullmatch(value)
        if m:
            return PFX16, m.group(1), key(m), 0
    return -1, "", "", 0


def _recoveries(rows: list[dict]) -> pa.Table:
    """The recovery times the truth counts (Fleet.led_stream): DISCONNECTED to re-open."""
    open_: dict[tuple, int] = {}
    tpl, t_off, dur = [], [], []
    for r in rows:
        key = (r["session_hmac"], r["generation"], r["stream_id"])
        if r["state"] == "DISCONNECTED":
            open_[key] = r["ts"]
        elif r["state"] == "STREAM_OPEN" and key in open_:
            t = open_.pop(key)
            tpl.append(r["_tpl"])
            t_off.append(t - T0)
            dur.append(r["ts"] - t)
        elif r["state"] == "CLOSED":
            open_.pop(key, None)
    return pa.table(
        {
            "_tpl": pa.array(tpl, pa.int64()),
            "t_off": pa.array(t_off, pa.int64()),
            "dur_ms": pa.array(dur, pa.int64()),
        }
    )


# -- identifiers ---------------------------------------------------------------------------
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_LANES = tuple(
    np.uint64(x) for x in (0, 0x5851F42D4C957F2D, 0x14057B7EF767814F, 0xD1B54A32D192ED03)
)
_HEXPAIRS = np.array(
    [ord(a) | (ord(b) << 8) for a in "0123456789abcdef" for b in "0123456789abcdef"], np.uint16
)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection on 64 bits, so distinct inputs stay distinct."""
    x = x + _GOLD
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _hex(words: list[np.ndarray]) -> np.ndarray:
    """(n, 16 * len(words)) ASCII hex digits of 64-bit words, most significant first."""
    parts = []
    for w in words:
        b = w.astype(">u8").view(np.uint8).reshape(-1, 8)
        parts.append(_HEXPAIRS[b].view(np.uint8).reshape(-1, 16))
    return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]


def _fixed(buf: np.ndarray) -> pa.Array:
    """A string array over fixed-width ASCII rows."""
    n, width = buf.shape
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int64)
    data = np.ascontiguousarray(buf).reshape(-1)
    return pa.Array.from_buffers(
        pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    ).cast(pa.string())


def _uuid(h: np.ndarray) -> np.ndarray:
    out = np.empty((h.shape[0], 36), np.uint8)
    out[:, [8, 13, 18, 23]] = ord("-")
    out[:, 0:8], out[:, 9:13], out[:, 14:18] = h[:, 0:8], h[:, 8:12], h[:, 12:16]
    out[:, 19:23], out[:, 24:36] = h[:, 16:20], h[:, 20:32]
    out[:, 14] = ord("4")
    out[:, 19] = np.frombuffer(b"89ab", np.uint8)[h[:, 19] & 3]
    return out


class Ids:
    """Identifiers of copy `g`'s token `k`, for one seed."""

    def __init__(self, seed: int):
        self.salt = _mix(np.array([seed], np.uint64) ^ np.uint64(0x2545F4914F6CDD1D))[0]

    def words(self, g: np.ndarray, k: np.ndarray, lanes: int) -> list[np.ndarray]:
        x = ((g.astype(np.uint64) << np.uint64(12)) | k.astype(np.uint64)) ^ self.salt
        return [_mix(x ^ _LANES[i]) for i in range(lanes)]

    def strings(self, t: Templates, tok: np.ndarray, g: np.ndarray, start: np.ndarray) -> pa.Array:
        """The identifier of each (token, copy, copy start) row."""
        kind = t.tok_kind[tok]
        key = t.tok_key[tok]
        parts: list[tuple[np.ndarray, pa.Array]] = []
        for kd in np.unique(kind):
            sel = np.flatnonzero(kind == kd)
            if kd == HEX64:
                s = _fixed(_hex(self.words(g[sel], key[sel], 4)))
            elif kd == UUID:
                s = _fixed(_uuid(_hex(self.words(g[sel], key[sel], 2))))
            else:
                prefix = t.tok_prefix.take(pa.array(tok[sel]))
                h = _hex(self.words(g[sel], key[sel], 1))
                if kd == PFX16:
                    s = pc.binary_join_element_wise(prefix, _fixed(h), "")
                else:
                    when = pa.array(t.tok_toff[tok[sel]] + start[sel]).cast(pa.string())
                    s = pc.binary_join_element_wise(prefix, when, _fixed(h[:, :4]), "_")
            parts.append((sel, s))
        if len(parts) == 1:
            return parts[0][1]
        order = np.concatenate([p[0] for p in parts])
        merged = pa.concat_arrays([p[1] for p in parts])
        return merged.take(pa.array(np.argsort(order, kind="stable")))


# -- the bulk --------------------------------------------------------------------------------
def _rows(offsets: np.ndarray, tpl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(copy index, template row) of every row the copies write, copy by copy."""
    lens = offsets[tpl + 1] - offsets[tpl]
    inst = np.repeat(np.arange(len(tpl)), lens)
    first = np.cumsum(lens) - lens
    row = offsets[tpl][inst] + np.arange(int(lens.sum())) - first[inst]
    return inst, row


class StageOf:
    """The gates' stage rule (Fleet.stage_of), column-wise."""

    def __init__(self, f: Fleet):
        self.starts = np.array([s.start for s in f.stages], np.int64)
        self.ends = np.array(
            [s.end if s.end is not None else np.iinfo(np.int64).max for s in f.stages], np.int64
        )

    def __call__(self, ts: np.ndarray, named: np.ndarray, cohort: np.ndarray) -> np.ndarray:
        """Stage index per row, -1 for none. `cohort`: the session's stage, -1 baseline."""
        win = np.searchsorted(self.starts, ts, side="right") - 1
        ok = win >= 0
        win = np.where(ok & (ts < self.ends[np.maximum(win, 0)]), win, -1)
        c = np.maximum(cohort, 0)
        inside = (cohort >= 0) & (self.starts[c] <= ts) & (ts < self.ends[c])
        return np.where(named, np.where(inside, cohort, -1), win)


def write_bulk(
    f: Fleet,
    t: Templates,
    starts: np.ndarray,
    pool_of: np.ndarray,
    pool_names: list[str],
    rng: np.random.Generator,
    seed: int,
) -> None:
    """Write one copy per start, of a template drawn from its pool; count what truth needs."""
    ids = Ids(seed)
    stage_of = StageOf(f)
    names = [s.name for s in f.stages]
    cohort_of_pool = np.array([names.index(p) if p in names else -1 for p in pool_names], np.int64)
    tpl = np.empty(len(starts), np.int64)
    for i, p in enumerate(pool_names):
        sel = np.flatnonzero(pool_of == i)
        ids_ = t.pools[p]
        tpl[sel] = ids_[rng.integers(0, len(ids_), len(sel))]
    counts = _Counts(len(f.stages))
    rec_off = np.searchsorted(t.recoveries["_tpl"].to_numpy(), np.arange(len(t.tok_off)))
    writers = {table: f.writer(table) for table in TABLES if len(t.tables[table]["_flag"])}
    # One writer thread: Parquet encoding, text formatting and compression run in C and
    # release the GIL, so a chunk is written while the next is drawn. One thread keeps
    # each file's batches in order; waiting for the previous chunk bounds memory.
    pending: list[Future] = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        for lo in range(0, len(starts), INSTANCES_PER_CHUNK):
            hi = min(lo + INSTANCES_PER_CHUNK, len(starts))
            g = np.arange(lo, hi, dtype=np.int64)
            ctpl, cstart = tpl[lo:hi], starts[lo:hi]
            ccohort = cohort_of_pool[pool_of[lo:hi]]
            # Every identifier of every copy in the chunk, once; rows take theirs from here.
            tinst, trow = _rows(t.tok_off, ctpl)
            made = ids.strings(t, trow, g[tinst], cstart[tinst])
            strings = pa.concat_arrays([t.vocab, made])
            lens = t.tok_off[ctpl + 1] - t.tok_off[ctpl]
            # a token's position in `strings`: first[copy] + token id
            first = len(t.vocab) + np.cumsum(lens) - lens - t.tok_off[ctpl]
            batches = {}
            for table in writers:
                inst, row = _rows(t.offsets[table], ctpl)
                batch, stage = _copy(t, table, inst, row, cstart, ccohort, strings, first, stage_of)
                counts.add(table, batch, stage, t.tables[table], row)
                if table == "events":
                    f.events_written += batch.num_rows
                batches[table] = batch
            inst, row = _rows(rec_off, ctpl)
            rec = t.recoveries.take(pa.array(row))
            at = rec["t_off"].to_numpy() + cstart[inst]
            stage_ix = stage_of(at, np.ones(len(at), bool), ccohort[inst])
            counts.recoveries(stage_ix, rec["dur_ms"].to_numpy() / 1000)
            for fut in pending:
                fut.result()
            pending = [pool.submit(writers[k].write_batch, b) for k, b in batches.items()]
        for fut in pending:
            fut.result()
    counts.merge_into(f)


def _copy(t, table, inst, row, start, cohort, strings, first, stage_of):
    src = t.tables[table]
    shift = start[inst]
    out: dict[str, pa.Array] = {}
    for fld in BY_TABLE[table].fields:
        v = src[fld.name][row]
        if fld.type in ("text", "enum"):
            tok = v <= -2
            if tok.any():
                v[tok] = first[inst[tok]] - 2 - v[tok]
            out[fld.name] = strings.take(pa.array(v, mask=v == -1))
            continue
        if fld.name in t.ts_cols[table]:
            v += shift
        nulls = src.get("__null_" + fld.name)
        out[fld.name] = pa.array(v, mask=None if nulls is None else nulls[row])
    batch = pa.table(out)
    named = src["_named"][row]
    return batch, stage_of(batch["ts"].to_numpy(), named, cohort[inst])


class _Counts:
    """The stage counters of Fleet.stats, summed column-wise (index 0 is no stage)."""

    def __init__(self, n_stages: int):
        self.n = n_stages + 1
        self.sums: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(self.n, np.int64))
        self.rec: list[list[np.ndarray]] = [[] for _ in range(self.n)]
        self.reconnect: list[list[np.ndarray]] = [[] for _ in range(self.n)]

    def _sum(self, name: str, stage: np.ndarray, flag: np.ndarray) -> None:
        self.sums[name] += np.bincount(stage[flag] + 1, minlength=self.n)

    def add(self, table, batch, stage, src, row) -> None:
        flag = src["_flag"][row]
        name = {
            "inbox": "accepted",
            "streams": "completed",
            "events": "delivered",
            "dispatches": "write_dispatches",
            "proxy": "n404",
        }.get(table)
        if name:
            self._sum(name, stage, flag)
        if table == "proxy":
            bad = src["_bad_origin"][row]
            self._sum("invalid_origin", stage, bad)
            self._sum("unjudged_origin", stage, src["_unjudged_origin"][row])
            rec = src["_reconnect"][row]
            ts = batch["ts"].to_numpy()
            for s in np.unique(stage[rec]):
                self.reconnect[s + 1].append(ts[rec & (stage == s)])

    def recoveries(self, stage: np.ndarray, secs: np.ndarray) -> None:
        for s in np.unique(stage):
            self.rec[s + 1].append(secs[stage == s])

    def merge_into(self, f: Fleet) -> None:
        keys: list[str | None] = [None] + [s.name for s in f.stages]
        for i, k in enumerate(keys):
            stats = f.stats[k]
            stats.accepted += int(self.sums["accepted"][i])
            stats.completed += int(self.sums["completed"][i])
            stats.n404 += int(self.sums["n404"][i])
            stats.invalid_origin += int(self.sums["invalid_origin"][i])
            stats.unjudged_origin += int(self.sums["unjudged_origin"][i])
            stats.write_dispatches += int(self.sums["write_dispatches"][i])
            for a in self.rec[i]:
                stats.recoveries.extend(a.tolist())
            for a in self.reconnect[i]:
                stats.reconnect_ts.extend(a.tolist())
            f.bulk_delivered[k] += int(self.sums["delivered"][i])
