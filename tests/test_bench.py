"""The benchmark scripts start: each parses its arguments and imports what it shares with
bench/run.py (they are run by hand, so nothing else would notice them breaking)."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py")))
def test_bench_script_starts(script):
    r = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage:" in r.stdout
