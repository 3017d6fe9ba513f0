"""HMAC-SHA256 of raw session ids, computed inside DuckDB so raw ids never land.

HMAC(K, m) = H((K ^ opad) || H((K ^ ipad) || m)). The two padded keys are
bound as BLOB parameters; the message stays a column, so hashing is vectorised.
"""

from __future__ import annotations

import hashlib
import hmac
import re

_BLOCK = 64


def padded_keys(key: bytes) -> dict[str, bytes]:
    if len(key) > _BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    return {
        "hmac_ipad": bytes(b ^ 0x36 for b in key),
        "hmac_opad": bytes(b ^ 0x5C for b in key),
    }


def hmac_sql(expr: str) -> str:
    """SQL computing the lowercase hex HMAC of the VARCHAR `expr` (NULL stays NULL)."""
    return (
        f"CASE WHEN ({expr}) IS NOT NULL THEN "
        f"sha256($hmac_opad || unhex(sha256($hmac_ipad || encode({expr})))) END"
    )


def hmac_hex(key: bytes, value: str) -> str:
    """The same function in Python (producers, tests)."""
    return hmac.new(key, value.encode("utf-8"), hashlib.sha256).hexdigest()


# Query parameters that carry a session id (the older HTTP+SSE transport puts it in the
# URL: /messages?session_id=...). Their values are replaced before anything is stored.
URL_SESSION_PARAMS = ("session_id", "sessionId", "mcp-session-id")


def _spelled_any_way(name: str) -> str:
    """A regular expression for a query parameter's name as a server reads it: any
    character may come percent-encoded (`session%5Fid` is `session_id` once decoded),
    in either case (with the `i` flag)."""
    return "".join(
        "(?:"
        + "|".join([re.escape(ch), *sorted({f"%{ord(c):02x}" for c in (ch.lower(), ch.upper())})])
        + ")"
        for ch in name
    )


def redact_url_sql(expr: str) -> str:
    """SQL: the URL text `expr` with the values of URL_SESSION_PARAMS replaced, however
    their names are percent-encoded."""
    names = "|".join(_spelled_any_way(p) for p in URL_SESSION_PARAMS)
    redacted = f"regexp_replace({expr}, '([?&;](?:{names})=)[^&#;]*', '\\1[redacted]', 'gi')"
    # Most paths hold no parameter name of ours: a name spelled out contains "ession",
    # one with an encoded character a '%'. Only those pay for the expression.
    return (
        f"CASE WHEN contains({expr}, '=') AND ({expr} ILIKE '%ession%' OR contains({expr}, '%')) "
        f"THEN {redacted} ELSE {expr} END"
    )
