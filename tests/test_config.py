"""Configuration: defaults, overrides, and one-line errors naming the key."""

from __future__ import annotations

import pytest

from replaygate.api import load_config
from replaygate.core import config as cfg
from replaygate.core.errors import ReplaygateError
from replaygate.queries.gatedefs import min_samples
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


def test_an_hmac_key_that_is_not_utf8_is_used_byte_for_byte(monkeypatch, tmp_path):
    import os

    from replaygate.core.config import Config
    from replaygate.ingest.redact import hmac_hex

    raw = b"\xff\xfe-random-key-\x80"
    monkeypatch.setenv("RG_TEST_KEY", os.fsdecode(raw))
    conf = Config(hmac_key_env="RG_TEST_KEY")
    assert conf.hmac_key() == raw
    # And an ingest with it hashes ids with exactly those bytes, as the servers do.
    from replaygate.core import db as dbm
    from replaygate.ingest.load import ingest

    log = tmp_path / "proxy-ids.jsonl"
    log.write_text(
        '{"schema":"mcpProxyLog.v1","ts":"2026-11-28T10:00:00Z","method":"POST",'
        '"status":200,"path":"/mcp","session_id":"abc"}\n'
    )
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    rep = ingest(con, [str(log)], conf)
    assert rep.files[0].rows == {"proxy": 1}, rep.files[0]
    (h,) = con.execute("SELECT session_hmac FROM proxy").fetchone()
    assert h == hmac_hex(raw, "abc")
