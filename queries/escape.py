"""Escaping for every output context: Markdown, CSV, shell commands, terminal text,
Slack mrkdwn, HTML text (before autoescaping), table cells on screen.

Logged fields (origins, user agents, tool names, idempotency keys, stage names, file
names) are attacker-controlled. Whatever leaves replaygate as a document goes through
one of these functions for the context it lands in; HTML is rendered from templates
with autoescaping (dashboard/templates), never assembled from strings.
"""

from __future__ import annotations

import html
import math
import re
import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

# Control characters (C0, DEL, C1) and the Unicode line/paragraph separators: in a
# Markdown line they could start a new block; on a terminal they are escape sequences.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# Characters that change how text around them looks without being seen: bidi controls
# (a stage name can make "ROLLBACK" read "PROCEED"), zero-width ones (two stages that
# look alike), the soft hyphen. They are shown by their code point instead.
_INVISIBLE = re.compile(
    "[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)
# The characters with a meaning inside a Markdown line (CommonMark + GFM tables and
# strikethrough); the rest only matter at the start of a line, see md_text.
_MD_INLINE = re.compile(r"([\\`*_\[\]<>&|~!#])")
_MD_STREAMLIT = re.compile(r"([\\`*_\[\]<>&|~!#$:])")
_MD_LINE_START = re.compile(r"^(\s*>|\s*[-+]|\s*\d{1,9}[.)])(?=\s|$)")


def visible(value: object) -> str:
    """The value with every invisible formatting character (bidi, zero-width) shown as
    its code point, `[U+202E]`: what a reader sees is what the text holds."""
    return _INVISIBLE.sub(lambda m: f"[U+{ord(m[0]):04X}]", "" if value is None else str(value))


def one_line(value: object) -> str:
    """The value as text on one line: every control character becomes a space, every
    invisible formatting character its code point (`visible`)."""
    return visible(_CONTROL.sub(" ", "" if value is None else str(value)))


# Slack mrkdwn has no escape character: its formatting marks become look-alikes that
# mean nothing to it (bold, italic, strike, code, `:emoji:`); &, < and > are entities.
_SLACK = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        "*": "\u2217",
        "~": "\u223c",
        "`": "\u02cb",
    }
)
# `_` opens italics and `:` an emoji only at a word's edge: `raw_session_ids:` stays.
_SLACK_EDGE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|:(?=[A-Za-z0-9_+-])")


def slack_text(value: object) -> str:
    """Data for a Slack message (mrkdwn): on one line (a line break in a stage name
    cannot forge a headline), no link, mention, emphasis, code or emoji from it."""
    text = one_line(value).translate(_SLACK)
    return _SLACK_EDGE.sub(lambda m: "\u02cd" if m[0] == "_" else "\ua789", text)


# What HTML shows of a control character is nothing (or a box): tab and line feed stay
# (a <pre> block keeps them), every other one becomes a space.
_HTML_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def html_text(value: object) -> str:
    """Data for an HTML text node or attribute, before autoescaping: bidi and zero-width
    characters shown by code point (`visible`), so a stage name cannot make a ROLLBACK
    heading or title read PROCEED, and control characters as spaces."""
    return visible(_HTML_CONTROL.sub(" ", "" if value is None else str(value)))


# Characters XML 1.0 forbids even as references (C0 controls but tab, LF, CR; surrogates;
# U+FFFE, U+FFFF).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(value: object) -> str:
    """Data for an XML text or attribute value, before the serialiser escapes markup
    (JUnit reports): what XML 1.0 cannot carry becomes U+FFFD, bidi and zero-width
    characters are shown by code point (a CI page shows a stage as it is)."""
    return visible(_NOT_XML.sub("\ufffd", "" if value is None else str(value)))


def terminal(value: object) -> str:
    """Data for a terminal line: no escape sequence, line break, bidi or zero-width
    character reaches it (`one_line`)."""
    return one_line(value)


def md_text(value: object, streamlit: bool = False) -> str:
    """Data as literal Markdown inline text: nothing in it can start, close or nest a
    construct (code span, emphasis, link, HTML, heading, table cell, list).

    Line breaks are removed (the value cannot start a block), every character with an
    inline meaning is backslash-escaped (CommonMark allows it before any ASCII
    punctuation), and so is a list or quote marker at the start. Streamlit's Markdown
    also reads `:name:` (icons, emoji, `:red[...]`) and `$...$` (math): `streamlit=True`
    escapes those too.
    """
    text = (_MD_STREAMLIT if streamlit else _MD_INLINE).sub(r"\\\1", one_line(value))
    return _MD_LINE_START.sub(lambda m: m[1][:-1] + "\\" + m[1][-1], text)


def md_code(value: object) -> str:
    """Data as a Markdown code span that the data cannot close.

    A code span ends only at a backtick run as long as the one that opened it, so the
    fence is one longer than the longest run inside. `|` is escaped so a table row
    keeps its cells (GFM tables split before inline parsing, also in code spans).
    """
    text = one_line(value).replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) or not text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# OWASP: a cell starting with one of these is read as a formula by spreadsheets.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


def csv_cell(value: object) -> object:
    """A CSV cell that no spreadsheet evaluates: text starting with = + - @ tab or CR
    gets a leading apostrophe. Numbers (and numeric text such as -5) stay as they are."""
    if not isinstance(value, str) or not value.startswith(_FORMULA_START):
        return value
    try:
        if math.isfinite(float(value)):
            return value
    except ValueError:
        pass
    return "'" + value


def csv_frame(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of a pandas DataFrame with every text cell (and column name) made safe."""
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object or str(out[col].dtype).startswith(("string", "str")):
            out[col] = out[col].map(csv_cell)
    out.columns = [csv_cell(str(c)) for c in out.columns]
    return out


# A cell that needs `one_line` at all: most do not, and a table can be long.
_NOT_ONE_LINE = re.compile(f"{_CONTROL.pattern}|{_INVISIBLE.pattern}")


def _cell(value: object) -> object:
    return one_line(value) if isinstance(value, str) and _NOT_ONE_LINE.search(value) else value


def cell_frame(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of a DataFrame for a table on screen (the dashboard's `st.dataframe`):
    every text cell and column name on one line, with bidi and zero-width characters
    shown by code point (`one_line`), so a stage, Origin, user agent, tool name or key
    cannot reorder a row or look like another. Other cells (numbers, times) stay."""
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object or str(out[col].dtype).startswith(("string", "str")):
            out[col] = out[col].map(_cell, na_action="ignore")
    out.columns = [_cell(c) for c in out.columns]
    return out


def csv_bytes(df: pd.DataFrame) -> bytes:
    """A DataFrame as UTF-8 CSV with formula cells neutralised (for downloads)."""
    text: str = csv_frame(df).to_csv(index=False)
    return text.encode("utf-8")


def _ansi_c(arg: str) -> str:
    def one(ch: str) -> str:
        if ch in "\\'":
            return "\\" + ch
        if _CONTROL.match(ch):
            return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"
        return ch

    return "$'" + "".join(one(c) for c in arg) + "'"


def shell_command(argv: list[str]) -> str:
    """One line that a shell (bash, zsh, ksh, POSIX 2024 sh) runs as exactly these
    arguments: shlex quoting, and $'...' for an argument with control characters, so
    the command never spans lines or carries a raw escape sequence."""
    return " ".join(_ansi_c(a) if _CONTROL.search(a) else shlex.quote(a) for a in map(str, argv))


def md_code_block(text: str, info: str = "") -> str:
    """A fenced Markdown code block that no line of `text` can close: the fence is
    longer than any backtick run inside."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def safe_file_name(stem: str, ext: str) -> str:
    """A download's file name from data: letters, digits, '.', '_' and '-' only."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", one_line(stem)).strip("._") or "report"
    return f"{clean[:100]}.{ext}"


def plot_text(value: object) -> str:
    """Data as a plotly label: plotly reads a subset of HTML (<a href>, <b>, <br>) in
    titles, names and annotations, and shows entities as their characters."""
    return html.escape(one_line(value), quote=False)
