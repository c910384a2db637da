"""Spark interval strings ("10 minutes", "-1 hour", "500 milliseconds") as exact durations.

Parsing follows Spark's `EventTimeWatermark.getDelayMs`: a month is 31 days, a year is 12 months
(372 days). Values are kept in microseconds (Spark's timestamp unit); ``.ms`` truncates toward zero
like Spark's ``microseconds / 1000``.

>>> Duration.parse("10 minutes").ms
600000
>>> Duration.parse("1 month").ms == 31 * 86_400_000
True
>>> Duration.parse("-1 hour").us
-3600000000
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_US = {
    "microsecond": 1,
    "millisecond": 1_000,
    "second": 1_000_000,
    "minute": 60_000_000,
    "hour": 3_600_000_000,
}
DAY_US = 86_400_000_000
MONTH_US = 31 * DAY_US
_DAYS = {"week": 7, "day": 1}
_MONTHS = {"year": 12, "month": 1}
# Spark's unit words (each also with an "s")
_UNITS = (*_MONTHS, *_DAYS, *reversed(_US))
_HINTS = {"us": "microseconds", "ms": "milliseconds", "s": "seconds", "sec": "seconds",
          "secs": "seconds", "m": "minutes", "min": "minutes", "mins": "minutes",
          "h": "hours", "hr": "hours", "hrs": "hours", "d": "days", "w": "weeks",
          "mon": "months", "y": "years", "yr": "years"}
# a term: sign, number, whitespace, unit word; terms are separated by whitespace
_WS = "[ \t\n\x0b\f\r\x1c-\x1f]"  # Java's Character.isWhitespace, which Spark reads bytes with
_TERM = re.compile(rf"([+-]?){_WS}*(\d*)(?:(\.)(\d*))?({_WS}+)((?:(?!{_WS}).)*){_WS}*")
_TRIM = "".join(map(chr, range(33)))  # what UTF8String.trimAll trims: ASCII controls, space
_INT32, _INT64 = 2**31, 2**63
_EXAMPLES = "'10 minutes' or '1 hour 30 minutes'"
_NO_COMMAS = "terms are separated by spaces, without commas, e.g. '1 hour 30 minutes'"


class _Bad(ValueError):
    pass


@dataclass(frozen=True, order=True)
class Duration:
    """An exact duration in microseconds, with the text it was written as."""

    us: int
    text: str = ""
    has_months: bool = False

    @property
    def ms(self) -> int:
        """Milliseconds, truncated toward zero (Spark's `getDelayMs`)."""
        return int(self.us / 1000) if self.us < 0 else self.us // 1000

    def __str__(self) -> str:
        return self.text or f"{self.us} microseconds"

    @classmethod
    def parse(cls, value: object) -> Duration:
        """Parse an interval string exactly as Spark's ``IntervalUtils.fromIntervalString``
        (``withWatermark``, ``window``): ``"1 hour 30 minutes"``, ``"-1 hour"``,
        ``"1.5 seconds"``, ``"interval 10 minutes"``.

        The units are Spark's words, singular or plural, case-insensitive (year, month, week,
        day, hour, minute, second, millisecond, microsecond), each after its number and a space;
        only seconds may have a fraction (finer than a microsecond is cut off, as Spark does);
        each term may have a sign. After ``interval`` (Spark's SQL literal) year-month and
        day-time units do not mix. Anything Spark rejects is a ``ValueError`` saying what to
        write instead; so is the SQL literal's quoted form (``interval '10' minute``), which
        this parser leaves out.

        >>> Duration.parse("1 hour -30 minutes").ms, Duration.parse(".5 seconds").us
        (1800000, 500000)
        >>> Duration.parse("10 min")
        Traceback (most recent call last):
        ...
        ValueError: '10 min': 'min' is not one of Spark's interval units (year, month, week, \
day, hour, minute, second, millisecond, microsecond, singular or plural); write '10 minutes'
        """
        if isinstance(value, Duration):
            return value
        if isinstance(value, bool) or not isinstance(value, str):
            raise ValueError(
                f"expected a duration string such as '10 minutes', got {value!r}"
            )
        try:
            months, days, micros = _parse(value)
        except _Bad as exc:
            raise ValueError(f"{value!r}: {exc}") from None
        return cls(months * MONTH_US + days * DAY_US + micros, value, months != 0)


def _parse(text: str) -> tuple[int, int, int]:
    """``(months, days, microseconds)`` of Spark's ``CalendarInterval`` for ``text``."""
    body = text.strip(_TRIM).lower()
    sql = re.match(rf"interval{_WS}", body) is not None
    if sql:
        body = body[len("interval"):].lstrip(_TRIM)
        if "'" in body or '"' in body:
            raise _Bad("the quoted SQL literal form is not read here; write the value and its "
                       f"units as words, e.g. {_EXAMPLES}")
    if not body:
        raise _Bad(f"expected a duration such as {_EXAMPLES}")
    months = days = micros = 0
    pos = 0
    while pos < len(body):
        m = _TERM.match(body, pos)
        if m is None or not (m.group(2) or m.group(4)):
            word = re.split(f"{_WS}+", body[pos:])[0]
            if re.fullmatch(r"[+-]?\d+(\.\d*)?[a-z]+", word):
                num = re.match(r"[+-]?[\d.]+", word)
                assert num is not None
                raise _Bad(f"a space between the number and the unit: "
                           f"'{num.group()} {word[num.end():]}'")
            if "," in body:
                raise _Bad(_NO_COMMAS)
            raise _Bad(f"expected a number, then a unit, at '{word}' (e.g. {_EXAMPLES})")
        sign, whole, point, frac, _, word = m.groups()
        unit = word[:-1] if word.endswith("s") and word[:-1] in _UNITS else word
        if unit not in _UNITS:
            if word.endswith(","):
                raise _Bad(_NO_COMMAS)
            hint = _HINTS.get(word)
            if point is not None and hint != "seconds":
                hint = None  # (a fraction: the unit is not all that is wrong)
            raise _Bad(f"'{word}' is not one of Spark's interval units ({', '.join(_UNITS)}, "
                       "singular or plural)"
                       + (f"; write '{whole}{'.' + frac if point else ''} {hint}'" if hint
                          else ""))
        if point is not None and unit != "second":
            raise _Bad(f"only seconds may have a fraction in a Spark interval ('{whole}.{frac} "
                       f"{word}'); write it in a smaller unit, e.g. '1 hour 30 minutes' or "
                       "'90 minutes'")
        if len(frac or "") > 9:
            raise _Bad("a fraction of a second has at most 9 digits (nanoseconds)")
        n = int(whole or "0")
        if n >= _INT64:
            raise _Bad(f"the number {whole} is too large")
        neg = sign == "-"
        if unit in _MONTHS:
            months += (-n if neg else n) * _MONTHS[unit]
        elif unit in _DAYS:
            days += (-n if neg else n) * _DAYS[unit]
        else:
            us = n * _US[unit] + (int((frac or "").ljust(9, "0")) // 1000 if point else 0)
            micros += -us if neg else us
        if not (-_INT32 <= months < _INT32 and -_INT32 <= days < _INT32
                and -_INT64 <= micros < _INT64):
            raise _Bad("the interval is too large")
        pos = m.end()
    if not -_INT64 <= months * MONTH_US + days * DAY_US + micros < _INT64:
        # Spark's IntervalUtils.getDuration (withWatermark, window, session_window) adds the
        # three parts in 64-bit microseconds with addExact: "long overflow"
        raise _Bad("the interval is too large: Spark holds it as 64-bit microseconds, at most "
                   "106751991 days")
    if sql and months and (days or micros):
        raise _Bad("after 'interval', Spark's SQL parser does not mix year-month units with "
                   "day-time units; leave out 'interval' or write them apart")
    return months, days, micros
