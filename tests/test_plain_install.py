"""A plain install: the wheel with no extras, in a fresh venv, runs every command.

The test venv carries the test extras (and what they pull in), so an import the package
does not declare works there and fails for an operator; only a venv that holds exactly
what the wheel declares shows it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
import venv
from pathlib import Path

import pytest

from .conftest import ROOT
from .procs import free_port, stop, wait_port

pytestmark = pytest.mark.slow


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    """A fresh venv holding the built wheel and only its declared dependencies."""
    tmp = tmp_path_factory.mktemp("plain")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp), "."],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp.glob("replaygate-*.whl")
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=True)
    r = subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return env_dir / "bin"


def test_the_plain_install_holds_no_test_extra(plain):
    r = subprocess.run(
        [str(plain / "python"), "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    names = {p["name"].lower() for p in json.loads(r.stdout)}
    # If one of these came in as a dependency, the venv would hide imports of it again.
    assert not names & {"pytest", "hypothesis", "mcp", "playwright", "mypy", "ruff"}


def test_every_command_runs_from_a_plain_install(plain, tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    work = tmp_path / "w"
    shutil.copytree(ROOT / "sample_data", work / "sample_data")
    env = dict(os.environ, REPLAYGATE_HMAC_KEY="replaygate-demo-key")
    env.pop("PYTHONPATH", None)
    db = str(work / "f.duckdb")
    conf = ["--config", "sample_data/replaygate.toml"]

    def rg(*args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            [str(plain / "replaygate"), *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode in ok, f"{args}: exit {r.returncode}\n{r.stderr[-3000:]}"
        assert "Traceback" not in r.stderr, r.stderr
        return r

    rg("ingest", "sample_data", "--db", db, *conf)
    assert json.loads(rg("status", "--db", db, "--json").stdout)
    rg("findings", "--db", db, "--json")
    gates = json.loads(rg("gates", "--db", db, "--json", "--all-stages", ok=(0, 2, 3)).stdout)
    assert gates
    rg("history", "--db", db)
    rg("simulate", "--out", str(work / "sim"), "--sessions", "20")

    key = work / "ci.pem"
    key.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    report = work / "audit.html"
    rg("report", "--db", db, "-o", str(report), "--bundle", "evidence", "--sign-key", str(key))
    assert report.stat().st_size > 0
    (work / "ci.pub").write_bytes(
        serialization.load_pem_private_key(key.read_bytes(), None)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    verified = rg(
        "report", "--verify", "evidence", "--public-key", "ci.pub", "--inputs", "sample_data"
    )
    assert "bundle verified" in verified.stdout

    procs: list[subprocess.Popen[bytes]] = []
    try:
        serve_port, dash_port = free_port(), free_port()
        procs.append(
            subprocess.Popen(
                [str(plain / "replaygate"), "serve", "--db", db, "--port", str(serve_port)],
                cwd=work,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        wait_port(serve_port, timeout=60)
        # 503 until its first snapshot of the analysis is ready (replaygate/serve.py).
        deadline = time.monotonic() + 120
        while True:
            status, body = _get(f"http://127.0.0.1:{serve_port}/gates/-/_?ok=any")
            if status != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert status == 200
        assert json.loads(body)["stages"][0]["decision"] in ("PROCEED", "HOLD", "ROLLBACK")
        stop(procs[:1])
        procs.append(
            subprocess.Popen(
                [str(plain / "replaygate"), "dashboard", "--db", db, "--port", str(dash_port)],
                cwd=work,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        wait_port(dash_port, timeout=120)
        status, body = _get(f"http://127.0.0.1:{dash_port}/_stcore/health")
        assert (status, body) == (200, b"ok")
    finally:
        stop(procs)
