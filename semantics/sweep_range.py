"""A sweep's range of values, ``"FROM..TO/N"`` (``wmbt sweep --delays``, ``--window-sizes``,
``--ranges``; the spec's ``sweep:``).

Pure: read by ``semantics.spec`` (the spec's ``sweep`` block) and ``jobs.sweep`` alike, so
both accept exactly the same ranges.
"""

from __future__ import annotations

import re

import numpy as np

from semantics.durations import Duration


def parse_values(text: str, *, least_ms: int | None = 0, strictly: bool = False
                 ) -> list[Duration]:
    """``"1 minute..2 hours/60"`` -> 60 durations from 1 minute to 2 hours, both included,
    evenly spaced (ms precision); ValueError saying what was expected otherwise. ``FROM`` must
    be at least ``least_ms`` (more than it with ``strictly``; None: any, negative included).

    >>> [d.ms for d in parse_values("-1 minute..1 minute/3", least_ms=None)]
    [-60000, 0, 60000]
    """
    m = re.fullmatch(r"\s*(.+?)\s*\.\.\s*(.+?)\s*/\s*(\d+)\s*", text)
    if not m:
        raise ValueError("expected FROM..TO/N, e.g. '1 minute..2 hours/60'")
    lo, hi, n = Duration.parse(m.group(1)), Duration.parse(m.group(2)), int(m.group(3))
    low = "" if least_ms is None else f"{least_ms} {'<' if strictly else '<='} "
    too_low = least_ms is not None and (lo.ms <= least_ms if strictly else lo.us < least_ms * 1000)
    if n < 2 or too_low or hi.ms <= lo.ms:
        raise ValueError(f"expected {low}FROM < TO and N >= 2")
    ms = np.linspace(lo.ms, hi.ms, n).round().astype(np.int64)
    return [Duration(int(v) * 1000, f"{int(v)} milliseconds") for v in ms]


def parse_delays(text: str) -> list[Duration]:
    """``"1 minute..2 hours/60"`` -> 60 delays from 1 minute to 2 hours, both included,
    evenly spaced (ms precision); ValueError saying what was expected otherwise.

    >>> [d.ms for d in parse_delays("0 seconds..1 minute/3")]
    [0, 30000, 60000]
    """
    return parse_values(text)


def parse_sizes(text: str) -> list[Duration]:
    """Window sizes (``--window-sizes``): positive, as Spark's ``window`` needs them.

    >>> [d.ms for d in parse_sizes("1 minute..3 minutes/3")]
    [60000, 120000, 180000]
    """
    return parse_values(text, strictly=True)
