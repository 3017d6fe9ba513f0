"""Write an evidence bundle: the report in every format, the findings, the configuration,
the decision history and the input manifest, listed with their digests in a statement
that the user's Ed25519 key signs (queries/attest.py has the format and verification).

Writing never follows a symbolic link: each file is written to a new temporary file in
the bundle folder and renamed over its name, which replaces a link instead of writing
where it points. The folder must hold nothing but a previous bundle, and no bundle file
may land on an input or the database.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from replaygate.ingest.errors import ReplaygateError
from replaygate.queries import attest, history
from replaygate.queries.gates import effective_settings

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


def _protected(con, db_path: str | None) -> set[Path]:
    """Files a bundle must never replace: the database and every loaded input."""
    paths = set()
    if db_path and db_path != ":memory:":
        for p in (db_path, f"{db_path}.wal", str(history.file_for_db(db_path))):
            paths.add(Path(p).resolve())
    cols = {r[0] for r in con.execute("DESCRIBE files").fetchall()}
    wanted = "path, abspath" if "abspath" in cols else "path"
    for row in con.execute(f"SELECT {wanted} FROM files").fetchall():
        for p in row:
            if p:
                paths.add(Path(p).resolve())
    return paths


def _prepare(out_dir: Path, protected: set[Path]) -> None:
    if out_dir.is_symlink() and not out_dir.is_dir():
        raise ReplaygateError(f"bundle folder {out_dir} is a link to nothing")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        target = (out_dir / name).resolve()
        if target in protected:
            raise ReplaygateError(f"the bundle would overwrite {target} (an input or the database)")
    others = sorted(n for n in os.listdir(out_dir) if n not in NAMES)
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise ReplaygateError(
            f"bundle folder {out_dir} holds other files ({shown}): give an empty folder"
        )


def _put(out_dir: Path, name: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=out_dir)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        # rename replaces the name itself: a link there is replaced, never written through
        os.replace(tmp, out_dir / name)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _pdf(doc: dict) -> bytes | None:
    if render.chromium() is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.pdf"
        render.to_pdf(doc, out)
        return out.read_bytes()


def _findings(con, stage: str) -> bytes:
    # A relation straight to Arrow (an executed result warns of an extra copy on stderr).
    table = con.sql(
        """SELECT * FROM findings WHERE stage = $s
           ORDER BY detector, ts, session_hmac, stream_id, event_id, dispatch_id""",
        params={"s": stage},
    ).to_arrow_table()
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def contents(doc: dict, con, config, pdf: bool = False) -> tuple[dict[str, bytes], list[str]]:
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
    path = history.file_for(con)
    history.checked(con, path)  # a broken history is not bundled as if it held
    try:
        files[HISTORY] = path.read_bytes() if path else b""
    except FileNotFoundError:
        files[HISTORY] = b""
    return files, omitted


def bundle(
    doc: dict,
    con,
    config,
    out_dir: Path,
    *,
    sign_key: str | None = None,
    db_path: str | None = None,
    pdf: bool = False,
) -> list[str]:
    """Write the bundle; the names written, the statement (and signature) last."""
    key = attest.load_private_key(sign_key) if sign_key else None
    _prepare(out_dir, _protected(con, db_path))
    files, omitted = contents(doc, con, config, pdf=pdf)
    for name in NAMES:
        # A file of an earlier bundle that this one does not have would not verify.
        if name not in files and os.path.lexists(out_dir / name):
            os.unlink(out_dir / name)
    for name, data in files.items():
        _put(out_dir, name, data)
    subjects = [(n, attest.sha256_bytes(files[n])) for n in files]
    raw = attest.encode(attest.statement(doc, subjects, omitted, files.get(HISTORY)))
    _put(out_dir, attest.STATEMENT, raw)
    written = [*files, attest.STATEMENT]
    if key is not None:
        _put(out_dir, attest.SIGNATURE, attest.sign(raw, key))
        _put(out_dir, attest.PUBLIC_KEY, attest.public_pem(key.public_key()))
        written += [attest.SIGNATURE, attest.PUBLIC_KEY]
    return written
