"""The one SQL header reader (queries/headers.py): every folder's files are read by it, and a
key it does not know or a value of the wrong form stops the loading with one line naming
the file and the line."""

from __future__ import annotations

import pytest

from replaygate.queries import catalog, gatedefs, headers, named
from replaygate.queries.headers import HeaderError

DETECTOR = """-- name: toy
-- invariant: nothing is wrong
-- severity: high
-- needs: proxy
-- unit: request
SELECT 1
"""


def _detector(tmp_path, text, name="toy"):
    p = tmp_path / f"{name}.sql"
    p.write_text(text)
    return catalog.parse(p, "detectors")


def test_every_query_of_the_package_reads():
    for kind in ("detectors", "gates", "prep"):
        assert catalog.load(kind)
    for group in ("dashboard", "facts"):
        assert named.load(group)


def test_an_unknown_key_names_file_and_line(tmp_path):
    with pytest.raises(HeaderError) as e:
        _detector(tmp_path, DETECTOR.replace("-- unit:", "-- severty: low\n-- unit:"))
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'toy.sql'}:5: unknown header key 'severty'")
    assert "\n" not in msg


def test_a_key_of_another_folder_is_unknown_there(tmp_path):
    with pytest.raises(HeaderError, match=r"toy.sql:6: unknown header key 'kind' for detectors"):
        _detector(tmp_path, DETECTOR.replace("SELECT", "-- kind: count\nSELECT"))


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("-- severity: high, urgent", "'urgent' is not one of critical, high, medium, low"),
        ("-- needs: proxies", "'proxies' is not a record type"),
        ("-- facts: proxy.nonsense", "unknown fact 'proxy.nonsense'"),
        ("-- units: proxy WHEN x", "is not `<table> [WHERE <predicate>] [BY <unit key>]`"),
        ("-- params: flt, Bad-Name", "'Bad-Name' is not a lower-case name"),
        ("-- other_bases: event", "'event' is not a record type"),
        ("-- page: Streams & replay", "is not a lower-case name"),
    ],
)
def test_a_malformed_value_names_file_and_line(tmp_path, line, why):
    key = line[3:].split(":")[0]
    lines = DETECTOR.splitlines()
    at = next((i for i, x in enumerate(lines) if x.startswith(f"-- {key}:")), len(lines) - 1)
    lines[at : at + (lines[at].startswith("--"))] = [line]
    with pytest.raises(HeaderError) as e:
        _detector(tmp_path, "\n".join(lines))
    assert str(e.value).startswith(f"{tmp_path / 'toy.sql'}:{at + 1}: -- {key}:")
    assert why in str(e.value)


def test_a_missing_required_key_and_a_repeated_key(tmp_path):
    with pytest.raises(HeaderError, match=r"toy.sql:1: the header has no -- invariant:"):
        _detector(tmp_path, DETECTOR.replace("-- invariant: nothing is wrong\n", ""))
    with pytest.raises(HeaderError, match=r"toy.sql:5: -- severity: given twice"):
        _detector(tmp_path, DETECTOR.replace("-- unit:", "-- severity: low\n-- unit:"))


def test_a_detector_is_named_by_its_file(tmp_path):
    with pytest.raises(HeaderError, match=r"other.sql:1: -- name: 'toy' is not the file's name"):
        _detector(tmp_path, DETECTOR, name="other")


def test_the_keys_other_branches_use_are_known(tmp_path):
    q = _detector(tmp_path, DETECTOR.replace("SELECT", "-- other_bases: events\nSELECT"))
    assert q.header.list("other_bases") == ("events",)


def test_typed_readings(tmp_path):
    q = _detector(
        tmp_path,
        DETECTOR.replace(
            "SELECT",
            "-- facts: proxy.initialize, proxy.principal|proxy.client_addr\n"
            "-- undecided: client identity\n-- params: none\nSELECT",
        ),
    )
    h = q.header
    assert h.alternatives("facts") == (
        ("proxy.initialize",),
        ("proxy.principal", "proxy.client_addr"),
    )
    assert h.list("undecided") == ("client identity",)
    assert h.list("params") == ()
    assert h.line("facts") == 6


def _gate_header(tmp_path, **changes):
    text = (catalog.SQL_DIR / "gates" / "01_cross_stream_acceptances.sql").read_text()
    for old, new in changes.items():
        assert f"-- {old}:" in text
        text = "\n".join(
            f"-- {old}: {new}" if line.startswith(f"-- {old}:") else line
            for line in text.splitlines()
        )
    p = tmp_path / "01_toy.sql"
    p.write_text(text)
    return catalog.parse(p, "gates")


def test_a_gate_header_is_checked_for_what_its_values_mean(tmp_path):
    assert gatedefs._gate(_gate_header(tmp_path)).id == "cross_stream_acceptances"
    with pytest.raises(HeaderError, match=r"01_toy.sql:\d+: -- kind: 'ratio' is not one of"):
        gatedefs._gate(_gate_header(tmp_path, kind="ratio"))
    with pytest.raises(HeaderError, match=r"-- detectors: no detector named 'nope'"):
        gatedefs._gate(_gate_header(tmp_path, detectors="nope"))
    with pytest.raises(HeaderError, match=r"-- min_sample: '1.5' is not a whole number"):
        _gate_header(tmp_path, min_sample="1.5")


def test_named_queries_are_checked_each(tmp_path):
    p = tmp_path / "pages.sql"
    p.write_text(
        "-- name: one\n-- purpose: a\n-- filters: none\nSELECT 1;\n\n"
        "-- name: two\n-- purpose: b\n--   continued\n-- filters: stage, colour\nSELECT 2;\n"
    )
    with pytest.raises(HeaderError, match=r"pages.sql:9: -- filters: 'colour' is not one of"):
        named.parse(p)
    p.write_text(p.read_text().replace(", colour", ""))
    one, two = named.parse(p)
    assert (one.name, one.filters, one.body()) == ("one", (), "SELECT 1;")
    assert (two.name, two.filters, two.header["purpose"]) == ("two", ("stage",), "b continued")


def test_split_reads_none_as_empty():
    assert headers.split("none") == headers.split("-") == headers.split("") == ()
    assert headers.split("a, b") == ("a", "b")


def test_a_gate_says_its_failures_are_broken_down_by_cause(tmp_path):
    # the reinit gate's reason counts "not re-initialized" and "used after the 404" apart
    assert gatedefs.BY_ID["reinit_after_404"].causes
    assert not gatedefs._gate(_gate_header(tmp_path)).causes
    p = tmp_path / "04_toy.sql"
    text = (catalog.SQL_DIR / "gates" / "04_reinit_after_404.sql").read_text()
    p.write_text(text.replace("-- causes: true", "-- causes: yes"))
    with pytest.raises(HeaderError, match=r"04_toy.sql:\d+: -- causes: 'yes' is not true or false"):
        catalog.parse(p, "gates")
