"""HMAC-SHA256 of raw session ids, computed inside DuckDB so raw ids never land.

HMAC(K, m) = H((K ^ opad) || H((K ^ ipad) || m)). The two padded keys are
bound as BLOB parameters; the message stays a column, so hashing is vectorised.
"""

from __future__ import annotations

import hashlib
import hmac

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


def redact_url_sql(expr: str) -> str:
    """SQL: the URL text `expr` with the values of URL_SESSION_PARAMS replaced."""
    names = "|".join(p.replace("-", "\\-") for p in URL_SESSION_PARAMS)
    return f"regexp_replace({expr}, '([?&;](?:{names})=)[^&#;]*', '\\1[redacted]', 'gi')"
