"""Configuration: defaults, overrides, and one-line errors naming the key."""

from __future__ import annotations

import pytest

from replaygate.ingest import config as cfg
from replaygate.ingest.errors import ReplaygateError
from replaygate.queries.api import load_config
from replaygate.queries.gates import min_samples
from replaygate.queries.params import glob_to_like


def test_defaults_match_the_spec():
    c = cfg.Config()
    assert c.reconnect_budget_qps == 5.0
    assert c.recovery_threshold_s == 5.0
    assert c.reinit_window_s == 30
    assert c.retry_window_s == 600
    assert min_samples(c)["cross_stream_acceptances"] == 100_000
    assert min_samples(c)["recovery_p99"] == 20
    assert min_samples(c)["write_idempotency"] == 1


def test_load_overrides(tmp_path):
    p = tmp_path / "r.toml"
    p.write_text(
        'reconnect_budget_qps = 2\norigin_allowlist = ["https://a.example"]\n'
        "[min_samples]\nrecovery_p99 = 5\n"
    )
    c = cfg.load(p)
    assert c.reconnect_budget_qps == 2.0
    assert c.origin_allowlist == ("https://a.example",)
    assert min_samples(c)["recovery_p99"] == 5
    assert min_samples(c)["cross_stream_acceptances"] == 100_000


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("budget = 3\n", "unknown key 'budget'"),
        ('reconnect_budget_qps = "fast"\n', "reconnect_budget_qps must be"),
        ("origin_allowlist = [1]\n", "origin_allowlist[] must be str"),
        ("[min_samples]\nno_gate = 1\n", "unknown gate 'no_gate'"),
        ("[min_samples]\nrecovery_p99 = 1.5\n", "min_samples.recovery_p99 must be int"),
        ("recovery_threshold_s = true\n", "recovery_threshold_s must be"),
        ("this is not toml", "not valid TOML"),
    ],
)
def test_errors_name_the_key(tmp_path, text, needle):
    p = tmp_path / "r.toml"
    p.write_text(text)
    with pytest.raises(ReplaygateError) as exc:
        load_config(p)
    assert needle in str(exc.value)
    assert "\n" not in str(exc.value)


def test_missing_file():
    with pytest.raises(ReplaygateError, match="no such file"):
        cfg.load("/nonexistent/replaygate.toml")


def test_digest_changes_with_settings():
    assert cfg.Config().digest() != cfg.from_mapping({"retry_window_s": 60}).digest()


def test_glob_to_like_escapes():
    assert glob_to_like("http://localhost:*") == "http://localhost:%"
    assert glob_to_like("https://a_b%.example") == "https://a\\_b\\%.example"
