"""Render docs/contract.md from the declarative contract and the reader and adapter
registries (`python -m replaygate.ingest.contractdoc`)."""

from __future__ import annotations

import sys
from pathlib import Path

from replaygate.core.contract import RECORD_TYPES, SQL_TYPES

from .adapters import PROXIES
from .readers import formats_doc

HEADER = """# Input contract (v1)

Generated from `core/contract.py` and the format and proxy registries
(`ingest/readers.py`, `ingest/adapters.py`) by `python -m replaygate.ingest.contractdoc`; a
test fails if this file and the code disagree. What each record means is in the seeds
(shared spec); this page is what replaygate accepts and how it stores it.

- Formats (folders are read recursively):
{formats}
- Proxy access logs (`proxy*.jsonl`, any `*.log`): each line is read by its shape, as a
  contract record or one of these proxies' (`--source {sources}` reads every line as
  one proxy's, `--source contract` as contract records); docs/sources.md gives the
  formats:
{proxies}
- A record's type is its `schema` field; without one, the file-name prefix decides
  (`sessions`, `streams`, `events`, `inbox`, `dispatches`, `proxy`, `rollout`). One
  JSON Lines file may mix types.
- `ts` fields: RFC 3339 text (`2026-11-29T07:45:01.123Z`; text without an offset is
  read as UTC) or integer epoch milliseconds; native Parquet timestamps too. Stored as
  UTC TIMESTAMPTZ with millisecond precision.
- Absent, null and empty text all mean null. Fields outside the contract are ignored.
- Each stored row keeps `file_id` (see table `files`) and `pos`: its line in a JSON
  Lines file, its data row (1-based, header excluded) in CSV and Parquet.
- `proxy.session_id` (a raw `Mcp-Session-Id`) is never stored: ingest replaces it by
  its HMAC-SHA256 (key from the env var named by `hmac_key_env`, default
  `REPLAYGATE_HMAC_KEY`) in `session_hmac`, and sets `raw_session_id = true` so the
  `raw_session_id_logged` finding can name the file. Without a key the id is dropped,
  with a warning, and `files.ids_dropped` counts those rows; once the key is set,
  ingesting the same files again reads them again and hashes the ids (rows replaced).
- Rows that break the contract go to table `quarantine` (file, line or row, record
  type, reason) and are counted in the ingest summary; they never stop the rest. That
  includes lines that are not JSON, lines with invalid UTF-8 or over 32 MB, malformed CSV
  rows, and the break of a truncated or corrupt gzip stream (the complete lines before
  it are loaded; the break, with any partial line, is one row). The quarantine keeps no
  content of the row: it may hold secrets.
- Lines end at LF (a CRLF's CR and a bare CR inside a JSON line are whitespace); a line
  of only spaces, tabs and CRs is blank. For every file read, rows loaded + quarantined
  + blank = lines (CSV and Parquet: data rows); `ingest --json` reports `lines` and
  `blank` per file.
- Rollout stages are scoped by `release`: a stage runs from its `start` to the next
  `start` of the same release, or its own `rollback` or `complete`, and is named
  `stage@release` where the gates, findings and reports show it (the name alone when the
  log names no release). A session whose `release` the log names counts for that
  release's stage in whose window a record falls; otherwise its `rollout_stage` decides.
"""


def render() -> str:
    proxies = "\n".join(f"  - {p.title}: {p.doc}." for p in PROXIES.values())
    out = [HEADER.format(formats=formats_doc(), proxies=proxies, sources="|".join(PROXIES))]
    for rt in RECORD_TYPES:
        out.append(f"\n## `{rt.schema}` — {rt.title}\n")
        out.append(f"Table `{rt.table}`; files named `{rt.table}*`.\n")
        out.append("| field | type | stored as | required | values / meaning |")
        out.append("|---|---|---|---|---|")
        for f in rt.fields:
            meaning = ", ".join(f"`{e}`" for e in f.enum) if f.enum else f.doc
            stored = "not stored (hashed)" if f.secret else SQL_TYPES[f.type]
            out.append(
                f"| `{f.name}` | {f.type} | {stored} | {'yes' if f.required else ''} | {meaning} |"
            )
    return "\n".join(out) + "\n"


def main() -> None:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/contract.md")
    target.write_text(render(), encoding="utf-8")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
