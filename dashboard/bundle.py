"""Write an evidence bundle: the report in every format, the findings, the configuration,
the decision history and the input manifest, listed with their digests in a statement
that the user's Ed25519 key signs (audit/attest.py has the format and verification).

Every file goes through the output guard (audit/outputs.py): a bundle file that is a
symbolic link, or that would land on the database, its history, the configuration or
an input, is refused before anything is written; each file is written whole and
renamed over its name. The folder must hold nothing but a previous bundle.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from replaygate.api import (
    Config,
    ReplaygateError,
    attest,
    decisionlog,
    effective_settings,
    outputs,
    staging,
)

from . import report as render

REPORTS = ("md", "json", "html", "pdf")
FINDINGS = "findings.parquet"
MANIFEST = "manifest.json"
CONFIGURATION = "configuration.json"
HISTORY = "decision_history.jsonl"
PDF_NOT_REQUESTED = "not requested (report --bundle DIR --pdf)"
# Every name a bundle may hold; anything else in the folder is not ours to replace.
NAMES = (*(f"report.{f}" for f in REPORTS), FINDINGS, MANIFEST, CONFIGURATION, HISTORY)
NAMES += attest.ENVELOPE


def _prepare(out_dir: Path, guard: outputs.Guard) -> None:
    if out_dir.is_symlink() and not out_dir.is_dir():
        raise ReplaygateError(f"bundle folder {out_dir} is a link to nothing")
    out_dir.mkdir(parents=True, exist_ok=True)
    # Every name judged before anything is written: a refusal leaves no half bundle.
    for name in NAMES:
        guard.check(out_dir / name)
    others = sorted(n for n in os.listdir(out_dir) if n not in NAMES)
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise ReplaygateError(
            f"bundle folder {out_dir} holds other files ({shown}): give an empty folder"
        )


def _pdf(doc: dict[str, Any]) -> bytes | None:
    if render.chromium() is None:
        return None
    with staging.folder(tempfile.gettempdir(), render.PDF_STAGING) as tmp:
        out = Path(tmp) / "report.pdf"
        render.to_pdf(doc, out)
        return out.read_bytes()


def _findings(con: duckdb.DuckDBPyConnection, stage: str) -> bytes:
    # A relation straight to Arrow (an executed result warns of an extra copy on stderr).
    table = con.sql(
        """SELECT * FROM findings WHERE stage = $s
           ORDER BY detector, ts, session_hmac, generation, stream_id, event_id, dispatch_id,
                    idempotency_key, severity, CAST(detail AS VARCHAR)""",
        params={"s": stage},
    ).to_arrow_table()
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def contents(
    doc: dict[str, Any], con: duckdb.DuckDBPyConnection, config: Config, pdf: bool = False
) -> tuple[dict[str, bytes], list[str]]:
    """Every file of the bundle but the statement, and what was left out and why. The
    PDF only when asked for: printing it starts a browser and takes seconds."""
    files: dict[str, bytes] = {
        "report.md": render.to_markdown(doc).encode(),
        "report.json": render.to_json(doc).encode(),
        "report.html": render.to_html(doc).encode(),
    }
    omitted = []
    printed = _pdf(doc) if pdf else None
    if not pdf:
        omitted.append(f"report.pdf: {PDF_NOT_REQUESTED}")
    elif printed is None:
        omitted.append("report.pdf: chromium is not installed")
    else:
        files["report.pdf"] = printed
    files[FINDINGS] = _findings(con, doc["scope"]["stage"])
    files[MANIFEST] = (json.dumps(doc["inputs"], indent=2, sort_keys=True) + "\n").encode()
    # Exactly the bytes the report's configuration digest is computed over.
    settings = effective_settings(config)["settings"]
    files[CONFIGURATION] = json.dumps(settings, sort_keys=True).encode()
    path = decisionlog.file_for(con)
    decisionlog.checked(con, path)  # a broken history is not bundled as if it held
    try:
        files[HISTORY] = path.read_bytes() if path else b""
    except FileNotFoundError:
        files[HISTORY] = b""
    return files, omitted


def bundle(
    doc: dict[str, Any],
    con: duckdb.DuckDBPyConnection,
    config: Config,
    out_dir: Path,
    *,
    sign_key: str | None = None,
    db_path: str | None = None,
    pdf: bool = False,
) -> list[str]:
    """Write the bundle; the names written, the statement (and signature) last."""
    key = attest.load_private_key(sign_key) if sign_key else None
    guard = outputs.for_database(db_path, con, config.source)
    _prepare(out_dir, guard)
    files, omitted = contents(doc, con, config, pdf=pdf)
    for name in NAMES:
        # A file of an earlier bundle that this one does not have would not verify.
        if name not in files and os.path.lexists(out_dir / name):
            os.unlink(out_dir / name)
    for name, data in files.items():
        guard.write_bytes(out_dir / name, data)
    subjects = [(n, attest.sha256_bytes(files[n])) for n in files]
    raw = attest.encode(attest.statement(doc, subjects, omitted, files.get(HISTORY)))
    guard.write_bytes(out_dir / attest.STATEMENT, raw)
    written = [*files, attest.STATEMENT]
    if key is not None:
        guard.write_bytes(out_dir / attest.SIGNATURE, attest.sign(raw, key))
        guard.write_bytes(out_dir / attest.PUBLIC_KEY, attest.public_pem(key.public_key()))
        written += [attest.SIGNATURE, attest.PUBLIC_KEY]
    return written
