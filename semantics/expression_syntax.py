"""The syntax of Spark SQL value expressions: tokens, the tree and its parser (docs/semantics.md
§1.2). ``semantics.expressions`` evaluates the tree; ``parse`` raises ExpressionError naming what is
not supported.

>>> show(parse("value % 2 = 0 AND NOT s LIKE 'H%'"))
"(((value % 2) = 0) AND (NOT (s LIKE 'H%')))"
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from semantics.predicate import _COMPARE, MAX_DEPTH, Lit, PredicateError, _number, _unescape

MAX_PRECISION = 38  # Spark's largest decimal precision

class ExpressionError(PredicateError):
    """An expression Spark rejects, or one this evaluator does not model (the message says
    which)."""


_TOKEN = re.compile(
    r"\s*(?:(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<op><=|>=|<>|!=|==|\|\||=|<|>|\(|\)|,|-|\+|\*|/|%)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)+`))", re.S)

_COMMENT = re.compile(r"\s*(?:--[^\n]*(?:\n|$)|/\*.*?\*/)", re.S)

FUNCTIONS = ("abs", "coalesce", "concat", "date_trunc", "day", "dayofmonth", "hour", "length",
             "lower", "minute", "month", "second", "substring", "substr", "timestamp_millis",
             "to_date", "unix_micros", "unix_millis", "unix_seconds", "upper", "year")
CAST_TYPES = ("int", "bigint", "smallint", "tinyint", "double", "float", "string", "boolean",
              "date", "timestamp", "decimal(p,s)")
SUPPORTED = ("columns, literals, + - * / % div, comparisons, AND OR NOT, IN, BETWEEN, LIKE, "
             "IS [NOT] NULL, CASE WHEN, CAST(x AS " + "|".join(CAST_TYPES) + "), "
             + ", ".join(FUNCTIONS))

TS = pa.timestamp("us", tz="UTC")

# ---------------------------------------------------------------- the syntax tree


@dataclass(frozen=True)
class Col:
    name: str


@dataclass(frozen=True)
class Neg:
    x: Node


@dataclass(frozen=True)
class Bin:
    """Arithmetic: ``op`` one of + - * / % div ||."""

    op: str
    a: Node
    b: Node


@dataclass(frozen=True)
class Cmp:
    op: str
    a: Node
    b: Node


@dataclass(frozen=True)
class Logic:
    """AND or OR over ``items`` (flat: long chains never recurse)."""

    op: str
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    x: Node


@dataclass(frozen=True)
class In:
    x: Node
    items: tuple[Node, ...]
    negate: bool


@dataclass(frozen=True)
class Between:
    x: Node
    lo: Node
    hi: Node
    negate: bool


@dataclass(frozen=True)
class Like:
    x: Node
    pattern: Node
    negate: bool


@dataclass(frozen=True)
class IsNull:
    x: Node
    negate: bool


@dataclass(frozen=True)
class Case:
    whens: tuple[tuple[Node, Node], ...]
    other: Node | None


@dataclass(frozen=True)
class Cast:
    x: Node
    to: pa.DataType


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Node, ...]


Node = Lit | Col | Neg | Bin | Cmp | Logic | Not | In | Between | Like | IsNull | Case | Cast | Call


def show(node: Node) -> str:
    """The expression as SQL text (for messages)."""
    match node:
        case Lit(value=v, kind=k):
            if k == "str":
                return "'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'"
            if k == "null":
                return "NULL"
            if k == "bool":
                return "TRUE" if v else "FALSE"
            if k == "ts":
                return f"TIMESTAMP '{datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=v)}'"
            if k == "date":
                return f"DATE '{v}'"
            if k == "ts_text":
                return f"TIMESTAMP '{v}'"
            return str(v)
        case Col(name=n):
            return n if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n) else f"`{n}`"
        case Neg(x=x):
            return f"-{show(x)}"
        case Bin(op=op, a=a, b=b) | Cmp(op=op, a=a, b=b):
            return f"({show(a)} {op} {show(b)})"
        case Logic(op=op, items=items):
            return "(" + f" {op} ".join(show(i) for i in items) + ")"
        case Not(x=x):
            return f"(NOT {show(x)})"
        case In(x=x, items=items, negate=neg):
            return f"({show(x)} {'NOT ' if neg else ''}IN ({', '.join(show(i) for i in items)}))"
        case Between(x=x, lo=lo, hi=hi, negate=neg):
            return f"({show(x)} {'NOT ' if neg else ''}BETWEEN {show(lo)} AND {show(hi)})"
        case Like(x=x, pattern=p, negate=neg):
            return f"({show(x)} {'NOT ' if neg else ''}LIKE {show(p)})"
        case IsNull(x=x, negate=neg):
            return f"({show(x)} IS {'NOT ' if neg else ''}NULL)"
        case Case(whens=whens, other=other):
            parts = " ".join(f"WHEN {show(c)} THEN {show(v)}" for c, v in whens)
            return f"CASE {parts}" + (f" ELSE {show(other)}" if other is not None else "") + " END"
        case Cast(x=x, to=to):
            return f"CAST({show(x)} AS {_type_name(to)})"
        case Call(name=name, args=args):
            return f"{name}({', '.join(show(a) for a in args)})"
    raise AssertionError(node)


def _type_name(t: pa.DataType) -> str:
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    return {pa.int8(): "tinyint", pa.int16(): "smallint", pa.int32(): "int", pa.int64(): "bigint",
            pa.float32(): "float", pa.float64(): "double", pa.string(): "string",
            pa.bool_(): "boolean", pa.date32(): "date", TS: "timestamp",
            pa.null(): "void"}.get(t, str(t))


# ---------------------------------------------------------------- parsing


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        comment = _COMMENT.match(text, pos)
        if comment:  # (-- to the end of the line, /* ... */: Spark's comments)
            pos = comment.end()
            continue
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExpressionError(f"cannot parse at position {pos}: {text[pos:pos + 20]!r}")
        kind = m.lastgroup or ""
        val = m.group(kind)
        if kind == "str":
            val = _unescape(val[1:-1])
            if out and out[-1][0] == "str":  # 'a' 'b' is 'ab', as in Spark SQL
                val = out.pop()[1] + val
        out.append((kind, val))
        pos = m.end()
    return out


# binary operators and their precedence (Spark's grammar: OR < AND < NOT < comparison <
# + - || < * / % div); NOT is a prefix, IN/BETWEEN/LIKE/IS postfix at the comparison level
_PREC = {"OR": 1, "AND": 2, **{op: 4 for op in _COMPARE}, "IN": 4, "BETWEEN": 4, "LIKE": 4,
         "IS": 4, "NOT": 4, "+": 6, "-": 6, "||": 6, "*": 7, "/": 7, "%": 7, "DIV": 7}
_TYPES: dict[str, pa.DataType] = {
    "INT": pa.int32(), "INTEGER": pa.int32(), "BIGINT": pa.int64(), "LONG": pa.int64(),
    "SMALLINT": pa.int16(), "SHORT": pa.int16(), "TINYINT": pa.int8(), "BYTE": pa.int8(),
    "DOUBLE": pa.float64(), "FLOAT": pa.float32(), "REAL": pa.float32(), "STRING": pa.string(),
    "BOOLEAN": pa.bool_(), "DATE": pa.date32(), "TIMESTAMP": TS}


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.depth = 0

    def nested(self, by: int) -> None:
        self.depth += by
        if self.depth > MAX_DEPTH:
            raise ExpressionError(f"the expression is nested more than {MAX_DEPTH} levels deep "
                                  "(parentheses, NOT, signs)")

    def peek(self, ahead: int = 0) -> str | None:
        if self.i + ahead >= len(self.toks):
            return None
        kind, val = self.toks[self.i + ahead]
        return val.upper() if kind == "word" else val if kind == "op" else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise ExpressionError(f"unexpected end of the expression, expected "
                                  f"{expected or 'a value'}")
        tok = self.toks[self.i]
        if expected is not None and (tok[1].upper() if tok[0] == "word" else tok[1]) != expected:
            raise ExpressionError(f"expected {expected!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def parse(self) -> Node:
        e = self.binary(0)
        if self.i != len(self.toks):
            raise ExpressionError(f"unexpected {self.toks[self.i][1]!r} (supported: {SUPPORTED})")
        return e

    def binary(self, min_prec: int) -> Node:
        left = self.prefix()
        while True:
            op = self.peek()
            prec = _PREC.get(op or "")
            if op is None or prec is None or prec < min_prec:
                return left
            if op == "NOT" and self.peek(1) not in ("IN", "BETWEEN", "LIKE"):
                raise ExpressionError("NOT must be followed by IN, BETWEEN or LIKE here")
            self.take()
            if op in ("OR", "AND"):
                items = [left, self.binary(prec + 1)]
                while self.peek() == op:
                    self.take()
                    items.append(self.binary(prec + 1))
                left = Logic(op, tuple(items))
            elif op in _COMPARE:
                left = Cmp(op, left, self.binary(prec + 1))
            elif op in ("NOT", "IN", "BETWEEN", "LIKE", "IS"):
                left = self.postfix(op, left)
            else:
                left = Bin(op.lower(), left, self.binary(prec + 1))

    def postfix(self, op: str, left: Node) -> Node:
        negate = op == "NOT"
        if negate:
            op = self.take()[1].upper()
        if op == "IN":
            self.take("(")
            items = [self.binary(5)]
            while self.peek() == ",":
                self.take()
                items.append(self.binary(5))
            self.take(")")
            return In(left, tuple(items), negate)
        if op == "BETWEEN":
            lo = self.binary(5)
            self.take("AND")
            return Between(left, lo, self.binary(5), negate)
        if op == "LIKE":
            return Like(left, self.binary(5), negate)
        neg = False  # IS [NOT] NULL
        if self.peek() == "NOT":
            self.take()
            neg = True
        self.take("NULL")
        return IsNull(left, neg)

    def prefix(self) -> Node:
        op = self.peek()
        if op == "NOT":
            self.take()
            self.nested(1)
            e: Node = Not(self.binary(3))
            self.nested(-1)
            return e
        if op in ("-", "+"):
            self.take()
            self.nested(1)
            v = self.prefix()
            self.nested(-1)
            if op == "+":
                return v
            if isinstance(v, Lit) and v.kind != "null":
                if v.kind not in ("int", "dec", "float"):
                    raise ExpressionError(f"cannot negate {v.value!r}")
                return Lit(-v.value, v.kind)
            return Neg(v)
        return self.primary()

    def primary(self) -> Node:
        kind, val = self.take()
        if kind == "op":
            if val != "(":
                raise ExpressionError(f"unexpected {val!r}")
            self.nested(1)
            e = self.binary(0)
            self.take(")")
            self.nested(-1)
            return e
        if kind == "num":
            try:
                return _number(val)
            except PredicateError as exc:
                raise ExpressionError(str(exc)) from None
        if kind == "str":
            return Lit(val, "str")
        up = val.upper()
        if up in ("TRUE", "FALSE"):
            return Lit(up == "TRUE", "bool")
        if up == "NULL":
            return Lit(None, "null")
        if up in ("TIMESTAMP", "DATE") and self.i < len(self.toks) and \
                self.toks[self.i][0] == "str":
            text = self.take()[1]
            return Lit(text, "date" if up == "DATE" else "ts_text")
        if up == "CASE":
            return self.case()
        if up == "CAST" and self.peek() == "(":
            self.take()
            x = self.binary(0)
            self.take("AS")
            to = self.cast_type()
            self.take(")")
            return Cast(x, to)
        if self.peek() == "(" and not val.startswith("`"):
            return self.call(val.lower())
        return Col(val[1:-1].replace("``", "`") if val.startswith("`") else val)

    def case(self) -> Node:
        whens: list[tuple[Node, Node]] = []
        subject = None
        if self.peek() != "WHEN":
            subject = self.binary(0)  # CASE x WHEN v THEN ...: x = v
        while self.peek() == "WHEN":
            self.take()
            cond = self.binary(0)
            if subject is not None:
                cond = Cmp("=", subject, cond)
            self.take("THEN")
            whens.append((cond, self.binary(0)))
        if not whens:
            raise ExpressionError("CASE needs at least one WHEN ... THEN ...")
        other = None
        if self.peek() == "ELSE":
            self.take()
            other = self.binary(0)
        self.take("END")
        return Case(tuple(whens), other)

    def cast_type(self) -> pa.DataType:
        name = self.take()[1].upper()
        if name in ("DECIMAL", "DEC", "NUMERIC"):
            p, s = 10, 0
            if self.peek() == "(":
                self.take()
                p, s = int(self.take()[1]), 0
                if self.peek() == ",":
                    self.take()
                    s = int(self.take()[1])
                self.take(")")
            if not (1 <= p <= MAX_PRECISION and 0 <= s <= p):
                raise ExpressionError(f"decimal({p},{s}): precision 1..38, scale 0..precision")
            return pa.decimal128(p, s)
        if name not in _TYPES:
            raise ExpressionError(f"CAST to {name.lower()} is not supported (supported: "
                                  f"{', '.join(CAST_TYPES)})")
        return _TYPES[name]

    def call(self, name: str) -> Node:
        if name not in FUNCTIONS:
            raise ExpressionError(f"{name}(...) is not supported (supported: {SUPPORTED})")
        self.take("(")
        self.nested(1)
        args: list[Node] = []
        if self.peek() != ")":
            args.append(self.binary(0))
            while self.peek() == ",":
                self.take()
                args.append(self.binary(0))
        self.take(")")
        self.nested(-1)
        lo, hi = _ARITY[name]
        if not lo <= len(args) <= hi:
            most = "" if hi == lo else " or more" if hi > 9 else f" to {hi}"
            raise ExpressionError(f"{name} takes {lo}{most} arguments, got {len(args)}")
        return Call({"dayofmonth": "day", "substr": "substring"}.get(name, name), tuple(args))


_ARITY = {"abs": (1, 1), "coalesce": (1, 99), "concat": (1, 99), "date_trunc": (2, 2),
          "day": (1, 1), "dayofmonth": (1, 1), "hour": (1, 1), "length": (1, 1), "lower": (1, 1),
          "minute": (1, 1), "month": (1, 1), "second": (1, 1), "substring": (2, 3),
          "substr": (2, 3), "timestamp_millis": (1, 1), "to_date": (1, 1),
          "unix_micros": (1, 1), "unix_millis": (1, 1), "unix_seconds": (1, 1),
          "upper": (1, 1), "year": (1, 1)}


def parse(text: str) -> Node:
    """The syntax tree of ``text`` (ExpressionError: not Spark SQL this module models)."""
    return _Parser(text).parse()
