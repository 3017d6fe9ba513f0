"""The DuckDB SQL of queries/sql as Spark SQL, derived, never written twice.

Every prepare step, detector and the ingest validation are stated once, in DuckDB's
dialect. sqlglot parses that statement and writes it for Spark; what sqlglot cannot
carry over by itself (a DuckDB-only construct, or one it translates with other
semantics) is rewritten here on the parsed tree, one function per construct, each
listed in REWRITES with what it does (docs/spark.md prints the list). A function that
is neither Spark's nor rewritten here fails the translation (`Untranslatable`), so a
detector that gains a construct nobody rewrote fails its test, never runs wrong.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import sqlglot
from sqlglot import exp, jsonpath

from replaygate.queries import catalog


class Untranslatable(ValueError):
    """A DuckDB construct with no Spark form here (yet)."""


@dataclass(frozen=True)
class Macro:
    name: str
    params: tuple[str, ...]
    body: exp.Expression


_MACRO = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?MACRO\s+(\w+)\s*\(([^)]*)\)\s+AS\s+(.*)", re.S)


def parse(sql: str) -> exp.Expression:
    tree = sqlglot.parse_one(sql, read="duckdb")
    if tree is None:  # pragma: no cover - sqlglot returns None only for empty text
        raise Untranslatable("empty statement")
    return tree


@cache
def macros() -> dict[str, Macro]:
    """The shared predicates of queries/sql/prep/00_macros.sql, parsed."""
    out: dict[str, Macro] = {}
    for q in catalog.load("prep"):
        for stmt in q.statements():
            m = _MACRO.match(stmt)
            # (a table macro, `AS TABLE`, is DuckDB's alone: no query Spark runs calls one)
            if m and not re.match(r"TABLE\b", m[3], re.I):
                params = tuple(p.strip() for p in m[2].split(",") if p.strip())
                body = parse(m[3])
                mark_list_lengths(body, m[3])
                out[m[1].lower()] = Macro(m[1].lower(), params, body)
    return out


def is_macro(stmt: str) -> bool:
    return bool(_MACRO.match(stmt.strip()))


# -- the rewrites, one per construct ------------------------------------------------------


def _fn_name(node: exp.Expression) -> str:
    return node.name.lower() if isinstance(node, exp.Anonymous) else ""


def expand_macros(node: exp.Expression) -> exp.Expression:
    """A DuckDB macro call becomes its body with the arguments in place (Spark SQL has
    no macros; the body stays the one statement in 00_macros.sql)."""
    m = macros().get(_fn_name(node))
    if m is None:
        return node
    args = list(node.expressions)
    if len(args) != len(m.params):
        raise Untranslatable(f"macro {m.name} takes {len(m.params)} arguments")
    bound = dict(zip(m.params, args, strict=True))

    def subst(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not n.table and n.name in bound:
            return exp.Paren(this=bound[n.name].copy())
        return n

    body = m.body.copy().transform(subst)
    # A macro may call another one, and record_order, which is written as its struct (the
    # rewrite before this one) rather than expanded.
    return exp.Paren(this=body.transform(record_order).transform(expand_macros))


def record_order(node: exp.Expression) -> exp.Expression:
    """`record_order(ts, file_id, pos)`: DuckDB packs a record's place in its log into one
    number (00_macros.sql) so that arg_min/arg_max compare integers; Spark orders by the
    struct `(ts, file_id, pos)` itself, as the query did before."""
    if _fn_name(node) != "record_order":
        return node
    if len(node.expressions) != 3:
        raise Untranslatable("record_order takes 3 arguments")
    return exp.Tuple(expressions=[a.copy() for a in node.expressions])


def _anon(name: str, *args: exp.Expression) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))


def _sql(text: str) -> exp.Expression:
    return sqlglot.parse_one(text, read="spark")


def epoch_ms(node: exp.Expression) -> exp.Expression:
    """`epoch_ms(timestamp)` is its milliseconds (Spark `unix_millis`); `epoch_ms(integer)`
    is a timestamp (Spark `timestamp_millis`). sqlglot reads both as the second."""
    if not isinstance(node, exp.UnixToTime):
        return node
    scale = node.args.get("scale")
    if scale is None or scale.name != "3":
        return node
    arg = node.this
    numeric = isinstance(arg, exp.Literal) and not arg.is_string
    if isinstance(arg, exp.Cast | exp.TryCast) and arg.to.is_type(*exp.DataType.NUMERIC_TYPES):
        numeric = True
    return _anon("timestamp_millis" if numeric else "unix_millis", arg)


def infinity(node: exp.Expression) -> exp.Expression:
    """`'infinity'::TIMESTAMPTZ`: Spark has no infinite timestamp; the largest it holds
    stands in (and is read back as infinity: lake.py)."""
    if (
        isinstance(node, exp.Cast)
        and isinstance(node.this, exp.Literal)
        and node.this.is_string
        and node.this.name.lower() in ("infinity", "-infinity")
        and node.to.is_type(exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.TIMESTAMP)
    ):
        end = "0001-01-01 00:00:00" if node.this.name.startswith("-") else LAST_TIMESTAMP
        return _sql(f"TIMESTAMP '{end}'")
    return node


LAST_TIMESTAMP = "9999-12-31 23:59:59.999999"


def arg_min_max(node: exp.Expression) -> exp.Expression:
    """DuckDB's `arg_min`/`arg_max` skip rows whose value or ordering is NULL; Spark's
    `min_by`/`max_by` do not: the same rows are left out by a FILTER."""
    if isinstance(node, exp.Filter) and isinstance(node.this, exp.ArgMin | exp.ArgMax):
        agg, where = node.this, node.expression.this
    elif isinstance(node, exp.ArgMin | exp.ArgMax) and not isinstance(node.parent, exp.Filter):
        agg, where = node, None
    else:
        return node
    if agg.meta.get("rg_nulls"):
        return node
    agg = agg.copy()
    agg.meta["rg_nulls"] = True
    cond: exp.Expression = exp.and_(
        exp.Not(this=exp.Is(this=agg.this.copy(), expression=exp.Null())),
        exp.Not(this=exp.Is(this=agg.expression.copy(), expression=exp.Null())),
    )
    if where is not None:
        cond = exp.and_(exp.Paren(this=where.copy()), cond)
    return exp.Filter(this=agg, expression=exp.Where(this=cond))


def _ordering(order: exp.Order) -> list[exp.Expression]:
    keys = []
    for o in order.expressions:
        if o.args.get("desc"):
            raise Untranslatable("list(... ORDER BY ... DESC) has no rewrite yet")
        keys.append(o.this)
    return keys


def lists(node: exp.Expression) -> exp.Expression:
    """DuckDB `list(x [ORDER BY k])` keeps NULLs and its order; Spark's `collect_list`
    drops both. A list is collected as structs (a NULL value stays a field) and, with an
    ORDER BY, sorted by its keys (array_sort compares structs field by field), then
    unwrapped. `list(DISTINCT x)` is `collect_set` (sorted when ordered by x itself).
    Over no rows DuckDB's list is NULL, Spark's collection empty: an empty one is NULL."""
    filt = None
    agg = node
    if isinstance(node, exp.Filter) and isinstance(node.this, exp.ArrayAgg):
        filt, agg = node.expression, node.this
    elif not isinstance(node, exp.ArrayAgg) or isinstance(node.parent, exp.Filter):
        return node
    inner = agg.this
    order = None
    if isinstance(inner, exp.Order):
        order, inner = inner, inner.this
    distinct = isinstance(inner, exp.Distinct)
    value = inner.expressions[0] if distinct else inner
    if distinct:
        collected: exp.Expression = _anon("collect_set", value.copy())
        if filt is not None:
            collected = exp.Filter(this=collected, expression=filt.copy())
        if order is None:
            return _empty_is_null(collected)
        keys = _ordering(order)
        if len(keys) == 1 and keys[0] == value:
            return _empty_is_null(_anon("array_sort", collected))
        raise Untranslatable("list(DISTINCT x ORDER BY another key) has no rewrite yet")
    keys = _ordering(order) if order is not None else []
    fields = [exp.alias_(k.copy(), f"k{i}") for i, k in enumerate(keys)]
    fields.append(exp.alias_(value.copy(), "v"))
    collected = _anon("collect_list", _anon("struct", *fields))
    if filt is not None:
        collected = exp.Filter(this=collected, expression=filt.copy())
    if keys:
        collected = _anon("array_sort", collected)
    return _sql("transform(x, rg_s -> rg_s.v)").transform(
        lambda n: (
            _empty_is_null(collected)
            if isinstance(n, exp.Column) and n.name == "x" and not n.table
            else n
        )
    )


def _empty_is_null(collected: exp.Expression) -> exp.Expression:
    """`collected`, or NULL where it holds nothing (an aggregate over no rows)."""
    return _sql("CASE WHEN size(c) > 0 THEN c END").transform(
        lambda n: (
            collected.copy() if isinstance(n, exp.Column) and n.name == "c" and not n.table else n
        )
    )


def json_object(node: exp.Expression) -> exp.Expression:
    """`json_object(k, v, ...)`: `to_json(named_struct(k, v, ...))`, keeping NULL fields
    (DuckDB does) and writing timestamps as DuckDB does (`2026-11-29 07:45:01.12+00`: UTC,
    trailing zeros of the fraction dropped)."""
    if not isinstance(node, exp.JSONObject):
        return node
    args: list[exp.Expression] = []
    for kv in node.expressions:
        if not isinstance(kv, exp.JSONKeyValue):
            raise Untranslatable("json_object with a non key-value argument")
        value = kv.expression.copy()
        if isinstance(value, exp.Null):
            value = exp.cast(value, "STRING")
        args += [kv.this.copy(), value]
    text = _anon(
        "to_json",
        _anon("named_struct", *args),
        _sql("map('ignoreNullFields', 'false', 'timestampFormat', 'yyyy-MM-dd HH:mm:ss.SSSSSSx')"),
    )
    # "….120000+00" -> "….12+00"; "….000000+00" -> "…+00"
    trimmed = _anon(
        "regexp_replace",
        text,
        exp.Literal.string(r'(:\d\d)\.(\d*?)0*(\+\d\d)"'),
        exp.Literal.string('$1.$2$3"'),
    )
    return _anon(
        "regexp_replace",
        trimmed,
        exp.Literal.string(r'(:\d\d)\.(\+\d\d)"'),
        exp.Literal.string('$1$2"'),
    )


def method_calls(node: exp.Expression) -> exp.Expression:
    """DuckDB's `x.f(args)` is `f(x, args)`."""
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Anonymous | exp.Func):
        call = node.expression.copy()
        if isinstance(call, exp.Anonymous):
            return _anon(call.name, node.this.copy(), *call.expressions)
        raise Untranslatable(f"method call {call.sql('duckdb')}")
    return node


_LIST_FUNCTIONS = {
    "list_filter": "filter",
    "array_filter": "filter",
    "list_transform": "transform",
    "array_transform": "transform",
    "list_contains": "array_contains",
    "list_has_any": "arrays_overlap",
    "list_distinct": "array_distinct",
    "list_value": "array",
    "list_prepend": None,
}


def list_functions(node: exp.Expression) -> exp.Expression:
    """DuckDB's list functions by their Spark names (`list_filter` is `filter`, `len` of
    a list is `size`, `list_value` is `array`)."""
    name = _fn_name(node)
    if name in _LIST_FUNCTIONS and _LIST_FUNCTIONS[name]:
        return _anon(str(_LIST_FUNCTIONS[name]), *[a.copy() for a in node.expressions])
    if isinstance(node, exp.Length) and node.meta.get("rg_list"):
        return _anon("size", node.this.copy())
    if isinstance(node, exp.ArrayOverlaps):  # list_has_any, parsed as a node of its own
        return _anon("arrays_overlap", node.this.copy(), node.expression.copy())
    return node


def ranges(node: exp.Expression) -> exp.Expression:
    """`unnest(range(a, b))`: DuckDB's range excludes b and is empty when b <= a; Spark's
    `sequence` includes its end and counts down when it is below the start."""
    if not isinstance(node, exp.Explode) or not isinstance(node.this, exp.GenerateSeries):
        return node
    gs = node.this
    start, end = gs.args["start"], gs.args["end"]
    if gs.args.get("step") is not None:
        raise Untranslatable("range with a step has no rewrite yet")
    last = exp.Sub(this=exp.Paren(this=end.copy()), expression=exp.Literal.number(1))
    if not gs.args.get("is_end_exclusive"):
        last = end.copy()
    seq = _anon("sequence", start.copy(), _anon("greatest", start.copy(), last))
    bound = exp.Paren(this=last.copy())
    kept = _sql("filter(s, rg_x -> rg_x <= b)").transform(
        lambda n: (
            seq
            if isinstance(n, exp.Column) and n.name == "s"
            else bound
            if isinstance(n, exp.Column) and n.name == "b"
            else n
        )
    )
    return exp.Explode(this=kept)


def tuples(node: exp.Expression) -> exp.Expression:
    """Row comparison `(a, b) > (c, d)`: Spark compares no tuples; it is spelled out
    lexicographically."""
    ops = {exp.GT: exp.GT, exp.LT: exp.LT, exp.GTE: exp.GT, exp.LTE: exp.LT}
    kind = type(node)
    if kind not in ops or not isinstance(node.this, exp.Tuple):
        return node
    left, right = node.this.expressions, node.expression.expressions
    if len(left) != len(right):
        raise Untranslatable("row comparison of different widths")
    strict = ops[kind]
    out: exp.Expression | None = None
    for i in reversed(range(len(left))):
        last = i == len(left) - 1
        cmp: exp.Expression = (kind if last else strict)(
            this=left[i].copy(), expression=right[i].copy()
        )
        if out is None:
            out = cmp
        else:
            eq = exp.EQ(this=left[i].copy(), expression=right[i].copy())
            out = exp.or_(cmp, exp.and_(eq, exp.Paren(this=out)))
    assert out is not None
    return exp.Paren(this=out)


def like_escape(node: exp.Expression) -> exp.Expression:
    """`like_escape(s, pattern, e)` is `s LIKE pattern ESCAPE e`."""
    if _fn_name(node) != "like_escape":
        return node
    s, p, e = (a.copy() for a in node.expressions)
    return exp.Paren(this=exp.Escape(this=exp.Like(this=s, expression=p), expression=e))


_RE2_GROUP = re.compile(r"\\(\d)|\\(\\)|(\$)")


def regexp_replace(node: exp.Expression) -> exp.Expression:
    """`regexp_replace(s, pattern, replacement, flags)`: DuckDB replaces the first match
    unless the flags hold `g`, Spark every match; `i` is Java's `(?i)`; a group in the
    replacement is `\\1` in DuckDB, `$1` in Java (and a `$` there is literal in DuckDB).
    The first match alone: `(?s)^(.*?)(?:pattern)`, the text before it kept as group 1 (the
    shortest prefix finds the leftmost match, as a search does)."""
    if not isinstance(node, exp.RegexpReplace):
        return node
    pattern, repl = node.expression, node.args.get("replacement")
    mods = node.args.get("modifiers")
    if not (isinstance(pattern, exp.Literal) and isinstance(repl, exp.Literal)):
        raise Untranslatable("regexp_replace with a pattern or replacement that is not a literal")
    if mods is not None and not isinstance(mods, exp.Literal):
        raise Untranslatable("regexp_replace with flags that are not a literal")
    flags = mods.name if mods is not None else ""
    if set(flags) - {"g", "i"}:
        raise Untranslatable(f"regexp_replace flags {flags!r}")
    first = "g" not in flags
    shift = 1 if first else 0

    def java(m: re.Match[str]) -> str:
        if m[1] is not None:
            return f"${int(m[1]) + shift}"
        return "\\\\" if m[2] is not None else "\\$"

    text = _RE2_GROUP.sub(java, repl.name)
    regex = pattern.name
    if first:
        regex, text = f"(?s)^(.*?)(?:{regex})", "$1" + text
    if "i" in flags:
        regex = "(?i)" + regex
    return _anon(
        "regexp_replace", node.this.copy(), exp.Literal.string(regex), exp.Literal.string(text)
    )


def histogram(node: exp.Expression) -> exp.Expression:
    """`histogram(x)`: a map of each value to its count, from the collected values."""
    if _fn_name(node) != "histogram":
        return node
    (x,) = node.expressions
    listed = _anon("collect_list", x.copy())
    tmpl = _sql(
        "map_from_entries(transform(array_sort(array_distinct(l)), "
        "rg_v -> struct(rg_v, size(filter(l, rg_y -> rg_y = rg_v)))))"
    )
    return tmpl.transform(
        lambda n: listed.copy() if isinstance(n, exp.Column) and n.name == "l" else n
    )


def small_functions(node: exp.Expression) -> exp.Expression:
    """Functions with another name or form in Spark: `hash` (xxhash64),
    `make_timestamptz(µs)` (timestamp_micros), `epoch_us` (unix_micros), `isfinite`,
    `try` (non-ANSI Spark returns NULL where DuckDB's try() does), `getvariable('x')`
    (the bound parameter :x),
    `starts_with` (startswith), `suffix` (endswith), `encode` (the string's UTF-8
    bytes), `quantile_cont` (percentile)."""
    name = _fn_name(node)
    if name == "suffix":
        return _anon("endswith", *[a.copy() for a in node.expressions])
    if name == "hash":
        return _anon("xxhash64", *[a.copy() for a in node.expressions])
    if name == "make_timestamptz" and len(node.expressions) == 1:
        return _anon("timestamp_micros", node.expressions[0].copy())
    if name == "epoch_us" and len(node.expressions) == 1:
        return _anon("unix_micros", node.expressions[0].copy())
    if name == "isfinite":
        (d,) = node.expressions
        return _sql("NOT isnan(d) AND abs(d) <> double('infinity')").transform(
            lambda n: d.copy() if isinstance(n, exp.Column) and n.name == "d" else n
        )
    if name == "getvariable":
        return exp.Placeholder(this=node.expressions[0].name)
    if isinstance(node, exp.PercentileCont) and node.expression is not None:
        # quantile_cont: Spark's exact percentile interpolates between the same rows.
        return _anon("percentile", node.this.copy(), node.expression.copy())
    if isinstance(node, exp.Try):
        return node.this.copy()
    if isinstance(node, exp.Encode):
        return _anon("encode", node.this.copy(), exp.Literal.string("UTF-8"))
    return node


def decimals(node: exp.Expression) -> exp.Expression:
    """A literal with a fraction: DuckDB's arithmetic on it gives a DOUBLE, Spark's a
    DECIMAL (whose JSON differs): it is a DOUBLE in Spark too."""
    if isinstance(node, exp.Literal) and not node.is_string and "." in node.name:
        if isinstance(node.parent, exp.Cast):
            return node
        return exp.cast(node.copy(), "DOUBLE")
    return node


def asof_joins(node: exp.Expression) -> exp.Expression:
    """`l ASOF JOIN r ON <equalities> AND l.t >= r.t` pairs each left row with the right
    row of the newest r.t not after l.t. In Spark: each right row holds from its r.t up to
    the next r.t of the same keys (`lead`), and an ordinary join finds the one whose span
    holds l.t. (`>` instead of `>=`: the span is open at its start.) The other direction,
    `l.t <= r.t` (the first r.t not before l.t), spans from the previous r.t (`lag`)."""
    if not isinstance(node, exp.Join) or node.args.get("method", "").upper() != "ASOF":
        return node
    right = node.this
    alias = right.alias_or_name
    on = node.args.get("on")
    if on is None:
        raise Untranslatable("ASOF JOIN without ON")
    conds = list(on.flatten()) if isinstance(on, exp.And) else [on]
    keys: list[str] = []
    ineq = None
    for c in conds:
        if isinstance(c, exp.EQ):
            for side in (c.this, c.expression):
                if isinstance(side, exp.Column) and side.table == alias:
                    keys.append(side.name)
        elif isinstance(c, exp.GTE | exp.GT | exp.LTE | exp.LT):
            ineq = c
    if ineq is None:
        raise Untranslatable("ASOF JOIN without an inequality")
    # Normalise to: probe (left) OP build (right)
    a, b = ineq.this, ineq.expression
    op = type(ineq)
    if isinstance(a, exp.Column) and a.table == alias:
        a, b = b, a
        op = {exp.GTE: exp.LTE, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.LT: exp.GT}[op]
    if not (isinstance(b, exp.Column) and b.table == alias):
        raise Untranslatable("ASOF JOIN whose inequality does not compare with a right column")
    t = b.name
    part = ", ".join(keys)
    src = right.copy()
    src.set("alias", None)
    # The neighbouring r.t that closes the span: the next one looking back, the previous
    # one looking forward.
    step = "lead" if op in (exp.GTE, exp.GT) else "lag"
    inner = (
        f"SELECT *, {step}({t}) OVER ("
        + (f"PARTITION BY {part} " if part else "")
        + f"ORDER BY {t}) AS rg_asof_next FROM x"
    )
    sub = _sql(inner).transform(
        lambda n: src if isinstance(n, exp.Table) and n.name == "x" and not n.alias else n
    )
    nxt = exp.column("rg_asof_next", table=alias)
    closes = {exp.GTE: exp.LT, exp.GT: exp.LTE, exp.LTE: exp.GT, exp.LT: exp.GTE}
    closing: type[exp.Binary] = closes[op]
    upper = closing(this=a.copy(), expression=nxt)
    span = exp.Paren(this=exp.or_(exp.Is(this=nxt.copy(), expression=exp.Null()), upper))
    # Every condition stays in ON, so a LEFT ASOF join keeps its unmatched left rows.
    joined = exp.Join(
        this=exp.Subquery(this=sub, alias=exp.TableAlias(this=exp.to_identifier(alias))),
        on=exp.and_(on.copy(), span),
        side=node.args.get("side"),
    )
    return joined


def named_windows(node: exp.Expression) -> exp.Expression:
    """`OVER (w ROWS ...)` refines a named window (`WINDOW w AS (...)`), which Spark does
    not allow: every window is spelled out in place, and the WINDOW clause dropped."""
    if not isinstance(node, exp.Select) or not node.args.get("windows"):
        return node
    node = node.copy()
    named = {w.this.name: w for w in node.args["windows"]}
    node.set("windows", None)
    for win in node.find_all(exp.Window):
        ref = win.args.get("alias")
        if ref is None or ref.name not in named:
            continue
        base = named[ref.name]
        win.set("alias", None)
        for part in ("partition_by", "order"):
            if base.args.get(part) and not win.args.get(part):
                value = base.args[part]
                win.set(
                    part, [v.copy() for v in value] if isinstance(value, list) else value.copy()
                )
    return node


def grouped_subqueries(node: exp.Expression) -> exp.Expression:
    """A correlated scalar subquery in the SELECT list of a grouped query (correlated on
    the grouping columns, so one value per group): Spark wants it inside an aggregate,
    and `first()` of it is that value."""
    if not isinstance(node, exp.Select) or not node.args.get("group"):
        return node
    node = node.copy()
    for e in node.expressions:
        for sub in list(e.find_all(exp.Subquery)):
            if isinstance(sub.parent, exp.Exists | exp.In):
                continue
            anc, in_agg = sub.parent, False
            while anc is not None and anc is not node:
                in_agg = in_agg or isinstance(anc, exp.AggFunc)
                anc = anc.parent
            if not in_agg:
                sub.replace(_anon("first", sub.copy()))
    return node


def mark_json_values(tree: exp.Expression) -> None:
    """The columns a statement makes with `try(json(x))` (a proxy log's line, parsed
    once) are VARIANTs on Spark: the JSON operators applied to them are marked for
    json_values (an operator on JSON text elsewhere keeps sqlglot's get_json_object)."""
    names = {
        a.alias
        for a in tree.find_all(exp.Alias)
        if isinstance(a.this, exp.Try) and isinstance(a.this.this, exp.ParseJSON)
    }
    if not names:
        return
    for n in tree.find_all(exp.JSONExtractScalar, exp.JSONType, exp.Anonymous):
        if isinstance(n, exp.Anonymous) and n.name.lower() != "json_exists":
            continue
        subject = n.expressions[0] if isinstance(n, exp.Anonymous) else n.this
        if isinstance(subject, exp.Column) and not subject.table and subject.name in names:
            n.meta["rg_variant"] = True


def _variant_path(path: exp.Expression) -> exp.Literal:
    """A DuckDB JSON path (`$.a."b-c"[0]`) as a Spark variant path (`$['b-c']`...)."""
    if not isinstance(path, exp.JSONPath):
        if not (isinstance(path, exp.Literal) and path.is_string):
            raise Untranslatable("a JSON path that is not a literal")
        path = jsonpath.parse(path.this)
    out = ""
    for part in path.expressions:
        if isinstance(part, exp.JSONPathRoot):
            out += "$"
        elif isinstance(part, exp.JSONPathKey) and "'" not in str(part.this):
            out += f"['{part.this}']"
        elif isinstance(part, exp.JSONPathSubscript) and isinstance(part.this, int):
            out += f"[{part.this}]"
        else:
            raise Untranslatable(f"JSON path part {part.sql()!r}")
    return exp.Literal.string(out)


# DuckDB's json_type of a value, from Spark's schema_of_variant (`s`) and the value (`v`).
_JSON_TYPE = """CASE WHEN s IS NULL THEN NULL WHEN s = 'STRING' THEN 'VARCHAR'
    WHEN s = 'BOOLEAN' THEN 'BOOLEAN' WHEN s = 'VOID' THEN 'NULL'
    WHEN startswith(s, 'OBJECT') THEN 'OBJECT' WHEN startswith(s, 'ARRAY') THEN 'ARRAY'
    WHEN s = 'BIGINT' THEN CASE WHEN try_variant_get(v, '$', 'bigint') < 0 THEN 'BIGINT'
    ELSE 'UBIGINT' END ELSE 'DOUBLE' END"""


def json_values(node: exp.Expression) -> exp.Expression:
    """`try(json(x))` is `try_parse_json(x)`, a VARIANT parsed once; on such a column
    `j->>'path'` is `try_variant_get(j, path, 'string')` (the text of a string, a number
    or a boolean; objects and arrays as JSON), `json_exists(j, path)` is
    `try_variant_get(j, path, 'variant') IS NOT NULL` (a JSON null exists; NULL where j
    is) and
    `json_type(j, path)` is DuckDB's type name of `schema_of_variant`. A JSON path
    `$.a."b-c"[0]` is written `$['a']['b-c'][0]`."""
    if isinstance(node, exp.Try) and isinstance(node.this, exp.ParseJSON):
        return _anon("try_parse_json", node.this.this.copy())
    if not node.meta.get("rg_variant"):
        return node
    if isinstance(node, exp.JSONExtractScalar):
        path = _variant_path(node.expression)
        return _anon("try_variant_get", node.this.copy(), path, exp.Literal.string("string"))
    subject, path_arg = (
        (node.expressions[0], node.expressions[1])
        if isinstance(node, exp.Anonymous)
        else (node.this, node.expression)
    )
    if path_arg is None:
        raise Untranslatable("json_type() of a whole value")
    value = _anon(
        "try_variant_get", subject.copy(), _variant_path(path_arg), exp.Literal.string("variant")
    )
    if isinstance(node, exp.Anonymous):  # json_exists (of no value: NULL)
        found = exp.Not(this=exp.Is(this=value, expression=exp.Null()))
        return _anon("if", exp.Is(this=subject.copy(), expression=exp.Null()), exp.Null(), found)
    kind = _anon("schema_of_variant", value.copy())

    def place(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and n.name in ("s", "v") and not n.table:
            return (kind if n.name == "s" else value).copy()
        return n

    return exp.Paren(this=_sql(_JSON_TYPE).transform(place))


def semi_anti(node: exp.Expression) -> exp.Expression:
    """DuckDB's `SEMI JOIN`/`ANTI JOIN` are Spark's `LEFT SEMI`/`LEFT ANTI` joins."""
    if isinstance(node, exp.Join) and node.args.get("kind", "").upper() in ("SEMI", "ANTI"):
        node = node.copy()
        node.set("side", "LEFT")
    return node


def materialized(node: exp.Expression) -> exp.Expression:
    """DuckDB's `AS MATERIALIZED` CTE (computed once, first, where its optimizer would
    move a join across it) is a plain CTE: Spark has no such hint, and a CTE read more
    than once is computed before its statement anyway (`shared_ctes`)."""
    if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
        node = node.copy()
        node.set("materialized", None)
    return node


def mark_list_lengths(tree: exp.Expression, source: str) -> None:
    """DuckDB's `len(x)` measures a list here (the SQL spells string lengths `length`);
    sqlglot reads both as one node, so the spelling is looked at in the source."""
    if not re.search(r"\blen\s*\(", source):
        return
    if re.search(r"\blength\s*\(", source):
        raise Untranslatable("both len() and length() in one statement")
    for n in tree.find_all(exp.Length):
        n.meta["rg_list"] = True


@dataclass(frozen=True)
class Rewrite:
    name: str
    fn: Callable[[exp.Expression], exp.Expression]

    @property
    def doc(self) -> str:
        return " ".join((self.fn.__doc__ or "").split())


# Applied in this order, each over the whole tree.
REWRITES: tuple[Rewrite, ...] = (
    Rewrite("record_order", record_order),
    Rewrite("macros (00_macros.sql)", expand_macros),
    Rewrite("ASOF JOIN", asof_joins),
    Rewrite("SEMI / ANTI JOIN", semi_anti),
    Rewrite("MATERIALIZED CTEs", materialized),
    Rewrite("named windows", named_windows),
    Rewrite("scalar subqueries in a grouped query", grouped_subqueries),
    Rewrite("method calls", method_calls),
    Rewrite("list functions", list_functions),
    Rewrite("epoch_ms", epoch_ms),
    Rewrite("'infinity' timestamps", infinity),
    Rewrite("arg_min / arg_max", arg_min_max),
    Rewrite("list() aggregates", lists),
    Rewrite("json_object", json_object),
    Rewrite("unnest(range())", ranges),
    Rewrite("row comparisons", tuples),
    Rewrite("like_escape", like_escape),
    Rewrite("histogram", histogram),
    Rewrite("regexp_replace", regexp_replace),
    Rewrite("JSON values", json_values),
    Rewrite("small functions", small_functions),
    Rewrite("fractional literals", decimals),
)

# Functions that Spark has under the name sqlglot writes (checked after the rewrites:
# anything else left as an unknown function call is untranslatable).
SPARK_FUNCTIONS = frozenset(
    {
        "unix_millis",
        "first",
        "timestamp_millis",
        "timestamp_micros",
        "unix_micros",
        "collect_list",
        "collect_set",
        "array_sort",
        "struct",
        "transform",
        "to_json",
        "named_struct",
        "regexp_replace",
        "filter",
        "array_contains",
        "arrays_overlap",
        "array_distinct",
        "array",
        "size",
        "sequence",
        "greatest",
        "xxhash64",
        "map_from_entries",
        "isnan",
        "double",
        "encode",
        "sha2",
        "unhex",
        "lower",
        "upper",
        "startswith",
        "endswith",
        "percentile",
        "try_parse_json",
        "try_variant_get",
        "schema_of_variant",
        "if",
        "bit_count",
    }
)


def _check(tree: exp.Expression) -> None:
    for n in tree.find_all(exp.Anonymous):
        if n.name.lower() not in SPARK_FUNCTIONS:
            raise Untranslatable(f"function {n.name}() has no Spark form")
    for j in tree.find_all(exp.Join):
        if j.args.get("method"):
            raise Untranslatable(f"{j.args['method']} JOIN has no Spark form")


def to_spark_tree(sql: str) -> exp.Expression:
    tree = parse(sql)
    mark_list_lengths(tree, sql)
    mark_json_values(tree)
    for rw in REWRITES:
        tree = tree.transform(rw.fn)
    from sqlglot.transforms import eliminate_distinct_on

    tree = eliminate_distinct_on(tree)
    _check(tree)
    return tree


def to_spark(sql: str) -> str:
    """One DuckDB statement (a query or expression) as Spark SQL; `$name` parameters
    become Spark's named parameter markers `:name`."""
    return to_spark_tree(sql).sql(dialect="spark", unsupported_level=sqlglot.ErrorLevel.RAISE)


def expression_to_spark(sql: str) -> str:
    """A DuckDB expression (validation, ingest) as a Spark expression."""
    return to_spark(f"SELECT {sql}")[len("SELECT ") :]


# -- statements of the prepare step -------------------------------------------------------


@dataclass(frozen=True)
class Table:
    """A prepared table: its name and the Spark query that makes it."""

    name: str
    sql: str
    # A view of the prepare step (bound when read in DuckDB): materialised like a table
    # for the detectors on Spark, but not copied back into the database.
    view: bool = False


def _hoisted(table: str, alias: str) -> str:
    return f"{table}__{alias}"


def _top_ctes(sql: str) -> tuple[exp.Expression, list[exp.CTE], set[str]]:
    """A Spark query, its top-level CTEs and the names of those read more than once
    (none when a CTE names its columns or holds a WITH of its own: left as it is)."""
    tree = sqlglot.parse_one(sql, read="spark")
    with_ = tree.args.get("with_")
    ctes = list(with_.expressions) if with_ is not None else []
    names = {c.alias for c in ctes}
    reads: dict[str, int] = {}
    for t in tree.find_all(exp.Table):
        if t.name in names and not t.db:
            reads[t.name] = reads.get(t.name, 0) + 1
    if any(c.args["alias"].columns or c.this.args.get("with_") for c in ctes):
        return tree, ctes, set()
    return tree, ctes, {n for n, k in reads.items() if k > 1}


def _renamed(table: str, node: exp.Expression, names: set[str]) -> exp.Expression:
    """`node` with its reads of the CTEs `names` reading their hoisted tables."""

    def swap(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Table) and n.name in names and not n.db:
            return exp.to_table(_hoisted(table, n.name)).as_(n.alias or n.name)
        return n

    return node.copy().transform(swap)


def _with(table: str, body: exp.Expression, ctes: list[exp.CTE], shared: set[str]) -> str:
    """`body` with the CTEs it may read that are not hoisted (`ctes`, in order) as its
    WITH, every read of a hoisted one reading its table."""
    kept = [
        f"{c.alias} AS ({_renamed(table, c.this, shared).sql(dialect='spark')})"
        for c in ctes
        if c.alias not in shared
    ]
    sql = _renamed(table, body, shared).sql(dialect="spark")
    return f"WITH {', '.join(kept)} {sql}" if kept else sql


def shared_ctes(table: str, sql: str) -> tuple[list[Table], str]:
    """Spark inlines a CTE at every read of it, so a CTE read by CTEs that are read twice
    is planned and computed once per path to it (a_missing's plan read its sources 146
    times, with 130 broadcasts). Returns each top-level CTE of the Spark statement `sql`
    that is read more than once as a table to materialise first (`<table>__<cte>`, read
    by Spark alone, never copied into the database), and the statement reading them
    (unchanged when there are none)."""
    tree, ctes, shared = _top_ctes(sql)
    if not shared:
        return [], sql
    steps = [
        Table(_hoisted(table, c.alias), _with(table, c.this, ctes[:i], shared), view=True)
        for i, c in enumerate(ctes)
        if c.alias in shared
    ]
    tree = tree.copy()
    tree.set("with_", None)
    return steps, _with(table, tree, ctes, shared)


# How DuckDB stores a column (`c VARCHAR USING COMPRESSION uncompressed`): none of Spark's.
_STORAGE = re.compile(r"\s+USING\s+COMPRESSION\s+\w+", re.IGNORECASE)


def prepare_steps(statements: list[str]) -> list[Table]:
    """A prep file's statements as tables to materialise in order: `CREATE TABLE AS`, and
    `CREATE TEMP VIEW AS`, and `ALTER TABLE t ADD COLUMN c T` with the `UPDATE t SET c =
    expr` after it (a new version of t with the column), and `CREATE TABLE t (columns)`
    with the `INSERT INTO t SELECT` after it (t as the query, whose columns must be named
    as declared; a column's `USING COMPRESSION`, how DuckDB stores it, means nothing
    here)."""
    out: list[Table] = []
    pending: dict[tuple[str, str], str] = {}
    declared: dict[str, list[str]] = {}
    for stmt in statements:
        if is_macro(stmt):
            continue
        tree = parse(_STORAGE.sub("", stmt))
        if isinstance(tree, exp.Create) and tree.kind == "TABLE" and tree.expression is None:
            schema = tree.this
            if not isinstance(schema, exp.Schema) or not isinstance(schema.this, exp.Table):
                raise Untranslatable("CREATE TABLE without AS or columns")
            declared[schema.this.name] = [c.name for c in schema.expressions]
        elif isinstance(tree, exp.Insert):
            table = tree.this.name if isinstance(tree.this, exp.Table) else None
            query = tree.expression
            if table not in declared or not isinstance(query, exp.Query):
                raise Untranslatable("INSERT into a table not declared just before")
            if query.named_selects != declared.pop(table):
                raise Untranslatable(f"INSERT INTO {table}: columns not named as declared")
            shared, sql = shared_ctes(table, to_spark(query.sql(dialect="duckdb")))
            out += shared
            out.append(Table(table, sql))
        elif isinstance(tree, exp.Create) and tree.kind in ("TABLE", "VIEW"):
            query = tree.expression
            if query is None:
                raise Untranslatable(f"CREATE {tree.kind} without AS")
            name = tree.this.name if isinstance(tree.this, exp.Table) else tree.this.this.name
            shared, sql = shared_ctes(name, to_spark(query.sql(dialect="duckdb")))
            out += shared
            out.append(Table(name, sql, view=tree.kind == "VIEW"))
        elif isinstance(tree, exp.Alter):
            for action in tree.args.get("actions", []):
                if not isinstance(action, exp.ColumnDef):
                    raise Untranslatable(f"ALTER TABLE action {action.sql()}")
                kind = action.args["kind"].sql(dialect="duckdb")
                pending[(tree.this.name, action.name)] = kind
        elif isinstance(tree, exp.Update):
            table = tree.this.name
            if tree.args.get("where") is not None or tree.args.get("from") is not None:
                raise Untranslatable("UPDATE with WHERE or FROM has no rewrite yet")
            cols = []
            for eq in tree.expressions:
                col = eq.this.name
                kind = pending.pop((table, col), None)
                if kind is None:
                    raise Untranslatable("UPDATE of a column not added just before")
                cols.append(f"CAST({eq.expression.sql(dialect='duckdb')} AS {kind}) AS {col}")
            query = f"SELECT *, {', '.join(cols)} FROM {table}"
            out.append(Table(table, to_spark(query)))
        else:
            raise Untranslatable(f"statement kind {type(tree).__name__} has no Spark form")
    if pending:
        raise Untranslatable(f"columns added and never set: {sorted(pending)}")
    if declared:
        raise Untranslatable(f"tables declared and never filled: {sorted(declared)}")
    return out
