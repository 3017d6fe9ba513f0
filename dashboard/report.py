"""Render the audit report (audit/reportdoc.py) as Markdown, self-contained HTML or PDF
(evidence bundles: dashboard/bundle.py).

Never imports streamlit, so `replaygate report` works without the UI; the HTML report's
charts are inline SVG (dashboard/svgchart.py), so the report carries no plotting library.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from replaygate.api import (
    UNIT_COLUMNS,
    ReplaygateError,
    Status,
    html_text,
    md_code,
    md_code_block,
    md_text,
    outputs,
    staging,
)

from . import svgchart

STATUS_WORD = {s: s.verdict for s in Status}


def _format(fi: dict[str, Any]) -> str:
    """A file's format as the report names it: `jsonl`, `jsonl, gzip`."""
    return ", ".join(x for x in (fi["format"], fi.get("compression")) if x)


def _unit_md(item: dict[str, Any]) -> str:
    return ", ".join(f"{k} {md_code(item[k])}" for k in UNIT_COLUMNS if item[k] is not None)


def _guide_anchor(detector: str) -> str:
    # GitHub's anchor for the heading "Field guide: `<detector>`"; the HTML template sets
    # the same id.
    return f"field-guide-{detector}"


def _guide_link(detector: str) -> str:
    return f"[field guide](#{_guide_anchor(detector)})"


def to_markdown(doc: dict[str, Any]) -> str:
    """The report as Markdown. Every value from the data goes through md_text or
    md_code (queries/escape.py), so no logged field can add or close a construct."""
    s = doc["scope"]
    out = [
        f"# Rollout audit: {md_text(s['stage'])} — {doc['decision']}",
        "",
        f"replaygate {doc['tool']['version']} · data as of {md_text(doc['as_of'])} · "
        f"report format {doc['report_version']}",
        "",
        "## Scope",
        "",
        f"- stage {md_code(s['stage'])}, scope {md_code(s['scope'])}, window "
        f"{md_text(s['window']['start'])} → {md_text(s['window']['end'] or 'open')}"
        + (" (rolled back)" if s["rolled_back"] else ""),
        f"- cohort: {s['cohort_sessions']:,} sessions; protocol revisions: "
        + (", ".join(f"{md_code(k)} {v:,}" for k, v in s["protocol_revisions"].items()) or "none"),
        "",
        "## Decision",
        "",
        f"**{doc['decision']}**",
        "",
    ]
    out += [f"- {md_text(r)}" for r in doc["reasons"]] or ["- every gate passed"]
    out += [
        "",
        "## Gates",
        "",
        "| gate | status | value | threshold | sample | minimum | 95 % upper bound | findings |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in doc["gates"]:
        out.append(
            f"| {md_text(g['title'])} ({md_code(g['id'])}) | {md_text(g['display_status'])} | "
            f"{md_text(g['display_value'])} | {md_text(g['display_threshold'])} | "
            f"{g['sample']:,} | {g['min_sample']:,} | {md_text(g['display_bound'])} | "
            f"{g['evidence_count']} |"
        )
    out += ["", "## Rollback verification", ""]
    if not doc["rollback_verification"]:
        out.append("No rollback in the rollout log.")
    for rb in doc["rollback_verification"]:
        out.append(
            f"- {md_code(rb['stage'])} rolled back at {md_text(rb['rollback_at'])}: "
            + ("verified" if rb["verified"] else f"**{md_text(rb['status'])}**")
            + "; "
            + ", ".join(f"{md_text(k)}: {md_text(v)}" for k, v in rb["checks"].items())
            + "".join(
                f"; {md_text(k)} cannot tell: {md_text(v)}"
                for k, v in (rb.get("cannot_tell") or {}).items()
                if v
            )
            + f"; new streams in the window: {md_text(rb['new_streams_in_window'])}, resumed: "
            f"{md_text(rb['new_streams_resumed'])}"
        )
    out += _history_markdown(doc)
    f = doc["findings"]
    out += ["", f"## Findings in this stage: {f['total']:,}", ""]
    if f["by_detector"]:
        out += ["| detector | findings | by severity | field guide |", "|---|---|---|---|"]
        for det, d in f["by_detector"].items():
            sev = ", ".join(f"{md_text(k)} {v}" for k, v in sorted(d["by_severity"].items()))
            out.append(f"| {md_code(det)} | {d['count']} | {sev} | {_guide_link(det)} |")
        for det, d in f["by_detector"].items():
            out += [
                "",
                f"### {md_code(det)}",
                "",
                f"What it means and the usual fix: {_guide_link(det)}",
                "",
            ]
            for item in d.get("top", []):
                out.append(
                    f"- {md_text(item['ts'])} {md_text(item['severity'])}: "
                    f"{_unit_md(item) or '—'}; "
                    f"evidence {md_code(json.dumps(item['detail'], sort_keys=True))}"
                )
    if doc.get("cannot_tell"):
        out += [
            "",
            "## Cannot tell in this stage",
            "",
            "This stage's units whose verdict needs a fact the file cannot show: neither "
            "findings nor passes.",
            "",
            "| detector | file | cannot show | units |",
            "|---|---|---|---|",
        ]
        for e in doc["cannot_tell"]:
            out.append(
                f"| {md_code(e['detector'])} | {md_code(e['file'])} | {md_code(e['missing'])} | "
                f"{e['units']:,} |"
            )
    blind = [
        (det, e)
        for det, c in sorted(doc.get("coverage", {}).items())
        if isinstance(c, dict)
        for e in c.get("cannot_tell", [])
    ]
    if blind:
        out += [
            "",
            "## Cannot tell",
            "",
            "Units whose verdict needs a fact the file cannot show, in the whole database: "
            "neither findings nor passes.",
            "",
            "| detector | file | cannot show | units |",
            "|---|---|---|---|",
        ]
        for det, e in blind:
            out.append(
                f"| {md_code(det)} | {md_code(e['file'])} | {md_code(e['missing'])} | "
                f"{e['units']:,} |"
            )
    out += [
        "",
        "## Inputs",
        "",
        f"{len(doc['inputs']['files'])} files; {doc['inputs']['quarantined_rows']:,} rows "
        "quarantined.",
        "",
        "| file | format | rows | quarantined | SHA-256 |",
        "|---|---|---|---|---|",
    ]
    for fi in doc["inputs"]["files"]:
        out.append(
            f"| {md_code(fi['path'])} | {md_text(_format(fi))} | {fi['rows']:,} | "
            f"{fi['quarantined']:,} | "
            + (
                md_code(fi["sha256"])
                if fi["sha256"]
                else "not available: changed or gone since read"
            )
            + " |"
        )
    if doc.get("field_guide"):
        out += [
            "",
            "## Field guide",
            "",
            "For each detector with findings here: the failure it catches in real deployments,",
            "what it looks like in the dashboard and the usual fix (all detectors:",
            "docs/field-guide.md).",
        ]
        for e in doc["field_guide"]:
            out += ["", f"### Field guide: {md_code(e['detector'])}", ""]
            out += [
                f"- **Seen in the field:** {md_text(e['failure'])}",
                *([f"- **Public reports:** {md_text(e['reports'])}"] if e["reports"] else []),
                f"- **In the dashboard:** {md_text(e['dashboard'])}",
                f"- **Usual fix:** {md_text(e['fix'])}",
            ]
    c = doc["configuration"]
    out += [
        "",
        "## Configuration",
        "",
        f"SHA-256 {md_code(c['sha256'])}",
        "",
        md_code_block(json.dumps(c["settings"], indent=2, sort_keys=True), "json"),
        "",
        "## Methodology",
        "",
        "Each detector is one SQL file; its invariant, as stated in its header:",
        "",
        "| detector | severity | invariant |",
        "|---|---|---|",
    ]
    for m in doc["methodology"]:
        out.append(
            f"| {md_code(m['detector'])} | {md_text(m['severity'])} | {md_text(m['invariant'])} |"
        )
    out += [
        "",
        "## Redaction",
        "",
        md_text(doc["redaction"]),
        "",
        "## Reproduce",
        "",
        md_code_block(doc["reproduce"]),
        "",
    ]
    return "\n".join(out)


def _history_markdown(doc: dict[str, Any]) -> list[str]:
    h = doc.get("decision_history") or {"timeline": [], "chain": "intact"}
    out = ["", "## Decision history", ""]
    if not h["timeline"]:
        return out + [
            "No decision was recorded for this stage (`replaygate gates --record`, "
            "`watch` and `serve` record them): the decision above is computed from the "
            f"data as of {doc['as_of']}, not the one in force at any earlier time."
        ]
    out += [
        "What replaygate had recorded, oldest first: each change of the decision and "
        "each operator action. The decision in force at a time is the newest evaluation "
        "recorded at or before it.",
        "",
        "| recorded (UTC) | event | decision | in force until | data version | "
        "configuration | evaluations |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in h["timeline"]:
        if e["kind"] == "evaluation":
            event = f"evaluation ({md_text(e['source'])})"
            decision = (f"{e['previous']} → " if e["previous"] else "") + f"**{e['decision']}**"
            until = e["until"] or "now"
            n = str(e["evaluations"])
        else:
            event = f"{e['kind']} by {md_text(e['actor'])}"
            if e["note"]:
                event += f": {md_text(e['note'])}"
            decision = (
                f"{e['in_force']} overridden to **{e['decision']}**"
                if e["kind"] == "override"
                else f"{e['decision']} acknowledged"
            )
            until, n = "—", "—"
        out.append(
            f"| {e['recorded_at']} | {event} | {decision} | {until} | {e['data_version']} | "
            f"`{e['config_sha256'][:12]}` | {n} |"
        )
    if h["chain"] != "intact":
        out += ["", f"**The history does not verify: {md_text(h['chain'])}.**"]
    return out


def to_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;
margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
table{border-collapse:collapse;width:100%;margin:.5em 0;font-size:.9em}
th,td{border:1px solid #ddd;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f5f5f5} code{font-size:.9em;word-break:break-all}
.decision{display:inline-block;padding:.3em .8em;border-radius:6px;color:#fff;font-weight:700}
.PROCEED{background:#2e7d32}.HOLD{background:#f9a825}.ROLLBACK{background:#c62828}
.chart{page-break-inside:avoid;break-inside:avoid;margin:1em 0}
@media print{body{margin:0;max-width:none}.chart{page-break-inside:avoid}
h2{page-break-after:avoid}}
"""


_TEMPLATES = Path(__file__).parent / "templates"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        autoescape=True,  # every value from the data is HTML-escaped
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        # Every value shown is made visible before it is escaped: a bidi override or a
        # zero-width character in a stage name cannot reorder or hide a heading's words.
        # Our own markup (CSS, scripts, charts) is Markup and passes untouched.
        finalize=lambda v: v if isinstance(v, Markup) or not isinstance(v, str) else html_text(v),
    )
    env.filters["thousands"] = lambda n: f"{n:,}"
    env.filters["file_format"] = _format
    env.filters["tojson_sorted"] = lambda v, indent=None: json.dumps(
        v, indent=indent, sort_keys=True, default=str
    )
    return env


def to_html(doc: dict[str, Any]) -> str:
    """One self-contained HTML file from the autoescaping template: no network, no
    script, its charts inline SVG (a few kilobytes, not a plotting library)."""
    template = _environment().get_template("report.html.j2")
    by = doc["findings"]["by_detector"]
    return template.render(
        doc=doc,
        s=doc["scope"],
        unit_keys=UNIT_COLUMNS,
        css=Markup(_CSS),
        gate_rows=svgchart.gate_rows(doc["gates"]),
        finding_bars=svgchart.bars({d: v["count"] for d, v in by.items()}, "Findings by detector"),
    )


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


# Where a PDF is printed from (ingest/staging.py).
PDF_STAGING = "replaygate-pdf-"

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-pdf-header-footer",
]


def to_pdf(doc: dict[str, Any], out: Path) -> None:
    exe = chromium()
    if exe is None:
        raise ReplaygateError(
            "PDF output needs chromium (apt-get install chromium); "
            "use --format html and print it instead"
        )
    # Chromium's profile is tens of MB: one a killed run left is removed by the next.
    with staging.folder(tempfile.gettempdir(), PDF_STAGING) as tmp:
        src = Path(tmp) / "report.html"
        src.write_text(to_html(doc), encoding="utf-8")
        r = subprocess.run(
            [
                exe,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={tmp}/profile",
                "--virtual-time-budget=5000",
                f"--print-to-pdf={out.resolve()}",
                src.as_uri(),
            ],
            capture_output=True,
            timeout=120,
        )
    # `out` may be an empty file made for it (the output guard's temporary file).
    if r.returncode != 0 or not out.exists() or out.stat().st_size == 0:
        raise ReplaygateError("chromium could not print the PDF")


def write(doc: dict[str, Any], fmt: str, out: Path, guard: outputs.Guard) -> None:
    """Write the report through the output guard: never onto the database, its history,
    the configuration or an input, never through a link, and whole or not at all."""
    if fmt not in ("md", "json", "html", "pdf"):
        raise ReplaygateError(f"unknown report format {fmt!r}")
    if fmt == "pdf":
        with guard.replacing(out) as tmp:
            to_pdf(doc, tmp)
        return
    text = {"md": to_markdown, "json": to_json, "html": to_html}[fmt](doc)
    guard.write_text(out, text)
