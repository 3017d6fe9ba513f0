"""Evidence bundles: the statement that lists every file of a bundle with its SHA-256, its
Ed25519 signature, and verification.

A bundle is one flat folder. `statement.json` (an in-toto Statement) names every other
file of the bundle as a subject with its digest, and the inputs the report was computed
from by content digest (inputs are not part of the bundle: rotated or deleted logs are
"not present, digest recorded", never a failure). `statement.sig` is the raw Ed25519
signature of the exact bytes of `statement.json`; `signer.pub` the signer's public key
(PEM). docs/audit.md says how to check all of it without replaygate.

Verification reads only regular files directly inside the bundle folder: a name with a
path in it, or a symbolic link, is a failure and is never opened.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from replaygate.ingest.errors import ReplaygateError

from . import history

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

STATUS_WORD = {
    "pass": "PASSED",
    "insufficient": "WARNED",
    "fail": "FAILED",
    "not_applicable": "SKIPPED",
}


def history_head(data: bytes) -> dict[str, Any]:
    """The head of a bundled decision history (its rows and newest digest), for the
    statement: a copy cut short no longer matches it."""
    rows = [r for r in history._parse(data.decode("utf-8", "replace")) if not r.get("unreadable")]
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
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": n, "digest": {"sha256": d}} for n, d in subjects],
        "predicateType": "https://in-toto.io/attestation/test-result/v0.1",
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


def encode(st: dict[str, Any]) -> bytes:
    return (json.dumps(st, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


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
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise ValueError("is not a regular file")
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


def verify(bundle: Path, public_key: str | None = None, inputs: Sequence[str] = ()) -> Verdict:
    """Check a bundle: the signature, then every file against the statement (in the
    statement's order, so the first problem names the first file that differs), then
    that nothing else is in the folder. Inputs are looked for only where `inputs` says."""
    v = Verdict()
    if not bundle.is_dir():
        v.problems.append(f"{bundle}: not a folder")
        return v
    try:
        raw = read_inside(bundle, STATEMENT)
        st = json.loads(raw)
        subjects = st["subject"]
        assert isinstance(subjects, list)
    except FileNotFoundError:
        v.problems.append(f"{STATEMENT}: missing")
        return v
    except (ValueError, KeyError, TypeError, AssertionError) as exc:
        v.problems.append(
            f"{STATEMENT}: {exc if isinstance(exc, ValueError) else 'not a statement'}"
        )
        return v

    _check_signature(bundle, raw, public_key, v)

    listed = set()
    for subj in subjects:
        name = subj.get("name") if isinstance(subj, dict) else None
        want = (subj.get("digest") or {}).get("sha256") if isinstance(subj, dict) else None
        shown = name if isinstance(name, str) else repr(name)
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
        if name == "decision_history.jsonl":
            rows = history._parse(data.decode("utf-8", "replace"))
            head = (st.get("predicate") or {}).get("decisionHistory")
            broken = history.verify_chain(rows)
            if not broken and isinstance(head, dict) and isinstance(head.get("rows"), int):
                broken = history.against_anchor(
                    [r for r in rows if not r.get("unreadable")], head["rows"], head.get("head")
                )
            if broken:
                v.problems.append(f"{name}: {broken}")
    for extra in sorted(os.listdir(bundle)):
        if extra not in listed and extra not in ENVELOPE:
            v.problems.append(f"{extra}: not in the statement")

    recorded = (st.get("predicate") or {}).get("inputs") or []
    on_disk = _digest_of_inputs(list(inputs)) if inputs else {}
    for item in recorded:
        d = (item.get("digest") or {}).get("sha256")
        entry = {"name": item.get("name"), "sha256": d}
        if not inputs:
            entry["status"] = "not checked"
        elif d in on_disk:
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


def _check_signature(bundle: Path, raw: bytes, public_key: str | None, v: Verdict) -> None:
    from cryptography.exceptions import InvalidSignature

    try:
        sig = read_inside(bundle, SIGNATURE)
    except FileNotFoundError:
        sig = None
    except ValueError as exc:
        v.problems.append(f"{SIGNATURE}: {exc}")
        return
    if sig is None:
        if public_key:
            v.problems.append(f"{SIGNATURE}: missing (the bundle is not signed)")
        else:
            v.notes.append("not signed")
        return
    if public_key:
        try:
            data = Path(public_key).read_bytes()
        except OSError as exc:
            raise ReplaygateError(f"cannot read public key {public_key}: {exc.strerror}") from None
        key, whose = _load_public_key(data, f"public key {public_key}"), "the trusted key"
    else:
        try:
            key = _load_public_key(read_inside(bundle, PUBLIC_KEY), PUBLIC_KEY)
        except FileNotFoundError:
            v.problems.append(f"{PUBLIC_KEY}: missing (give --public-key to check the signature)")
            return
        except (ValueError, ReplaygateError) as exc:
            v.problems.append(f"{PUBLIC_KEY}: {exc}")
            return
        whose = "the key in the bundle only (give --public-key to pin the signer)"
    try:
        key.verify(sig, raw)
    except InvalidSignature:
        v.problems.append(f"{SIGNATURE}: signature does not match {STATEMENT}")
        return
    v.notes.append(f"signature valid, key {fingerprint(key)}, checked against {whose}")
