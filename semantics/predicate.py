"""A small SQL predicate language for ``sources.<s>.filter``, evaluated with pyarrow.

Supported (the subset of Spark SQL that source filters use): column names, string/number/boolean
literals, ``TIMESTAMP '...'``, ``= == != <> < <= > >=``, ``AND OR NOT``, ``IN (...)``,
``NOT IN (...)``, ``BETWEEN a AND b``, ``IS [NOT] NULL`` and parentheses. Like SQL, a comparison
with NULL is unknown and the row is filtered out.

>>> import pyarrow as pa
>>> t = pa.table({"country": ["NL", "DE", None]})
>>> evaluate("country = 'NL' OR country IS NULL", t).to_pylist()
[True, False, True]
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<str>'(?:[^']|'')*')|(?P<op><=|>=|<>|!=|==|=|<|>|\(|\)|,)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*|`[^`]+`))"
)


class PredicateError(ValueError):
    pass


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise PredicateError(f"cannot parse filter at position {pos}: {text[pos:pos + 20]!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str, table: pa.Table) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.table = table

    def peek(self, upper: bool = True) -> str | None:
        if self.i >= len(self.toks):
            return None
        kind, val = self.toks[self.i]
        return val.upper() if upper and kind == "word" else val

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise PredicateError(f"unexpected end of filter, expected {expected or 'a value'}")
        tok = self.toks[self.i]
        if expected is not None and (tok[1].upper() if tok[0] == "word" else tok[1]) != expected:
            raise PredicateError(f"expected {expected!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def parse(self) -> Any:
        e = self.or_()
        if self.i != len(self.toks):
            raise PredicateError(f"unexpected {self.toks[self.i][1]!r}")
        return e

    def or_(self) -> Any:
        e = self.and_()
        while self.peek() == "OR":
            self.take()
            e = pc.or_kleene(e, self.and_())
        return e

    def and_(self) -> Any:
        e = self.not_()
        while self.peek() == "AND":
            self.take()
            e = pc.and_kleene(e, self.not_())
        return e

    def not_(self) -> Any:
        if self.peek() == "NOT":
            self.take()
            return pc.invert(self.not_())
        return self.cmp()

    def cmp(self) -> Any:
        left = self.value()
        op = self.peek()
        if op in ("=", "==", "!=", "<>", "<", "<=", ">", ">="):
            self.take()
            right = self.value()
            fn = {"=": pc.equal, "==": pc.equal, "!=": pc.not_equal, "<>": pc.not_equal,
                  "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}[op]
            return fn(*_align(left, right))
        negate = False
        if op == "NOT":
            self.take()
            negate = True
            op = self.peek()
        if op == "IN":
            self.take()
            self.take("(")
            values = [self.value()]
            while self.peek() == ",":
                self.take()
                values.append(self.value())
            self.take(")")
            res = None
            for v in values:
                eq = pc.equal(*_align(left, v))
                res = eq if res is None else pc.or_kleene(res, eq)
            return pc.invert(res) if negate else res
        if op == "BETWEEN":
            self.take()
            lo = self.value()
            self.take("AND")
            hi = self.value()
            res = pc.and_kleene(pc.greater_equal(*_align(left, lo)),
                                pc.less_equal(*_align(left, hi)))
            return pc.invert(res) if negate else res
        if op == "IS":
            self.take()
            neg = False
            if self.peek() == "NOT":
                self.take()
                neg = True
            self.take("NULL")
            res = pc.is_null(left)
            return pc.invert(res) if neg else res
        if negate:
            raise PredicateError("NOT must be followed by IN or BETWEEN here")
        return left

    def value(self) -> Any:
        kind, val = self.take()
        if val == "(":
            e = self.or_()
            self.take(")")
            return e
        if kind == "num":
            return pa.scalar(float(val) if "." in val else int(val))
        if kind == "str":
            return pa.scalar(val[1:-1].replace("''", "'"))
        up = val.upper()
        if up in ("TRUE", "FALSE"):
            return pa.scalar(up == "TRUE")
        if up == "NULL":
            return pa.scalar(None)
        if up in ("TIMESTAMP", "DATE") and self.peek(False) and self.peek(False).startswith("'"):
            _, lit = self.take()
            import pandas as pd

            ts = pd.Timestamp(lit[1:-1])
            ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
            return pa.scalar(ts.to_pydatetime(), type=pa.timestamp("us", tz="UTC"))
        name = val.strip("`")
        if name not in self.table.column_names:
            raise PredicateError(f"unknown column {name!r} (columns: "
                                 f"{', '.join(self.table.column_names)})")
        return self.table.column(name)


def _align(a: Any, b: Any) -> tuple[Any, Any]:
    """Cast a literal to the other side's type (e.g. a timestamp column vs TIMESTAMP '...')."""
    ta = a.type
    tb = b.type
    if ta == tb:
        return a, b
    if isinstance(b, pa.Scalar) and not isinstance(a, pa.Scalar):
        return a, b.cast(ta) if not pa.types.is_null(tb) else b
    if isinstance(a, pa.Scalar) and not isinstance(b, pa.Scalar):
        return (a.cast(tb) if not pa.types.is_null(ta) else a), b
    return a, b


def evaluate(text: str, table: pa.Table) -> pa.ChunkedArray:
    """Boolean mask of ``text`` over ``table`` (NULL counts as false when filtering)."""
    try:
        res = _Parser(text, table).parse()
    except pa.ArrowInvalid as exc:
        raise PredicateError(str(exc)) from None
    if isinstance(res, pa.Scalar):
        res = pa.chunked_array([pa.array([res.as_py()] * table.num_rows, pa.bool_())])
    if not pa.types.is_boolean(res.type):
        raise PredicateError("the filter must be a boolean condition")
    return res


def check(text: str, schema: pa.Schema) -> None:
    """Parse ``text`` against an empty table of ``schema`` (raises PredicateError)."""
    evaluate(text, schema.empty_table())
