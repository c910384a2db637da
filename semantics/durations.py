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
from decimal import Decimal, InvalidOperation

_US = {
    "microsecond": 1,
    "millisecond": 1_000,
    "second": 1_000_000,
    "minute": 60_000_000,
    "hour": 3_600_000_000,
    "day": 86_400_000_000,
    "week": 7 * 86_400_000_000,
}
MONTH_US = 31 * 86_400_000_000
_UNITS = {**_US, "month": MONTH_US, "year": 12 * MONTH_US}
_ALIASES = {"us": "microsecond", "ms": "millisecond", "s": "second", "sec": "second",
            "min": "minute", "h": "hour", "d": "day"}
_TERM = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*([a-z]+)")


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
        """Parse ``"1 hour 30 minutes"``, ``"interval 10 seconds"``, ``"-1 hour"``.

        Raises ``ValueError`` with the expected format on anything else.
        """
        if isinstance(value, Duration):
            return value
        if isinstance(value, bool) or not isinstance(value, str):
            raise ValueError(
                f"expected a duration string such as '10 minutes', got {value!r}"
            )
        text = value.strip()
        body = text.lower()
        if body.startswith("interval "):
            body = body[len("interval "):].strip()
        pos, total, months, seen = 0, Decimal(0), False, False
        body = body.strip()
        while pos < len(body):
            m = _TERM.match(body, pos)
            if not m:
                break
            unit = m.group(2)
            unit = _ALIASES.get(unit, unit)
            if unit.endswith("s") and unit[:-1] in _UNITS:
                unit = unit[:-1]
            if unit not in _UNITS:
                raise ValueError(f"unknown interval unit {m.group(2)!r} in {text!r}; "
                                 f"expected one of {', '.join(sorted(_UNITS))}")
            try:
                amount = Decimal(m.group(1))
            except InvalidOperation as exc:  # pragma: no cover - regex guarantees a number
                raise ValueError(f"bad number in {text!r}") from exc
            months = months or unit in ("month", "year")
            total += amount * _UNITS[unit]
            seen = True
            pos = m.end()
            while pos < len(body) and body[pos] in " ,":
                pos += 1
        if not seen or pos != len(body):
            raise ValueError(f"expected a duration such as '10 minutes' or '-1 hour', got {text!r}")
        if total != total.to_integral_value():
            raise ValueError(f"{text!r} is finer than a microsecond")
        return cls(int(total), text, months)


def parse_duration(value: object) -> Duration:
    """Function form of :meth:`Duration.parse` (for validators)."""
    return Duration.parse(value)
