"""The shell in docs/ci-integration.md runs as written against the sample fleet: the Argo
Rollouts Job script, the GitHub Actions step, the rollout-log commands and the worked
example. The CI system's own `{{args.x}}` / `${{ vars.X }}` values are filled in, and the
Job's volume mounts point into a temporary folder; nothing else is changed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from .conftest import ROOT

DOC = ROOT / "docs" / "ci-integration.md"
BIN = str(Path(sys.executable).parent)
pytestmark = pytest.mark.skipif(shutil.which("jq") is None, reason="the examples use jq")


def _fences(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", DOC.read_text(), re.S | re.M)


def _block_scalars(yaml_text: str) -> list[str]:
    """The literal block scalars (`- |`, `run: |`) of a YAML text, dedented."""
    lines = yaml_text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if not re.match(r"^\s*(- |[\w-]+: )\|\s*$", line):
            continue
        indent = len(line) - len(line.lstrip())
        body = []
        for nxt in lines[i + 1 :]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                break
            body.append(nxt)
        width = min(len(x) - len(x.lstrip()) for x in body if x.strip())
        out.append("\n".join(x[width:] for x in body) + "\n")
    return out


def _script(marker: str) -> str:
    found = [s for y in _fences("yaml") for s in _block_scalars(y) if marker in s]
    assert len(found) == 1, f"one script with {marker!r} in the doc"
    return found[0]


def _env(**extra) -> dict:
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}")
    env.update(REPLAYGATE_HMAC_KEY="replaygate-demo-key", REPLAYGATE_ACTOR="ci")
    env.pop("REPLAYGATE_DB", None)
    env.update(extra)
    return env


@pytest.fixture
def workdir(tmp_path):
    """logs/ (the sample fleet), replaygate.toml (the sample's), and the rollout-log
    commands of the doc run in it with RELEASE=2.4.0."""
    shutil.copytree(ROOT / "sample_data", tmp_path / "logs")
    shutil.copy(ROOT / "sample_data" / "replaygate.toml", tmp_path / "replaygate.toml")
    (sh,) = _fences("sh")
    r = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", sh],
        cwd=tmp_path,
        env=_env(RELEASE="2.4.0"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    recs = [
        json.loads(x) for x in (tmp_path / "logs" / "rollout-cd.jsonl").read_text().splitlines()
    ]
    assert [(x["release"], x["stage"], x["action"], x["actor"]) for x in recs] == [
        ("2.4.0", "canary-5pct", "start", "ci"),
        ("2.4.0", "canary-5pct", "hold", "ci"),
    ]
    return tmp_path


@pytest.mark.parametrize(
    ("release", "stage", "code", "decision"),
    [
        ("-", "write-10pct", 3, "ROLLBACK"),
        ("-", "write-10pct-v2", 0, "PROCEED"),
        # Nothing served by 2.4.0 yet: waits, then HOLD, which must not fail the Job (a
        # failed Job aborts the rollout).
        ("2.4.0", "canary-5pct", 0, "HOLD"),
    ],
)
def test_argo_job_script(workdir, release, stage, code, decision):
    script = _script("{{args.stage}}")
    for name, value in (("release", release), ("stage", stage), ("wait", "2s")):
        script = script.replace(f"{{{{args.{name}}}}}", value)
    mounts = {"/logs": workdir / "logs", "/work": workdir / "work", "/config": workdir}
    (workdir / "work").mkdir()
    for mount, where in mounts.items():
        script = re.sub(rf"(?<![\w/]){mount}(?=[/\s])", str(where), script)
    r = subprocess.run(
        ["/bin/sh", "-c", script],
        cwd=workdir,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == code, r.stderr
    doc = json.loads(r.stdout)  # printed whatever the decision
    assert doc["stages"][0]["decision"] == decision
    assert ("decision=HOLD" in r.stderr) == (decision == "HOLD")


def test_github_actions_step(workdir):
    script = _script("${{ vars.STAGE }}")
    script = script.replace("${{ vars.RELEASE }}", "-").replace("${{ vars.STAGE }}", "write-10pct")
    out, summary = workdir / "github_output", workdir / "step_summary"
    r = subprocess.run(
        # GitHub Actions' bash: errexit and pipefail on.
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=workdir,
        env=_env(GITHUB_OUTPUT=str(out), GITHUB_STEP_SUMMARY=str(summary)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 3, r.stderr
    assert out.read_text() == "decision=ROLLBACK\n"
    assert "Duplicate dispatches" in summary.read_text()
    assert "ROLLBACK" in (workdir / "report.md").read_text()
    junit = ET.parse(workdir / "gates.xml").getroot()
    assert int(junit.get("failures")) > 0


def test_worked_example(tmp_path):
    (block,) = [b for b in _fences("console") if "replaygate ingest sample_data" in b]
    commands, expected = [], []
    for line in block.splitlines():
        if line.startswith("$ "):
            commands.append(line[2:])
        elif commands and commands[-1].endswith("\\"):
            commands[-1] += "\n" + line
        else:
            expected.append(line)
    shutil.copytree(ROOT / "sample_data", tmp_path / "sample_data")
    r = subprocess.run(
        ["bash", "-c", "\n".join(commands)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    got = r.stdout.splitlines()
    exits = [x for x in got if re.fullmatch(r"exit \d+", x)]
    assert exits == [x for x in expected if re.fullmatch(r"exit \d+", x)], r.stderr
    # The table renderer wraps long lines at the terminal's width: compare words.
    flat = " ".join(r.stdout.split())
    for line in expected:
        if "..." not in line:
            assert " ".join(line.split()) in flat, line


# -- the serve snippets, under each consumer's documented semantics -------------------------


def _yaml_doc(marker: str) -> dict:
    import yaml

    found = [y for y in _fences("yaml") if marker in y]
    assert len(found) == 1, marker
    return yaml.safe_load(found[0])


def _argo_condition(cond: str, result: str) -> bool:
    # The doc's conditions are `result == "X"` (expr); nothing else is accepted here.
    m = re.fullmatch(r'result == "(\w+)"', cond)
    assert m, cond
    return result == m.group(1)


def _measure(url: str, method: str = "GET") -> tuple[int, dict]:
    from .test_rollout_cli import _get

    return _get(url, method)


def test_serve_snippets_behave_as_documented(sample_db, tmp_path):
    from .test_rollout_cli import served

    db = tmp_path / "served.duckdb"
    shutil.copy(sample_db, db)
    subprocess.run(
        [f"{BIN}/replaygate", "rollout", "start", "--release", "3.1.0", "--stage", "canary-5pct",
         "--at", "2026-11-29T00:00:00Z", "--db", str(db)],
        check=True, capture_output=True, env=_env(),
    )  # fmt: skip
    conf = ROOT / "sample_data" / "replaygate.toml"
    with served(db, "--config", str(conf)) as base:
        # Argo web metric: every answer is 2xx (anything else is an error that counts
        # toward consecutiveErrorLimit and aborts), and $.decision decides.
        metric = _yaml_doc("kind: AnalysisTemplate\nmetadata:\n  name: replaygate-web")
        (m,) = metric["spec"]["metrics"]
        assert m["provider"]["web"]["jsonPath"] == "{$.decision}"
        assert m["consecutiveSuccessLimit"] == 1
        expect = {
            ("-", "write-10pct-v2"): "success",
            ("-", "write-10pct"): "failure",
            ("3.1.0", "canary-5pct"): "inconclusive",
            ("3.1.0", "canary-25pct"): "inconclusive",  # not imported yet: never an error
        }
        for (release, stage), outcome in expect.items():
            url = m["provider"]["web"]["url"].replace("{{args.release}}", release)
            url = url.replace("{{args.stage}}", stage).replace(
                "http://replaygate.mcp.svc:8765", base
            )
            code, doc = _measure(url)
            assert 200 <= code < 300, (stage, code)
            result = doc["decision"]
            got = (
                "success" if _argo_condition(m["successCondition"], result)
                else "failure" if _argo_condition(m["failureCondition"], result)
                else "inconclusive"
            )  # fmt: skip
            assert got == outcome, (stage, result)
        # Flagger: 200 is "yes". The traffic and promotion gates say yes only on PROCEED,
        # the rollback hook only on ROLLBACK.
        canary = _yaml_doc("kind: Canary")
        hooks = {h["type"]: h["url"] for h in canary["spec"]["analysis"]["webhooks"]}
        assert set(hooks) == {"confirm-traffic-increase", "confirm-promotion", "rollback"}
        release = canary["metadata"]["annotations"]["replaygate.io/release"]
        for kind, url in hooks.items():  # 3.1.0's newest stage, canary-5pct, holds
            url = url.replace("http://replaygate.test.svc:8765", base)
            assert f"/gates/{release}/_" in url
            code, doc = _measure(url, "POST")
            assert code != 200 and doc["decision"] == "HOLD", (kind, code)
        # The same hooks on stages that PROCEED and ROLLBACK (the sample's, no release).
        for stage, decision in (("write-10pct-v2", "PROCEED"), ("write-10pct", "ROLLBACK")):
            for kind, url in hooks.items():
                url = url.replace("http://replaygate.test.svc:8765", base)
                url = url.replace(f"/gates/{release}/_", f"/gates/-/{stage}")
                code, doc = _measure(url, "POST")
                yes = decision == ("ROLLBACK" if kind == "rollback" else "PROCEED")
                assert (code == 200) == yes, (kind, stage, code)
