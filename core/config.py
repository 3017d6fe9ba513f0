"""Configuration (`replaygate.toml`): thresholds, budgets, windows, allow-list, HMAC key.

Unknown keys and wrong types are rejected with one line naming the key, so a
typo never silently falls back to a default.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from . import timefmt
from .errors import ReplaygateError

# `probe_gates`: the probe's units count in the replay-integrity gates only (`-- replay:
# true`), in every gate, or in none.
PROBE_GATES = ("replay", "all", "none")
DEFAULT_TS_BOUNDS = {"min": "2000-01-01T00:00:00Z", "max": "2100-01-01T00:00:00Z"}


@dataclass(frozen=True)
class Config:
    hmac_key_env: str = "REPLAYGATE_HMAC_KEY"
    # None: not configured. Only loopback origins are then allowed, and a foreign Origin
    # cannot be judged (queries/params.py, the Origin gate says "not configured").
    origin_allowlist: tuple[str, ...] | None = None
    reconnect_budget_qps: float = 5.0
    recovery_threshold_s: float = 5.0
    reinit_window_s: float = 30.0
    # What a server answers for a terminated or unknown session (the TypeScript SDK's
    # examples up to 1.24 answer 400).
    dead_session_statuses: tuple[int, ...] = (404,)
    retry_window_s: float = 600.0
    resend_window_s: float = 30.0
    # Which gates count the units of `replaygate probe`'s sessions and requests
    # (PROBE_GATES): by default only those of replay integrity, the evidence it exists to
    # produce; every other gate judges real traffic alone.
    probe_gates: str = "replay"
    # Overrides only: each gate's default minimum sample is declared in its SQL header
    # (queries/sql/gates), which also checks the gate names.
    min_samples: dict[str, Any] = field(default_factory=dict)
    # [sources.nginx.fields] / [sources.envoy.fields]: the user's log keys -> the adapter's.
    sources: dict[str, Any] = field(default_factory=dict)
    # Plausible record timestamps: outside is a quarantined row, never a stored value.
    ts_bounds: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_TS_BOUNDS))
    source: str = "built-in defaults"

    def field_maps(self) -> dict[str, dict[str, str]]:
        """{proxy: {adapter key: the user's key}} for the nginx and Envoy adapters."""
        return {name: dict(s.get("fields", {})) for name, s in self.sources.items()}

    def hmac_key(self) -> bytes | None:
        """The key's bytes exactly as the environment holds them: a key that is not
        UTF-8 (random bytes) is what the servers HMAC with too, so it is used as is
        (Python hands such a value over with surrogate escapes; fsencode undoes them)."""
        value = os.environ.get(self.hmac_key_env)
        return os.fsencode(value) if value else None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("source")
        if self.origin_allowlist is None:
            del d["origin_allowlist"]  # not configured: loopback origins only
        else:
            d["origin_allowlist"] = list(self.origin_allowlist)
        if self.dead_session_statuses == (404,):
            del d["dead_session_statuses"]  # the default leaves the digest unchanged
        else:
            d["dead_session_statuses"] = list(self.dead_session_statuses)
        if d["probe_gates"] == "replay":
            del d["probe_gates"]  # the default leaves the digest unchanged
        if not d["sources"]:
            del d["sources"]  # unset: the digest of a configuration without it is unchanged
        if d["ts_bounds"] == DEFAULT_TS_BOUNDS:
            del d["ts_bounds"]  # likewise for the default timestamp bounds
        return d

    def digest(self) -> str:
        """SHA-256 of the effective settings (for reports and cache keys)."""
        blob = json.dumps(self.as_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()


_NUMBER = (int, float)
_TYPES = {
    "hmac_key_env": (str,),
    "origin_allowlist": (list,),
    "reconnect_budget_qps": _NUMBER,
    "recovery_threshold_s": _NUMBER,
    "reinit_window_s": _NUMBER,
    "dead_session_statuses": (list,),
    "retry_window_s": _NUMBER,
    "resend_window_s": _NUMBER,
    "probe_gates": (str,),
    "min_samples": (dict,),
    "sources": (dict,),
    "ts_bounds": (dict,),
}
# A key of the user's log becomes a JSON path: letters, digits and a few separators only.
_LOG_KEY = re.compile(r"^[A-Za-z0-9_@:.-]{1,100}$")
assert set(_TYPES) == {f.name for f in fields(Config)} - {"source"}


def _check(key: str, value: object, types: tuple[type, ...]) -> None:
    if isinstance(value, bool) or not isinstance(value, types):
        want = " or ".join(t.__name__ for t in types)
        raise ReplaygateError(f"config: {key} must be {want}, got {type(value).__name__}")


def from_mapping(data: dict[str, Any], source: str = "mapping") -> Config:
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in _TYPES:
            raise ReplaygateError(f"config: unknown key {key!r} in {source}")
        _check(key, value, _TYPES[key])
        kwargs[key] = value
    if "origin_allowlist" in kwargs:
        for item in kwargs["origin_allowlist"]:
            _check("origin_allowlist[]", item, (str,))
        kwargs["origin_allowlist"] = tuple(kwargs["origin_allowlist"])
    if "dead_session_statuses" in kwargs:
        statuses = kwargs["dead_session_statuses"]
        for item in statuses:
            _check("dead_session_statuses[]", item, (int,))
            if not 400 <= item <= 499:
                raise ReplaygateError(
                    f"config: dead_session_statuses[] must be 4xx statuses, got {item}"
                )
        if not statuses:
            raise ReplaygateError("config: dead_session_statuses must name at least one status")
        kwargs["dead_session_statuses"] = tuple(dict.fromkeys(statuses))
    if "min_samples" in kwargs:
        for gate, n in kwargs["min_samples"].items():
            _check(f"min_samples.{gate}", n, (int,))
        kwargs["min_samples"] = dict(kwargs["min_samples"])
    if "sources" in kwargs:
        kwargs["sources"] = _sources(kwargs["sources"])
    for gate, n in kwargs.get("min_samples", {}).items():
        if n < 0:
            raise ReplaygateError(f"config: min_samples.{gate} must be 0 or more, got {n}")
    if "probe_gates" in kwargs and kwargs["probe_gates"] not in PROBE_GATES:
        raise ReplaygateError(
            f"config: probe_gates must be one of {', '.join(PROBE_GATES)}, "
            f"got {kwargs['probe_gates']!r}"
        )
    if "hmac_key_env" in kwargs and not kwargs["hmac_key_env"].strip():
        raise ReplaygateError("config: hmac_key_env must name an environment variable")
    for key in (
        "reconnect_budget_qps",
        "recovery_threshold_s",
        "reinit_window_s",
        "retry_window_s",
        "resend_window_s",
    ):
        if key in kwargs:
            kwargs[key] = float(kwargs[key])
            # NaN compares false with every threshold: it would silently flip gates.
            if not math.isfinite(kwargs[key]) or kwargs[key] <= 0:
                raise ReplaygateError(
                    f"config: {key} must be a finite number above 0, got {kwargs[key]}"
                )
    if "ts_bounds" in kwargs:
        kwargs["ts_bounds"] = _ts_bounds(kwargs["ts_bounds"])
    return Config(**kwargs, source=source)


def _sources(data: dict[str, Any]) -> dict[str, Any]:
    """`[sources.<proxy>.fields]`: the form of each map. Which proxies and adapter keys
    there are is the adapters' (ingest/adapters.py `check_sources`, run when a
    configuration is loaded for a command and before an ingest reads it): the
    configuration sits below them."""
    out = {}
    for proxy, table in data.items():
        _check(f"sources.{proxy}", table, (dict,))
        for key in table:
            if key != "fields":
                raise ReplaygateError(f"config: unknown key {key!r} in [sources.{proxy}]")
        fields_ = table.get("fields", {})
        _check(f"sources.{proxy}.fields", fields_, (dict,))
        for ours, theirs in fields_.items():
            _check(f"sources.{proxy}.fields.{ours}", theirs, (str,))
            if not _LOG_KEY.match(theirs):
                raise ReplaygateError(
                    f"config: sources.{proxy}.fields.{ours} must be a log key of letters, "
                    "digits, '_', '-', '.', ':' or '@'"
                )
        out[proxy] = {"fields": dict(fields_)}
    return out


def _ts_bounds(value: dict[str, Any]) -> dict[str, Any]:
    out = dict(DEFAULT_TS_BOUNDS)
    for key, text in value.items():
        if key not in out:
            raise ReplaygateError(f"config: unknown key {key!r} in [ts_bounds]")
        _check(f"ts_bounds.{key}", text, (str,))
        out[key] = text
    parsed = {}
    for key, text in out.items():
        try:
            parsed[key] = timefmt.parse(text)
        except ValueError:
            raise ReplaygateError(f"config: ts_bounds.{key} is not an RFC 3339 time") from None
        if parsed[key].tzinfo is None:
            raise ReplaygateError(f"config: ts_bounds.{key} needs an offset or Z")
    if not parsed["min"] < parsed["max"]:
        raise ReplaygateError("config: ts_bounds.min must be before ts_bounds.max")
    return out


def load(path: str | os.PathLike[str] | None = None) -> Config:
    """Load the configuration: an explicit path, else ./replaygate.toml, else defaults."""
    if path is None:
        default = Path("replaygate.toml")
        if not default.exists():
            return Config()
        path = default
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReplaygateError(f"config: no such file {p}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ReplaygateError(f"config: {p} is not valid TOML ({exc})") from None
    except UnicodeDecodeError:
        raise ReplaygateError(f"config: {p} is not UTF-8 text") from None
    except IsADirectoryError:
        raise ReplaygateError(f"config: {p} is a folder, not a file") from None
    except OSError as exc:
        raise ReplaygateError(f"config: cannot read {p} ({exc.strerror})") from None
    return from_mapping(data, str(p))
