"""bench/primitives_growth.py on a tiny database: it builds its integer keys and runs every
primitive on both spellings (it is run by hand, at 10M and 100M, so nothing else would
notice it breaking), and the two spellings answer alike: the same rows, sessions, streams
and matches, so a figure of the one compares with the other's."""

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"

# the answers that do not depend on how a key is spelled (the scans' sums of key lengths
# and of integer ids do); per primitive, the positions of its answer that must agree
SAME = {
    "scan_events": [0, 2, 4],
    "scan_inbox": [0, 2, 4, 5],
    "group_session_events": [0, 1],
    "group_fixed_events": [1],
    "group_fixed_streams": [1],
    "group_stream_events": [0, 1],
    "group_stream_inbox": [0, 1],
    "join_receipts_events": [0, 1],
    "window_session_ts": [0, 1],
}


def test_primitives_growth_runs_and_both_keys_agree(tmp_path):
    sys.path.insert(0, str(BENCH))
    import primitives_growth
    import run

    assert set(SAME) == set(primitives_growth.PRIMITIVES)
    fleet, db = tmp_path / "fleet", tmp_path / "t.duckdb"
    r = subprocess.run(
        [sys.executable, "-m", "replaygate", "simulate", "--out", str(fleet), "--sessions",
         "40", "--format", "jsonl", "--seed", "2"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "replaygate", "ingest", str(fleet), "--db", str(db), "--no-analyse"],
        capture_output=True, text=True, env=run.ENV,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    scratch, temp = tmp_path / "keys.duckdb", tmp_path / "tmp"
    answers = {}
    # each part built in turn (the join's two tables one after the other, as at 100M), the
    # primitives of a part run once it is whole
    todo = {
        "keys": ("text,int", ",".join(p for p in SAME if p != "join_receipts_events")),
        "join-events": ("text", "scan_events"),
        "join-inbox": ("text,int", "join_receipts_events"),
    }
    assert set(todo) == set(primitives_growth.PARTS)
    for part, (keys, only) in todo.items():
        out = tmp_path / f"{part}.json"
        cmd = [sys.executable, str(BENCH / "primitives_growth.py"), str(db), "--int",
               str(scratch), "--build-int", part, "--temp-dir", str(temp), "--repeat", "1",
               "--keys", keys, "--only", only, "--json", str(out)]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, env=run.ENV)
        assert r.returncode == 0, r.stderr[-2000:]
        res = json.loads(out.read_text())
        assert res["build"]["part"] == part and res["build"]["scratch_mb"] > 0
        for name, by_key in res["runs"].items():
            if part == "join-events":
                continue
            answers[name] = {k: runs[0]["answer"] for k, runs in by_key.items()}
            for runs in by_key.values():
                assert runs[0]["cpu_s"] >= 0 and runs[0]["peak_mb"] > 0
                assert runs[0]["cache"] == "warm" and runs[0]["spill_mb"] == 0
    assert set(answers) == set(SAME)
    for name, cols in SAME.items():
        text, ints = answers[name]["text"], answers[name]["int"]
        assert [text[c] for c in cols] == [ints[c] for c in cols], name
        assert text[0] > 0, name
