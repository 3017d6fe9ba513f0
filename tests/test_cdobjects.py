"""Reading Argo Rollouts and Flagger objects into the rollout log, on objects taken from
the controllers' own repositories and published docs (tests/fixtures/cd/README.md cites
each: argoproj/argo-rollouts@9f8d111d, argoproj/argo-cd@37ee0097, fluxcd/flagger@15bd6ad5),
and what the stage windows make of them."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from replaygate.ingest import cdobjects, rolloutlog

from .conftest import run_cli

CD = Path(__file__).parent / "fixtures" / "cd"


def _docs(*names):
    out = []
    for n in names:
        out += [d for d in yaml.safe_load_all((CD / n).read_text()) if d]
    return out


def _short(recs):
    return [(r["ts"], r["release"], r["stage"], r["action"]) for r in recs]


# -- Argo Rollouts -------------------------------------------------------------------------


def test_argo_canary_aborted_by_its_background_analysis_is_rolled_back():
    recs = cdobjects.records(
        _docs(
            "argo-rollouts/rollout-aborted_rollout.yaml",
            "argo-rollouts/rollout-aborted_analysisrun.yaml",
        )
    )
    assert _short(recs) == [
        ("2020-09-22T09:10:04Z", "db976bc44", "canary-10pct", "start"),
        ("2020-09-22T09:10:04Z", "db976bc44", "canary-10pct", "rollback"),
        ("2020-09-22T09:10:05Z", "db976bc44", "canary-10pct", "rollback"),
    ]
    assert "failureLimit" in recs[1]["note"] and "aborted" in recs[2]["note"]
    rolloutlog.check(recs)


def test_argo_abort_and_promotion_at_the_start_second_close_the_stage(tmp_path):
    # argo-cd's aborted canary: only the abort's time is left, so start and rollback
    # share a second; its fully promoted canary: start and complete share one.
    aborted = cdobjects.records(_docs("argo-cd/Rollout_degraded_abortedRollout.yaml"))
    assert _short(aborted) == [
        ("2019-11-05T18:20:12Z", "6758949f55", "canary-40pct", "start"),
        ("2019-11-05T18:20:12Z", "6758949f55", "canary-40pct", "rollback"),
    ]
    done = cdobjects.records(_docs("argo-cd/Rollout_canary_healthy_executedAllSteps.yaml"))
    assert _short(done) == [
        ("2019-05-01T21:55:58Z", "84ccfddd66", "canary-40pct", "start"),
        ("2019-05-01T21:55:58Z", "84ccfddd66", "canary-40pct", "complete"),
    ]
    stages = _gated(tmp_path, aborted + done)
    assert stages["canary-40pct@6758949f55"]["rolled_back"]
    assert stages["canary-40pct@6758949f55"]["window"]["end"] == "2019-11-05T18:20:12.000Z"
    assert stages["canary-40pct@84ccfddd66"]["window"]["end"] == "2019-05-01T21:55:58.000Z"
    assert not stages["canary-40pct@84ccfddd66"]["rolled_back"]


def _gated(tmp_path, recs):
    log = tmp_path / "rollout.jsonl"
    rolloutlog.append_file(log, recs)
    db = tmp_path / "fleet.duckdb"
    r = run_cli("ingest", log, "--db", db)
    assert r.returncode == 0, r.stderr
    r = run_cli("gates", "--db", db, "--all-stages", "--json")
    return {s["stage"]: s for s in json.loads(r.stdout)["stages"]}


def test_argo_paused_canaries_are_held_at_their_weight():
    for name, weight, ts, rel in (
        (
            "argo-cd/Rollout_suspended_controllerPause.yaml",
            20,
            "2019-12-09T18:34:12Z",
            "6758949f55",
        ),
        ("argo-cd/Rollout_suspended_userPause.yaml", 20, "2019-04-26T20:18:38Z", "6b566f47b7"),
        (
            "argo-cd/Rollout_suspended_v1.0_pausedRollout.yaml",
            21,
            "2021-07-15T21:08:55Z",
            "8566c77b97",
        ),
    ):
        recs = cdobjects.records(_docs(name))
        assert _short(recs) == [
            (ts, rel, f"canary-{weight}pct", "start"),
            (ts, rel, f"canary-{weight}pct", "hold"),
        ], name
        assert recs[0]["percent"] == weight
    # A progressing step: its start, from the Progressing condition.
    recs = cdobjects.records(_docs("argo-cd/Rollout_canary_progressing_setWeightStep.yaml"))
    assert _short(recs) == [("2019-04-26T20:18:58Z", "6b566f47b7", "canary-40pct", "start")]


def test_argo_blue_green_preview_is_the_stage():
    paused = cdobjects.records(_docs("argo-rollouts/blue-green_bluegreen-rollout.yaml"))
    assert _short(paused) == [
        ("2019-10-28T04:50:20Z", "74b948fccb", "preview", "start"),
        ("2019-10-28T04:50:20Z", "74b948fccb", "preview", "hold"),
    ]
    # Promoted: the preview's ReplicaSet is the active one.
    active = cdobjects.records(_docs("argo-cd/Rollout_bluegreen_healthy_servingActiveService.yaml"))
    assert _short(active) == [
        ("2019-01-24T09:51:02Z", "dc689d967", "preview", "start"),
        ("2019-01-24T09:51:02Z", "dc689d967", "preview", "complete"),
    ]
    # Aborted: the same objects with the abort Argo sets.
    bg = _docs("argo-rollouts/blue-green_bluegreen-rollout.yaml")[0]
    bg["status"].update(abort=True, abortedAt="2019-10-28T05:01:00Z")
    assert _short(cdobjects.records([bg]))[-1] == (
        "2019-10-28T05:01:00Z", "74b948fccb", "preview", "rollback",
    )  # fmt: skip


def test_argo_experiment_step_before_any_weight_is_a_stage():
    recs = cdobjects.records(
        _docs(
            "argo-rollouts/experiment-step_canary-demo.yaml",
            "argo-rollouts/experiment-step_canary-exp.yaml",
            "argo-rollouts/experiment-step_canary-exp-analysis.yaml",
        )
    )
    assert _short(recs) == [("2019-11-07T22:38:22Z", "645d5dbc4c", "canary-0pct", "start")]
    assert recs[0]["percent"] == 0
    recs = cdobjects.records(
        _docs(
            "argo-rollouts/experiment-analysis_rollout-experiment-analysis.yaml",
            "argo-rollouts/experiment-analysis_canary-analysis.yaml",
        )
    )
    assert _short(recs) == [
        ("2019-10-30T16:13:40Z", "6f646bf7b7", "canary-25pct", "start"),
        ("2019-10-30T16:13:40Z", "6f646bf7b7", "canary-25pct", "hold"),
    ]
    assert "InconclusiveAnalysisRun" in recs[1]["note"]


def test_argo_analysis_run_phases_and_a_terminated_run_is_no_pass():
    verdicts = {
        n: cdobjects.run_verdict(_docs(f"argo-cd/AnalysisRun_{n}AnalysisRun.yaml")[0])
        for n in ("successful", "failed", "error", "inconclusive", "terminated")
    }
    assert verdicts == {
        "successful": "proceed",
        "failed": "rollback",
        "error": "rollback",
        "inconclusive": "hold",
        "terminated": None,  # phase Successful, message "run terminated"
    }
    # The terminated step run of rollout-canary with its Rollout (the aborted one of the
    # same shape, renamed): the step starts, but nothing says it passed.
    run = _docs("argo-cd/AnalysisRun_terminatedAnalysisRun.yaml")[0]
    ro = _docs("argo-cd/Rollout_degraded_abortedRollout.yaml")[0]
    ro["metadata"].update(name="rollout-canary", namespace=run["metadata"].get("namespace"))
    ro["metadata"].setdefault("annotations", {})["rollout.argoproj.io/revision"] = "2"
    ro["status"]["currentPodHash"] = "ff68867ff"
    recs = cdobjects.records([ro, run])
    assert "proceed" not in {r["action"] for r in recs}
    assert ("2020-11-06T18:39:45Z", "ff68867ff", "canary-40pct", "start") in _short(recs)


def test_argo_retried_step_is_judged_from_its_latest_start(tmp_path):
    # `kubectl argo rollouts retry`: the failed step's run is followed by a new one.
    run = _docs("argo-cd/AnalysisRun_terminatedAnalysisRun.yaml")[0]
    ro = _docs("argo-cd/Rollout_suspended_controllerPause.yaml")[0]
    ro["metadata"]["name"] = "rollout-canary"
    ro["status"].update(currentPodHash="ff68867ff", currentStepIndex=0, pauseConditions=[])
    failed = json.loads(json.dumps(run))
    failed["spec"].pop("terminate")
    failed["status"].update(phase="Failed", message="metric failed")
    retried = json.loads(json.dumps(run))
    retried["metadata"]["name"] += ".1"
    retried["spec"].pop("terminate")
    retried["status"].update(
        phase="Successful", message=None, startedAt="2020-11-06T19:00:00Z",
        metricResults=[{"name": "m", "measurements": [{"finishedAt": "2020-11-06T19:05:00Z"}]}],
    )  # fmt: skip
    recs = cdobjects.records([ro, failed, retried])
    assert [(r["ts"], r["action"]) for r in recs if r["stage"] == "canary-20pct"][:4] == [
        ("2020-11-06T18:39:45Z", "start"),
        ("2020-11-06T18:42:58Z", "rollback"),
        ("2020-11-06T19:00:00Z", "start"),
        ("2020-11-06T19:05:00Z", "proceed"),
    ]
    stage = _gated(tmp_path, recs)["canary-20pct@ff68867ff"]
    assert not stage["rolled_back"] and stage["window"]["start"] == "2020-11-06T19:00:00.000Z"


def test_argo_run_without_pod_hash_never_makes_release_none():
    run = _docs("argo-cd/AnalysisRun_terminatedAnalysisRun.yaml")[0]
    del run["metadata"]["labels"]["rollouts-pod-template-hash"]
    run["metadata"]["annotations"] = {"rollout.argoproj.io/revision": "7"}
    ro = _docs("argo-cd/Rollout_degraded_abortedRollout.yaml")[0]
    ro["metadata"]["name"] = "rollout-canary"
    got = cdobjects.read([ro, run])
    assert {r["release"] for r in got.records} == {"6758949f55"}
    assert any("no rollouts-pod-template-hash label" in w for w in got.skipped)
    # Of the Rollout's current revision: its current hash.
    run["metadata"]["annotations"] = {"rollout.argoproj.io/revision": "3"}
    ro["metadata"]["annotations"] = {"rollout.argoproj.io/revision": "3"}
    got = cdobjects.read([ro, run])
    assert {r["release"] for r in got.records} == {"6758949f55"} and not got.skipped


# -- Flagger -------------------------------------------------------------------------------

_ROW = re.compile(r"^\s+(Normal|Warning)\s+(\w+)\s+(.+?)\s{2,}(\S+)\s{2,}(.*)$")
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _age(text: str) -> timedelta:
    text = text.split(" ")[0]
    parts = dict((u, int(n)) for n, u in re.findall(r"(\d+)([hms])", text))
    return timedelta(hours=parts.get("h", 0), minutes=parts.get("m", 0), seconds=parts.get("s", 0))


def _events(describe: str, shape: str, name="podinfo", ns="test"):
    """The printed events as Event objects of one API shape, timed by their ages (an
    equal age keeps the printed order)."""
    out = []
    rows = [m.groups() for line in describe.splitlines() if (m := _ROW.match(line))]
    for i, (typ, reason, age, _src, msg) in enumerate(rows):
        ts = (NOW - _age(age) + timedelta(milliseconds=i)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        subject = {"apiVersion": "flagger.app/v1beta1", "kind": "Canary", "name": name,
                   "namespace": ns}  # fmt: skip
        meta = {"name": f"{name}.{i:04x}", "namespace": ns}
        if shape == "core":
            out.append({"apiVersion": "v1", "kind": "Event", "metadata": meta, "type": typ,
                        "reason": reason, "message": msg, "involvedObject": subject,
                        "firstTimestamp": ts, "lastTimestamp": ts})  # fmt: skip
        else:
            out.append({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": meta,
                        "type": typ, "reason": reason, "note": msg, "regarding": subject,
                        "eventTime": ts, "reportingController": "flagger"})  # fmt: skip
    return {"apiVersion": "v1", "kind": "List", "items": out}


def _flagger(tutorial, phase, shape="core", release="6.1.0"):
    canary = yaml.safe_load((CD / "flagger" / f"{tutorial}.canary.yaml").read_text())
    canary["status"] = {"phase": phase.capitalize()}
    describe = (CD / "flagger" / f"{tutorial}.describe-{phase}.txt").read_text()
    return cdobjects.read([canary, _events(describe, shape)], release=release)


@pytest.mark.parametrize("shape", ["core", "events.k8s.io"])
def test_flagger_canary_from_events_of_either_api(shape):
    got = _flagger("istio-progressive-delivery", "succeeded", shape)
    acts = [(r["stage"], r["action"]) for r in got.records]
    assert acts[:2] == [("canary-5pct", "start"), ("canary-10pct", "start")]
    assert acts[-3:] == [("canary-50pct", "start"), ("canary-50pct", "proceed"),
                         ("canary-50pct", "complete")]  # fmt: skip
    failed = _flagger("istio-progressive-delivery", "failed", shape)
    acts = [(r["stage"], r["action"]) for r in failed.records]
    assert acts[:3] == [("canary-5pct", "start"), ("canary-10pct", "start"),
                        ("canary-15pct", "start")]  # fmt: skip
    # Five halts, one of them aggregated by client-go, then "Rolling back" and "Canary
    # failed!".
    assert acts[3:] == [("canary-15pct", "hold")] * 5 + [("canary-15pct", "rollback")] * 2


def test_flagger_aggregated_promotion_completes_the_last_stage():
    got = _flagger("apisix-progressive-delivery", "succeeded", "core")
    assert [(r["stage"], r["action"]) for r in got.records][-2:] == [
        ("canary-50pct", "start"),
        ("canary-50pct", "complete"),
    ]
    assert "combined from similar" not in got.records[-1]["note"]


def test_flagger_ab_test_and_blue_green_are_one_stage_each():
    ab = _flagger("istio-ab-testing", "succeeded")
    assert [(r["stage"], r["action"]) for r in ab.records] == [
        ("ab-test", "start"), ("ab-test", "proceed"), ("ab-test", "complete"),
    ]  # fmt: skip
    ab_failed = _flagger("istio-ab-testing", "failed", "events.k8s.io")
    assert [r["action"] for r in ab_failed.records] == [
        "start",
        "hold",
        "hold",
        "rollback",
        "rollback",
    ]
    bg = _flagger("kubernetes-blue-green", "failed")
    assert {r["stage"] for r in bg.records} == {"preview"}
    assert [r["action"] for r in bg.records][-1] == "rollback"


def test_flagger_phases_without_events():
    def only(phase):
        return cdobjects.read(_docs(f"argo-cd/Canary_{phase}.yaml"))

    assert _short(only("progressing").records) == [
        ("2020-07-03T18:46:52Z", "5c75b466fb", "canary-10pct", "start")
    ]
    assert [r["action"] for r in only("promoting").records] == ["start", "proceed"]
    assert [r["action"] for r in only("finalising").records] == ["start", "proceed"]
    assert _short(only("succeeded").records) == [
        ("2020-07-03T13:36:22Z", "658bbf784f", "canary", "start"),
        ("2020-07-03T13:36:22Z", "658bbf784f", "canary", "complete"),
    ]
    assert [r["action"] for r in only("degraded").records] == ["start", "rollback"]
    got = only("initialized")
    assert not got.records and "phase Initialized" in got.skipped[0]
    # With the spec's last weight known, the promoted stage is named after it.
    canary = yaml.safe_load((CD / "flagger" / "istio-progressive-delivery.canary.yaml").read_text())
    canary["status"] = _docs("argo-cd/Canary_succeeded.yaml")[0]["status"]
    assert {r["stage"] for r in cdobjects.records([canary])} == {"canary-50pct"}


def test_flagger_failed_without_events_rolls_back_the_stage_the_log_saw(tmp_path):
    # argo-cd's Progressing canary (weight 10), imported on one pass; on a later pass the
    # canary has failed (argo-cd's degraded one: Flagger set its weight to 0) and its
    # events have expired. The rollback belongs to canary-10pct, not to a stage "canary"
    # that never started.
    progressing = _docs("argo-cd/Canary_progressing.yaml")[0]
    failed = _docs("argo-cd/Canary_degraded.yaml")[0]
    for dest in ("--to", "--db"):
        target = tmp_path / ("rollout.jsonl" if dest == "--to" else "fleet.duckdb")
        for i, obj in enumerate((progressing, failed)):
            f = tmp_path / f"canary-{i}.json"
            f.write_text(json.dumps(obj))
            r = run_cli("rollout", "import", f, "--release", "3.1.0", dest, target)
            assert r.returncode == 0, r.stderr
        if dest == "--to":
            recs = [json.loads(x) for x in target.read_text().splitlines()]
            assert _short(recs) == [
                ("2020-07-03T18:46:52Z", "3.1.0", "canary-10pct", "start"),
                ("2020-07-03T19:13:47Z", "3.1.0", "canary-10pct", "rollback"),
            ]
            db = tmp_path / "from-file.duckdb"
            assert run_cli("ingest", target, "--db", db).returncode == 0
        else:
            db = target
        r = run_cli("gates", "--db", db, "--all-stages", "--json")
        stages = {s["stage"]: s for s in json.loads(r.stdout)["stages"]}
        assert set(stages) == {"canary-10pct@3.1.0"}, dest
        assert stages["canary-10pct@3.1.0"]["rolled_back"], dest
    # Nothing in the log: the stage is not known, and says so by its name.
    alone = cdobjects.read([failed], release="3.1.0")
    assert {r["stage"] for r in alone.records} == {"canary"}
    # A stage the log saw start is not started again at the phase's time (which would
    # move its window): a Succeeded canary whose spec shows no weights completes it.
    known = [{"ts": "2020-07-03T13:30:00.000Z", "release": "658bbf784f",
              "stage": "canary-30pct", "action": "start", "percent": 30.0}]  # fmt: skip
    done = cdobjects.read(_docs("argo-cd/Canary_succeeded.yaml"), known=known)
    assert _short(done.records) == [
        ("2020-07-03T13:36:22Z", "658bbf784f", "canary-30pct", "complete")
    ]


def test_flagger_canary_without_a_release_says_so():
    canary = _docs("argo-cd/Canary_progressing.yaml")[0]
    del canary["status"]["lastAppliedSpec"]
    got = cdobjects.read([canary])
    assert not got.records and "give --release" in got.skipped[0]


# -- rollout import -------------------------------------------------------------------------


def test_import_reads_yaml_of_several_documents(tmp_path):
    both = tmp_path / "argo.yaml"
    both.write_text(
        (CD / "argo-rollouts/rollout-aborted_rollout.yaml").read_text()
        + "---\n"
        + (CD / "argo-rollouts/rollout-aborted_analysisrun.yaml").read_text()
    )
    r = run_cli("rollout", "import", both, "--json")
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["action"] for x in r.stdout.splitlines()] == [
        "start", "rollback", "rollback",
    ]  # fmt: skip
    # Unquoted YAML timestamps (argo-cd's files) are read as the same RFC 3339 times.
    r = run_cli("rollout", "import", CD / "argo-cd/Rollout_suspended_userPause.yaml", "--json")
    assert json.loads(r.stdout.splitlines()[0])["ts"] == "2019-04-26T20:18:38Z"


def test_analysis_runs_without_their_owner_are_skipped_with_the_reason():
    # argo-cd's failed run has no ownerReferences: which rollout and step it judged is
    # unknown, and the import says so beside what the Rollout gave.
    got = cdobjects.read(
        _docs(
            "argo-cd/Rollout_suspended_userPause.yaml", "argo-cd/AnalysisRun_failedAnalysisRun.yaml"
        )
    )
    assert [r["action"] for r in got.records] == ["start", "hold"]
    assert got.skipped == [
        "analysis default/canary-demo-analysis-template-6c6bb7cf6f-9k5rj: no Rollout owns it "
        "(no ownerReferences), so its rollout and step are unknown"
    ]
    # An experiment's run without its Experiment, and an Experiment without its Rollout.
    got = cdobjects.read(
        _docs(
            "argo-rollouts/experiment-step_canary-demo.yaml",
            "argo-rollouts/experiment-step_canary-exp-analysis.yaml",
        )
    )
    assert any(
        "its Experiment canary-demo-645d5dbc4c-2-0 is not given" in w for w in got.skipped
    ), got.skipped
    exp = _docs("argo-rollouts/experiment-step_canary-exp.yaml")[0]
    del exp["metadata"]["ownerReferences"]
    got = cdobjects.read([exp])
    assert any("no Rollout owns it" in w for w in got.skipped), got.skipped


def test_import_of_an_experiment_step_in_separate_files(tmp_path):
    # kubectl get of each kind to a file of its own: the experiment's run is read as the
    # experiment, so its file is not "no rollout record".
    r = run_cli(
        "rollout", "import",
        *(CD / f"argo-rollouts/experiment-step_{n}.yaml"
          for n in ("canary-demo", "canary-exp", "canary-exp-analysis")),
        "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["stage"] for x in r.stdout.splitlines()] == ["canary-0pct"]
    r = run_cli(
        "rollout", "import", CD / "argo-cd/Rollout_suspended_userPause.yaml",
        CD / "argo-cd/AnalysisRun_failedAnalysisRun.yaml", "--json",
    )  # fmt: skip
    assert "skipped analysis default/canary-demo-analysis-template" in r.stderr


def test_import_of_a_file_that_yields_nothing_exits_1_with_the_reason(tmp_path):
    log = tmp_path / "rollout.jsonl"
    r = run_cli("rollout", "import", CD / "argo-cd/Canary_initialized.yaml", "--to", log)
    assert r.returncode == 1 and "no rollout record" in r.stderr
    assert "phase Initialized" in r.stderr and not log.exists()
    canary = _docs("argo-cd/Canary_progressing.yaml")[0]
    del canary["status"]["lastAppliedSpec"]
    f = tmp_path / "canary.json"
    f.write_text(json.dumps(canary))
    r = run_cli("rollout", "import", f, "--to", log)
    assert r.returncode == 1 and "give --release" in r.stderr
    assert run_cli("rollout", "import", f, "--release", "3.1.0", "--to", log).returncode == 0
    # A file among others that adds nothing is named.
    r = run_cli(
        "rollout", "import", CD / "argo-cd/Rollout_suspended_userPause.yaml",
        CD / "argo-cd/AnalysisRun_failedAnalysisRun.yaml", "--json",
    )  # fmt: skip
    assert r.returncode == 1 and "AnalysisRun_failedAnalysisRun.yaml: no rollout record" in r.stderr
    bad = tmp_path / "x.yaml"
    bad.write_bytes(b"a: [unclosed\n")
    r = run_cli("rollout", "import", bad)
    assert r.returncode == 1 and "not a JSON or YAML document at line" in r.stderr
    assert "Traceback" not in r.stderr
