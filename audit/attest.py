"""Evidence bundles: the statement that lists every file of a bundle with its SHA-256, its
Ed25519 signature, and verification.

A bundle is one flat folder. `statement.json` (an in-toto Statement) names every other
file of the bundle as a subject with its digest, and the inputs the report was computed
from by content digest (inputs are not part of the bundle: rotated or deleted logs are
"not present, digest recorded", never a failure). `statement.sig` is the raw Ed25519
signature of the exact bytes of `statement.json`; `signer.pub` the signer's public key
(PEM). docs/audit.md says how to check all of it without replaygate.

Verification reads only regular files directly inside the bundle folder: a name with a
path in it, a symbolic link or a folder is a failure and is never read. A bundle
verifies only when it is signed by a trusted key: one given with `--public-key`, or
listed in the file(s) `$REPLAYGATE_TRUSTED_KEYS` names. `signer.pub` inside the bundle
is never trusted (anyone who edits a bundle can re-sign it and replace it); an
unsigned bundle, or one signed by any other key, does not verify. The statement must be
one replaygate writes: its type, its predicate's decision, stage and gates, and a
report whose decision and stage agree with them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from replaygate.core.errors import ReplaygateError
from replaygate.queries.outcome import Decision, Status

from . import decisionlog

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

STATEMENT = "statement.json"
SIGNATURE = "statement.sig"
PUBLIC_KEY = "signer.pub"
# Files a bundle may hold besides the subjects the statement lists.
ENVELOPE = (STATEMENT, SIGNATURE, PUBLIC_KEY)
BUNDLE_FORMAT = "2"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
TRUSTED_KEYS_ENV = "REPLAYGATE_TRUSTED_KEYS"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


# -- keys ------------------------------------------------------------------------------


def load_private_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """An Ed25519 private key from a PEM (PKCS#8) or OpenSSH file, unencrypted."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ReplaygateError(f"cannot read signing key {path}: {exc.strerror}") from None
    try:
        if data.startswith(b"-----BEGIN OPENSSH"):
            key: object = serialization.load_ssh_private_key(data, password=None)
        else:
            key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise ReplaygateError(
            f"signing key {path} is not an unencrypted PEM or OpenSSH private key "
            f"({str(exc).splitlines()[0]})"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ReplaygateError(f"signing key {path} is not an Ed25519 key")
    return key


def _load_public_key(data: bytes, what: str) -> Ed25519PublicKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        if data.startswith(b"ssh-ed25519"):
            key: object = serialization.load_ssh_public_key(data)
        else:
            key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise ReplaygateError(f"{what} is not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ReplaygateError(f"{what} is not an Ed25519 public key")
    return key


def load_trusted_keys(path: str | os.PathLike[str]) -> list[Ed25519PublicKey]:
    """The Ed25519 public keys of a key file: one PEM key, or a trusted-keys file of
    several (PEM blocks and `ssh-ed25519 ...` lines; blank and `#` lines ignored)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ReplaygateError(f"cannot read public key {path}: {exc.strerror}") from None
    blocks: list[bytes] = []
    pem: list[bytes] = []
    for line in data.splitlines(keepends=True):
        text = line.strip()
        if pem:
            pem.append(line)
            if text.startswith(b"-----END"):
                blocks.append(b"".join(pem))
                pem = []
        elif text.startswith(b"-----BEGIN"):
            pem = [line]
        elif text and not text.startswith(b"#"):
            blocks.append(text)
    if pem or not blocks:
        raise ReplaygateError(f"public key {path}: no key in it, or a PEM block not closed")
    return [_load_public_key(b, f"public key {path}") for b in blocks]


def trusted_keys(given: Sequence[str] = ()) -> tuple[list[Ed25519PublicKey], str]:
    """The keys a bundle's signature may match, and where they came from: the files
    given (`--public-key`), else those `$REPLAYGATE_TRUSTED_KEYS` names (separated by
    `os.pathsep`), else none."""
    names = list(given)
    where = "--public-key"
    if not names:
        names = [p for p in os.environ.get(TRUSTED_KEYS_ENV, "").split(os.pathsep) if p]
        where = f"${TRUSTED_KEYS_ENV}"
    return [k for n in names for k in load_trusted_keys(n)], where


def public_pem(key: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def fingerprint(public_key: Ed25519PublicKey) -> str:
    """SHA256:<base64> of the raw public key, as OpenSSH shows an Ed25519 key's."""
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    blob = b"".join(
        len(x).to_bytes(4, "big") + x for x in (b"ssh-ed25519", raw)
    )  # the OpenSSH wire form, so `ssh-keygen -lf` shows the same
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


# -- the statement ---------------------------------------------------------------------

STATUS_WORD = {s: s.verdict for s in Status}


def history_head(data: bytes) -> dict[str, Any]:
    """The head of a bundled decision history (its rows and newest digest), for the
    statement: a copy cut short no longer matches it."""
    rows = [
        r
        for r in decisionlog.parse_rows(data.decode("utf-8", "replace"))
        if not r.get("unreadable")
    ]
    return {"rows": len(rows), "head": rows[-1].get("sha256") if rows else None}


def statement(
    doc: dict[str, Any],
    subjects: list[tuple[str, str]],
    omitted: list[str],
    history_file: bytes | None = None,
) -> dict[str, Any]:
    """An in-toto test-result statement: the bundle's files, the inputs by content
    digest, the gates and the decision, and the head of the bundled history."""
    by: dict[str, list[str]] = {"PASSED": [], "WARNED": [], "FAILED": [], "SKIPPED": []}
    for g in doc["gates"]:
        by[STATUS_WORD[g["status"]]].append(g["id"])
    result = "FAILED" if by["FAILED"] else ("WARNED" if by["WARNED"] else "PASSED")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": n, "digest": {"sha256": d}} for n, d in subjects],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "result": result,
            "configuration": [
                {
                    "name": "replaygate configuration",
                    "digest": {"sha256": doc["configuration"]["sha256"]},
                }
            ],
            "passedTests": by["PASSED"],
            "warnedTests": by["WARNED"],
            "failedTests": by["FAILED"],
            "gates": {g["id"]: STATUS_WORD[g["status"]] for g in doc["gates"]},
            "decision": doc["decision"],
            "stage": doc["scope"]["stage"],
            "asOf": doc["as_of"],
            "tool": doc["tool"],
            "bundleFormat": BUNDLE_FORMAT,
            # Inputs by content: where they were is informative only.
            "inputs": [
                {"name": f["path"], "digest": {"sha256": f["sha256"]}, "bytes": f["bytes"]}
                for f in doc["inputs"]["files"]
            ],
            "notIncluded": omitted,
            **({"decisionHistory": history_head(history_file)} if history_file is not None else {}),
        },
    }


def encode(statement: dict[str, Any]) -> bytes:
    return (json.dumps(statement, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def sign(data: bytes, key: Ed25519PrivateKey) -> bytes:
    return key.sign(data)


# -- verification ----------------------------------------------------------------------


@dataclass
class Verdict:
    problems: list[str] = field(default_factory=list)  # each fails the bundle, in order
    notes: list[str] = field(default_factory=list)  # what was and was not checked
    files: int = 0
    inputs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _plain_name(name: object) -> TypeGuard[str]:
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and "\x00" not in name
    )


def read_inside(folder: Path, name: object) -> bytes:
    """The bytes of a regular file directly inside `folder`, never through a link.

    Raises FileNotFoundError, or ValueError saying why the name is refused."""
    if not _plain_name(name):
        raise ValueError("names a path outside the bundle")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    dir_fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        try:
            fd = os.open(name, flags, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (40, 62):  # ELOOP: the name is a symbolic link
                raise ValueError("is a symbolic link") from None
            if isinstance(exc, FileNotFoundError):
                raise
            raise ValueError(f"cannot be read ({exc.strerror})") from None
        # Judged on the descriptor before any read: a folder (or a FIFO) is named, not
        # opened as a file.
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ValueError("is not a regular file")
        with os.fdopen(fd, "rb") as fh:
            return fh.read()
    finally:
        os.close(dir_fd)


def _digest_of_inputs(paths: list[str]) -> dict[str, str]:
    """sha256 -> path for the files the user named (folders walked, links not followed)."""
    found: dict[str, str] = {}
    for p in paths:
        root = Path(p)
        candidates = [root] if root.is_file() else sorted(x for x in root.rglob("*"))
        for f in candidates:
            if f.is_symlink() or not f.is_file():
                continue
            try:
                found.setdefault(sha256_file(f), str(f))
            except OSError:
                continue
    return found


_DECISIONS = tuple(d.value for d in Decision)


def _statement_problems(statement: Any) -> list[str]:
    """What makes a statement not one replaygate wrote (an empty predicate, another
    statement type, a subject that is not a name and a digest)."""
    if not isinstance(statement, dict):
        return [f"{STATEMENT}: not a statement"]
    out = []
    if statement.get("_type") != STATEMENT_TYPE:
        out.append(f"{STATEMENT}: _type is not {STATEMENT_TYPE}")
    if statement.get("predicateType") != PREDICATE_TYPE:
        out.append(f"{STATEMENT}: predicateType is not {PREDICATE_TYPE}")
    subjects = statement.get("subject")
    if not isinstance(subjects, list) or not subjects:
        out.append(f"{STATEMENT}: lists no subject")
    elif not all(
        isinstance(s, dict)
        and isinstance(s.get("name"), str)
        and isinstance(s.get("digest"), dict)
        and isinstance(s["digest"].get("sha256"), str)
        for s in subjects
    ):
        out.append(f"{STATEMENT}: a subject is not a name with a sha256 digest")
    p = statement.get("predicate")
    if not isinstance(p, dict) or not p:
        return [*out, f"{STATEMENT}: the predicate is empty"]
    wants: dict[str, Callable[[Any], bool]] = {
        "decision": lambda x: x in _DECISIONS,
        "result": lambda x: x in STATUS_WORD.values() and x != "SKIPPED",
        "stage": lambda x: isinstance(x, str) and x != "",
        "gates": lambda x: isinstance(x, dict) and len(x) > 0,
        "asOf": lambda x: isinstance(x, str) and x != "",
        "bundleFormat": lambda x: x == BUNDLE_FORMAT,
        "inputs": lambda x: isinstance(x, list),
    }
    bad = [k for k, ok in wants.items() if not ok(p.get(k))]
    if bad:
        out.append(f"{STATEMENT}: the predicate lacks a valid " + ", ".join(bad))
    return out


def _agrees_with_report(data: bytes, predicate: dict[str, Any]) -> str | None:
    """Why report.json and the statement's predicate disagree (decision, stage), or None."""
    try:
        doc = json.loads(data)
        decision, stage = doc["decision"], doc["scope"]["stage"]
    except (ValueError, KeyError, TypeError):
        return "report.json: not a report"
    if (decision, stage) != (predicate.get("decision"), predicate.get("stage")):
        return (
            f"report.json: says {stage} {decision}, the statement "
            f"{predicate.get('stage')} {predicate.get('decision')}"
        )
    return None


def verify(
    bundle: Path, public_key: str | Sequence[str] | None = None, inputs: Sequence[str] = ()
) -> Verdict:
    """Check a bundle: the statement, its signature by a trusted key (`public_key`: key
    files; none: `$REPLAYGATE_TRUSTED_KEYS`), then every file against the statement (in
    the statement's order, so the first problem names the first file that differs), then
    that nothing else is in the folder. Inputs are looked for only where `inputs` says."""
    v = Verdict()
    if not bundle.is_dir():
        v.problems.append(f"{bundle}: not a folder")
        return v
    try:
        raw = read_inside(bundle, STATEMENT)
        statement = json.loads(raw)
    except FileNotFoundError:
        v.problems.append(f"{STATEMENT}: missing")
        return v
    except ValueError as exc:
        v.problems.append(f"{STATEMENT}: {exc}")
        return v
    malformed = _statement_problems(statement)
    if malformed:
        v.problems += malformed
        return v
    subjects = statement["subject"]
    predicate = statement["predicate"]

    given = [public_key] if isinstance(public_key, str) else list(public_key or ())
    _check_signature(bundle, raw, given, v)

    listed: set[str] = set()
    for subj in subjects:
        name, want = subj["name"], subj["digest"]["sha256"]
        shown = name
        listed.add(name)
        try:
            data = read_inside(bundle, name)
        except FileNotFoundError:
            v.problems.append(f"{shown}: missing")
            continue
        except ValueError as exc:
            v.problems.append(f"{shown}: {exc}")
            continue
        if sha256_bytes(data) != want:
            v.problems.append(f"{shown}: content changed")
            continue
        v.files += 1
        if name == "report.json":
            disagree = _agrees_with_report(data, predicate)
            if disagree:
                v.problems.append(disagree)
        if name == "decision_history.jsonl":
            rows = decisionlog.parse_rows(data.decode("utf-8", "replace"))
            head = predicate.get("decisionHistory")
            broken = decisionlog.verify_chain(rows)
            if not broken and isinstance(head, dict) and isinstance(head.get("rows"), int):
                broken = decisionlog.against_anchor(
                    [r for r in rows if not r.get("unreadable")], head["rows"], head.get("head")
                )
            if broken:
                v.problems.append(f"{name}: {broken}")
    if "report.json" not in listed:
        v.problems.append("report.json: not in the statement (a bundle holds its report)")
    for extra in sorted(os.listdir(bundle)):
        if extra not in listed and extra not in ENVELOPE:
            v.problems.append(f"{extra}: not in the statement")

    recorded = [i for i in predicate["inputs"] if isinstance(i, dict)]
    on_disk = _digest_of_inputs(list(inputs)) if inputs else {}
    for item in recorded:
        digest = item.get("digest")
        d = digest.get("sha256") if isinstance(digest, dict) else None
        entry = {"name": item.get("name"), "sha256": d}
        if not inputs:
            entry["status"] = "not checked"
        elif isinstance(d, str) and d in on_disk:
            entry["status"] = f"present at {on_disk[d]}"
        else:
            entry["status"] = "not present, digest recorded"
        v.inputs.append(entry)
    if recorded and not inputs:
        v.notes.append(
            f"{len(recorded)} inputs recorded by digest; not looked for (--inputs PATH checks)"
        )
    elif recorded:
        present = sum(e["status"].startswith("present") for e in v.inputs)
        v.notes.append(
            f"inputs: {present} of {len(recorded)} present; the others not present, digest recorded"
        )
    return v


def _check_signature(bundle: Path, raw: bytes, given: list[str], v: Verdict) -> None:
    """A bundle is signed by a trusted key, or it fails: unsigned, no trusted key to check
    with, or a key nobody trusted (the bundle's own signer.pub is only named)."""
    from cryptography.exceptions import InvalidSignature

    try:
        sig = read_inside(bundle, SIGNATURE)
    except FileNotFoundError:
        v.problems.append(
            f"{SIGNATURE}: missing (the bundle is not signed; sign it with --sign-key)"
        )
        return
    except ValueError as exc:
        v.problems.append(f"{SIGNATURE}: {exc}")
        return
    keys, where = trusted_keys(given)
    for key in keys:
        try:
            key.verify(sig, raw)
        except InvalidSignature:
            continue
        v.notes.append(f"signature valid, key {fingerprint(key)}, a trusted key ({where})")
        return
    # Not by a trusted key. Name the key the bundle claims, if it signed this.
    try:
        claimed: Ed25519PublicKey | None = _load_public_key(
            read_inside(bundle, PUBLIC_KEY), PUBLIC_KEY
        )
    except (FileNotFoundError, ValueError, ReplaygateError):
        claimed = None
    if claimed is not None:
        try:
            claimed.verify(sig, raw)
        except InvalidSignature:
            claimed = None
    if not keys:
        v.problems.append(
            f"{SIGNATURE}: no trusted key to check it with: give --public-key or set "
            f"${TRUSTED_KEYS_ENV} (the bundle's own {PUBLIC_KEY} proves nothing)"
            + (f"; it was signed by {fingerprint(claimed)}" if claimed is not None else "")
        )
    elif claimed is not None:
        v.problems.append(
            f"{SIGNATURE}: signed by {fingerprint(claimed)}, which is not a trusted key ({where})"
        )
    else:
        v.problems.append(f"{SIGNATURE}: signature does not match {STATEMENT}")
