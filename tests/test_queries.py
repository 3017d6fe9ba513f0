"""The query files themselves: headers, declared parameters, one file per detector."""

from __future__ import annotations

import re

import pytest

from replaygate.ingest.contract import BY_TABLE
from replaygate.queries import catalog
from replaygate.queries.gates import GATES

CATALOGUE = {
    "replay_gap",
    "silent_truncation",
    "dropped_terminal",
    "cross_stream_acceptance",
    "duplicate_delivery_accepted",
    "cursor_misrouted",
    "cursor_rejected",
    "replay_after_ack",
    "priming_lost",
    "slow_recovery",
    "unrecovered_stream",
    "retry_not_honored",
    "duplicate_dispatch",
    "idempotency_conflict",
    "conflict_executed",
    "missing_idempotency_key",
    "reinit_missing",
    "invalid_origin_accepted",
    "session_after_terminal",
    "auth_subject_mismatch",
    "delete_fabricated",
    "state_violation",
    "missing_protocol_version",
    "raw_session_id_logged",
    "obsolete_resume",
    "reconnect_storm",
    "rollback_resumable_new_stream",
    "rollback_cursor_dropped",
    "rollback_post_storm",
}


def test_one_file_per_catalogue_entry():
    assert set(catalog.detectors()) == CATALOGUE
    for name, q in catalog.detectors().items():
        assert q.path.stem == name


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_header(name):
    q = catalog.detectors()[name]
    for key in ("name", "invariant", "severity", "needs", "unit"):
        assert q.header.get(key), f"{name}: no -- {key}:"
    assert set(q.severities) <= {"critical", "high", "medium", "low"}
    assert {t for need in q.needs for t in need.split("|")} <= set(BY_TABLE)


@pytest.mark.parametrize("kind", ["detectors", "gates", "prep"])
def test_declared_params_are_the_used_params(kind):
    for q in catalog.load(kind):
        assert set(q.params) == q.used_params(), q.name


def test_no_values_formatted_into_sql():
    # Parameters are bound; the only Python-side formatting is of our own identifiers.
    for kind in ("detectors", "gates", "prep"):
        for q in catalog.load(kind):
            assert not re.search(r"\{[a-z_]+\}", q.sql), q.name


def test_severities_in_results_are_declared(fleet):
    con, _, _ = fleet
    for name, sev in con.execute("SELECT DISTINCT detector, severity FROM findings").fetchall():
        assert sev in catalog.detectors()[name].severities


def test_every_gate_has_a_measure_file():
    assert {q.name for q in catalog.load("gates")} == {g.id for g in GATES}


def test_contract_doc_is_current():
    from pathlib import Path

    from replaygate.ingest.docs import render

    doc = Path(__file__).resolve().parent.parent / "docs" / "contract.md"
    assert doc.read_text() == render(), "run: python -m replaygate.ingest.docs"


def test_catalogue_doc_is_current():
    from pathlib import Path

    from replaygate.queries.docs import render

    doc = Path(__file__).resolve().parent.parent / "docs" / "catalogue.md"
    assert doc.read_text() == render(), "run: python -m replaygate.queries.docs"


def test_every_gate_header_is_complete():
    for q in catalog.load("gates"):
        for key in ("title", "kind", "detectors", "min_sample", "sample", "unit"):
            assert q.header.get(key), f"{q.name}: no -- {key}:"
        assert q.header["kind"] in ("count", "share", "p99", "peak")
        assert set(catalog.split(q.header["detectors"])) <= set(catalog.detectors())
