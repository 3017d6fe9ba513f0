"""Evidence bundles: every file listed with its digest, an Ed25519 signature, tamper
detection naming the file, inputs by content, and no path outside the bundle."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from replaygate.audit import attest
from replaygate.dashboard.bundle import PDF_NOT_REQUESTED
from replaygate.dashboard.report import chromium

from .conftest import SAMPLE, SAMPLE_CONF
from .conftest import run_cli as run

ENVELOPE = {"statement.json", "statement.sig", "signer.pub"}


def _keypair(folder: Path, name: str) -> tuple[Path, Path]:
    key = Ed25519PrivateKey.generate()
    priv, pub = folder / f"{name}.pem", folder / f"{name}.pub"
    priv.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pub.write_bytes(attest.public_pem(key.public_key()))
    return priv, pub


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """A bundle of the sample fleet, built from inputs in a folder of their own, with a
    recorded decision, signed with a fresh key."""
    tmp = tmp_path_factory.mktemp("bundle")
    inputs = tmp / "logs"
    shutil.copytree(SAMPLE, inputs)
    db = tmp / "fleet.duckdb"
    conf = str(inputs / "replaygate.toml")
    r = run("ingest", str(inputs), "--db", str(db), "--config", conf)
    assert r.returncode == 0, r.stderr
    r = run("gates", "--db", str(db), "--config", conf, "--all-stages", "--record")
    assert r.returncode == 3, r.stderr
    priv, pub = _keypair(tmp, "signer")
    out = tmp / "evidence"
    r = run(
        "report", "--db", str(db), "--config", conf, "--stage", "write-10pct",
        "--bundle", str(out), "--sign-key", str(priv),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return {"tmp": tmp, "bundle": out, "pub": pub, "priv": priv, "db": db, "inputs": inputs}


def _copy(signed, tmp_path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(signed["bundle"], dst, symlinks=True)
    return dst


def _verify(folder, pub=None, inputs=()):
    return attest.verify(folder, public_key=str(pub) if pub else None, inputs=list(inputs))


def test_statement_lists_every_file_with_its_digest(signed):
    out = signed["bundle"]
    names = set(os.listdir(out))
    expected = {
        "report.md",
        "report.json",
        "report.html",
        "findings.parquet",
        "manifest.json",
        "configuration.json",
        "decision_history.jsonl",
    }
    assert expected <= names
    st = json.loads((out / "statement.json").read_bytes())
    listed = {s["name"]: s["digest"]["sha256"] for s in st["subject"]}
    assert set(listed) == names - ENVELOPE
    for name, digest in listed.items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    # The fixture asks for no PDF: a bundle prints one only on request.
    assert "report.pdf" not in names
    assert st["predicate"]["notIncluded"] == [f"report.pdf: {PDF_NOT_REQUESTED}"]
    report = json.loads((out / "report.json").read_text())
    # The configuration file is exactly what the report's configuration digest covers.
    assert listed["configuration.json"] == report["configuration"]["sha256"]
    assert st["predicate"]["decision"] == report["decision"] == "ROLLBACK"
    inputs = {i["name"]: i["digest"]["sha256"] for i in st["predicate"]["inputs"]}
    assert inputs == {f["path"]: f["sha256"] for f in report["inputs"]["files"]}
    history = (out / "decision_history.jsonl").read_text().splitlines()
    assert len(history) == 4 and all(json.loads(h)["source"] == "gates" for h in history)


def test_verifies_with_the_signers_key(signed):
    r = run("report", "--verify", str(signed["bundle"]), "--public-key", str(signed["pub"]))
    assert r.returncode == 0, r.stderr
    assert "bundle verified" in r.stdout
    assert "signature valid" in r.stderr and "a trusted key (--public-key)" in r.stderr


def _subjects(signed) -> list[str]:
    st = json.loads((signed["bundle"] / "statement.json").read_bytes())
    return [s["name"] for s in st["subject"]]


def test_editing_any_file_fails_naming_it(signed, tmp_path):
    for name in _subjects(signed):
        b = _copy(signed, tmp_path / name)
        data = bytearray((b / name).read_bytes())
        data[len(data) // 2] ^= 0x01
        (b / name).write_bytes(bytes(data))
        v = _verify(b, signed["pub"])
        assert v.problems == [f"{name}: content changed"], name


def test_removing_any_file_fails_naming_it(signed, tmp_path):
    for name in [*_subjects(signed), "statement.json"]:
        b = _copy(signed, tmp_path / name)
        (b / name).unlink()
        v = _verify(b, signed["pub"])
        assert v.problems and v.problems[0] == f"{name}: missing", (name, v.problems)


def test_a_forged_report_fails_on_the_command_line(signed, tmp_path):
    b = _copy(signed, tmp_path)
    html = (b / "report.html").read_text()
    (b / "report.html").write_text(html.replace("ROLLBACK", "PROCEED"))
    r = run("report", "--verify", str(b), "--public-key", str(signed["pub"]))
    assert r.returncode == 1
    assert "bundle does not verify: report.html: content changed" in r.stderr


def test_a_changed_signature_fails(signed, tmp_path):
    b = _copy(signed, tmp_path / "sig")
    sig = bytearray((b / "statement.sig").read_bytes())
    sig[0] ^= 0x01
    (b / "statement.sig").write_bytes(bytes(sig))
    assert _verify(b, signed["pub"]).problems == [
        "statement.sig: signature does not match statement.json"
    ]
    assert _verify(b).problems == [
        "statement.sig: no trusted key to check it with: give --public-key or set "
        "$REPLAYGATE_TRUSTED_KEYS (the bundle's own signer.pub proves nothing)"
    ]

    # A statement re-written to match edited files: the signature no longer holds.
    b = _copy(signed, tmp_path / "restated")
    st = json.loads((b / "statement.json").read_bytes())
    (b / "report.md").write_text("# all good: PROCEED\n")
    for s in st["subject"]:
        if s["name"] == "report.md":
            s["digest"]["sha256"] = hashlib.sha256(b"# all good: PROCEED\n").hexdigest()
    (b / "statement.json").write_bytes(attest.encode(st))
    assert _verify(b, signed["pub"]).problems == [
        "statement.sig: signature does not match statement.json"
    ]

    # Re-signed with another key (and its signer.pub replaced): an unknown key is
    # refused, named by its fingerprint, with the signer's key and without any key.
    other_priv, other_pub = _keypair(tmp_path, "other")
    key = attest.load_private_key(other_priv)
    (b / "statement.sig").write_bytes(key.sign((b / "statement.json").read_bytes()))
    (b / "signer.pub").write_bytes(other_pub.read_bytes())
    forger = attest.fingerprint(key.public_key())
    assert _verify(b, signed["pub"]).problems == [
        f"statement.sig: signed by {forger}, which is not a trusted key (--public-key)"
    ]
    alone = _verify(b)
    assert not alone.ok and "no trusted key" in alone.problems[0]
    assert alone.problems[0].endswith(f"it was signed by {forger}")
    r = run("report", "--verify", str(b))
    assert r.returncode == 1 and "bundle verified" not in r.stdout + r.stderr
    # The forger's key among several trusted ones verifies; that is what trusting is.
    both = tmp_path / "trusted-keys"
    both.write_bytes(b"# CI and another\n" + signed["pub"].read_bytes() + other_pub.read_bytes())
    assert _verify(b, both).ok

    # No signature: never verifies, with or without a key.
    b = _copy(signed, tmp_path / "unsigned")
    (b / "statement.sig").unlink()
    unsigned = ["statement.sig: missing (the bundle is not signed; sign it with --sign-key)"]
    assert _verify(b, signed["pub"]).problems == unsigned
    assert _verify(b).problems == unsigned
    r = run("report", "--verify", str(b))
    assert r.returncode == 1 and "bundle verified" not in r.stdout


def test_trusted_keys_from_the_environment_and_a_keys_file(signed, tmp_path):
    """Keys pinned once for a machine: $REPLAYGATE_TRUSTED_KEYS names trusted-keys files
    (PEM blocks and OpenSSH `ssh-ed25519` lines); --public-key, when given, replaces it."""
    from cryptography.hazmat.primitives import serialization as ser

    _, other_pub = _keypair(tmp_path, "other")
    signer = attest.load_private_key(signed["priv"]).public_key()
    ssh_line = signer.public_bytes(ser.Encoding.OpenSSH, ser.PublicFormat.OpenSSH)
    keys = tmp_path / "trusted"
    keys.write_bytes(b"# release signers\n\n" + other_pub.read_bytes() + ssh_line + b" ci\n")
    bundle = str(signed["bundle"])
    env = {attest.TRUSTED_KEYS_ENV: str(tmp_path / "absent")}
    r = run("report", "--verify", bundle, env=env)
    assert r.returncode == 1 and "cannot read public key" in r.stderr
    env = {attest.TRUSTED_KEYS_ENV: str(keys)}
    r = run("report", "--verify", bundle, env=env)
    assert r.returncode == 0, r.stderr
    assert "a trusted key ($REPLAYGATE_TRUSTED_KEYS)" in r.stderr
    # --public-key given: only those keys count.
    r = run("report", "--verify", bundle, "--public-key", str(other_pub), env=env)
    assert r.returncode == 1 and "which is not a trusted key (--public-key)" in r.stderr
    # Not a key file at all: one line.
    junk = tmp_path / "junk"
    junk.write_text("hello\n")
    r = run("report", "--verify", bundle, "--public-key", str(junk))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_folder_named_as_a_subject_is_a_problem_not_a_crash(signed, tmp_path):
    b = _copy(signed, tmp_path / "folder")
    (b / "report.md").unlink()
    (b / "report.md").mkdir()
    assert _verify(b, signed["pub"]).problems == ["report.md: is not a regular file"]
    r = run("report", "--verify", str(b), "--public-key", str(signed["pub"]))
    assert r.returncode == 1 and "report.md: is not a regular file" in r.stderr
    assert "Traceback" not in r.stderr


def _resign(b: Path, st: dict, priv: Path) -> None:
    raw = attest.encode(st)
    (b / "statement.json").write_bytes(raw)
    (b / "statement.sig").write_bytes(attest.load_private_key(priv).sign(raw))


def _without_report(st: dict) -> None:
    st["subject"] = [s for s in st["subject"] if s["name"] != "report.json"]


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda st: st.update(predicate={}), "statement.json: the predicate is empty"),
        (lambda st: st.pop("predicate"), "statement.json: the predicate is empty"),
        (
            lambda st: st["predicate"].update(decision="", gates={}),
            "statement.json: the predicate lacks a valid decision, gates",
        ),
        (lambda st: st.update(subject=[]), "statement.json: lists no subject"),
        (
            lambda st: st["subject"].append({"name": ["x"], "digest": "y"}),
            "statement.json: a subject is not a name with a sha256 digest",
        ),
        (
            lambda st: st.update(predicateType="https://example.com/anything"),
            "statement.json: predicateType is not https://in-toto.io/attestation/test-result/v0.1",
        ),
        (
            lambda st: st["predicate"].update(decision="PROCEED"),
            "report.json: says write-10pct ROLLBACK, the statement write-10pct PROCEED",
        ),
        (_without_report, "report.json: not in the statement (a bundle holds its report)"),
    ],
)
def test_a_signed_statement_must_be_a_full_one(signed, tmp_path, edit, problem):
    """Even signed by the trusted key, an empty or partial predicate, or one that
    contradicts the report it lists, does not verify (nor crash)."""
    b = _copy(signed, tmp_path)
    st = json.loads((b / "statement.json").read_bytes())
    edit(st)
    _resign(b, st, signed["priv"])
    v = _verify(b, signed["pub"])
    assert problem in v.problems, v.problems
    r = run("report", "--verify", str(b), "--public-key", str(signed["pub"]))
    assert r.returncode == 1 and "Traceback" not in r.stderr


def test_an_added_file_fails(signed, tmp_path):
    b = _copy(signed, tmp_path)
    (b / "notes.txt").write_text("PROCEED after all")
    assert _verify(b, signed["pub"]).problems == ["notes.txt: not in the statement"]


def test_rotated_and_deleted_inputs_still_verify(signed, tmp_path):
    rotated = tmp_path / "rotated"
    shutil.copytree(signed["inputs"], rotated)
    (rotated / "rollout.csv").rename(rotated / "rollout.csv.1")
    data = (rotated / "sessions.jsonl").read_bytes()
    (rotated / "sessions.jsonl").unlink()  # deleted
    (rotated / "dispatches.csv").rename(rotated / "dispatches-2026-11-28.csv")
    v = _verify(signed["bundle"], signed["pub"], [rotated])
    assert v.ok, v.problems
    status = {i["name"].rsplit("/", 1)[-1]: i["status"] for i in v.inputs}
    assert (
        status["rollout.csv"].startswith("present at")
        and "rollout.csv.1" in (status["rollout.csv"])
    )
    assert status["sessions.jsonl"] == "not present, digest recorded"
    assert "dispatches-2026-11-28.csv" in status["dispatches.csv"]
    # Compressed by rotation: a different content digest, so not present.
    (rotated / "rollout.csv.1.gz").write_bytes(
        gzip.compress((rotated / "rollout.csv.1").read_bytes())
    )
    (rotated / "rollout.csv.1").unlink()
    assert _verify(signed["bundle"], signed["pub"], [rotated]).ok
    del data
    # Without --inputs nothing outside the bundle is looked at, and it verifies.
    r = run("report", "--verify", str(signed["bundle"]), "--public-key", str(signed["pub"]))
    assert r.returncode == 0 and "not looked for" in r.stderr


def test_verify_reads_only_files_inside_the_bundle(signed, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    digest = hashlib.sha256(b"secret").hexdigest()
    b = _copy(signed, tmp_path / "names")
    st = json.loads((b / "statement.json").read_bytes())
    st["subject"] += [
        {"name": "../outside.txt", "digest": {"sha256": digest}},
        {"name": str(outside), "digest": {"sha256": digest}},
    ]
    _resign(b, st, signed["priv"])
    v = _verify(b, signed["pub"])
    assert v.problems == [
        "../outside.txt: names a path outside the bundle",
        f"{outside}: names a path outside the bundle",
    ]
    # A link inside the bundle to a file outside with the very same content.
    b = _copy(signed, tmp_path / "link")
    (tmp_path / "md-copy").write_bytes((b / "report.md").read_bytes())
    (b / "report.md").unlink()
    (b / "report.md").symlink_to(tmp_path / "md-copy")
    assert _verify(b, signed["pub"]).problems == ["report.md: is a symbolic link"]


def test_bundle_never_writes_through_a_link(signed, tmp_path):
    """A link planted at a bundle file's name is refused before anything is written
    (tests/test_outputs.py holds every other output to the same rule)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    out = tmp_path / "evidence"
    out.mkdir()
    (out / "report.html").symlink_to(victim)
    (out / "statement.json").symlink_to(victim)
    r = run(
        "report", "--db", str(signed["db"]), "--config", SAMPLE_CONF, "--bundle", str(out)
    )  # fmt: skip
    assert r.returncode == 1 and "symbolic link" in r.stderr, r.stderr
    assert victim.read_text() == "untouched"
    assert (out / "report.html").is_symlink() and (out / "statement.json").is_symlink()
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "statement.json"]


def test_bundle_refuses_a_folder_of_other_files_and_the_database(signed, tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep-me.txt").write_text("mine")
    r = run("report", "--db", str(signed["db"]), "--config", SAMPLE_CONF, "--bundle", str(out))
    assert r.returncode == 1 and "holds other files (keep-me.txt)" in r.stderr
    # A database whose name is a bundle file's, in the bundle folder.
    here = tmp_path / "here"
    here.mkdir()
    shutil.copy(signed["db"], here / "report.json")
    # Its decision history goes with it (without it the database's anchor says rows
    # were deleted).
    shutil.copy(f"{signed['db']}.history.jsonl", here / "report.json.history.jsonl")
    r = run(
        "report", "--db", str(here / "report.json"), "--config", SAMPLE_CONF,
        "--bundle", str(here),
    )  # fmt: skip
    assert r.returncode == 1 and "is the database; refusing to overwrite" in r.stderr


def test_a_third_party_verifies_without_replaygate(signed):
    """docs/audit.md: openssl for the signature, any SHA-256 tool for the files."""
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed")
    out = signed["bundle"]
    r = subprocess.run(
        ["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", str(signed["pub"]), "-rawin"]
        + ["-in", "statement.json", "-sigfile", "statement.sig"],
        cwd=out,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and "Signature Verified Successfully" in r.stdout, r.stderr
    st = json.loads((out / "statement.json").read_bytes())
    lines = "".join(f"{s['digest']['sha256']}  {s['name']}\n" for s in st["subject"])
    r = subprocess.run(
        ["sha256sum", "-c", "-"], cwd=out, input=lines, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_bundle_prints_a_pdf_only_on_request_and_warns_of_nothing(signed, tmp_path):
    import warnings

    conf = str(signed["inputs"] / "replaygate.toml")
    out = tmp_path / "with-pdf"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = run(
            "report", "--db", str(signed["db"]), "--config", conf, "--stage", "write-10pct",
            "--bundle", str(out), "--pdf",
        )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert not [w for w in caught if issubclass(w.category, UserWarning)], caught
    names = set(os.listdir(out))
    st = json.loads((out / "statement.json").read_bytes())
    if chromium():
        assert "report.pdf" in names and (out / "report.pdf").read_bytes()[:4] == b"%PDF"
    else:
        assert st["predicate"]["notIncluded"] == ["report.pdf: chromium is not installed"]
    r = run("report", "--db", str(signed["db"]), "-o", str(tmp_path / "a.html"), "--pdf")
    assert r.returncode == 1 and "--pdf" in r.stderr
