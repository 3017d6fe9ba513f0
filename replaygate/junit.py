"""The gates evaluation as JUnit XML, for CI systems that show test reports: one test
suite per stage, one test case per gate (fail = failure, insufficient = error, not
applicable = skipped).

Stage names, reasons and finding details come from logged, attacker-controlled data:
ElementTree escapes markup; queries/escape.py `xml_text` replaces what XML 1.0 cannot
carry at all and shows bidi and zero-width characters by code point.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from replaygate.api import Decision, Status
from replaygate.api import xml_text as clean


def render(doc: dict[str, Any]) -> str:
    root = ET.Element("testsuites", name="replaygate gates")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for stage in doc.get("stages", []):
        suite = ET.SubElement(root, "testsuite", name=clean(f"gates {stage['stage']}"))
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        props = ET.SubElement(suite, "properties")
        for key in ("stage", "release", "stage_name", "scope", "decision"):
            ET.SubElement(props, "property", name=key, value=clean(stage.get(key)))
        for gate in stage["gates"]:
            counts["tests"] += 1
            case = ET.SubElement(
                suite, "testcase", name=clean(gate["id"]), classname=clean(stage["stage"])
            )
            reason = clean(gate.get("reason"))
            if gate["status"] == Status.FAIL:
                counts["failures"] += 1
                el = ET.SubElement(case, "failure", message=reason, type=Decision.ROLLBACK.value)
                el.text = reason
            elif gate["status"] == Status.INSUFFICIENT:
                counts["errors"] += 1
                el = ET.SubElement(case, "error", message=reason, type=Decision.HOLD.value)
                el.text = reason
            elif gate["status"] == Status.NOT_APPLICABLE:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=reason)
            else:
                ET.SubElement(case, "system-out").text = reason
        for k, v in counts.items():
            suite.set(k, str(v))
            totals[k] += v
    for k, v in totals.items():
        root.set(k, str(v))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
