"""Focused test of the detector that reads the decision history (its cases, near misses
included, are built in test_history.py)."""

from replaygate.queries import catalog

from .test_history import check_proceeded_while_rollback


def test_proceeded_while_rollback(tmp_path):
    assert "decision_history" in catalog.detectors()["proceeded_while_rollback"].needs
    check_proceeded_while_rollback(tmp_path)
