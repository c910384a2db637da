"""A sweep's range of delays, ``"FROM..TO/N"`` (``wmbt sweep --delays``, the spec's ``sweep:``).

Pure: read by ``semantics.spec`` (the spec's ``sweep.delays``) and ``jobs.sweep`` alike, so
both accept exactly the same ranges.
"""

from __future__ import annotations

import re

import numpy as np

from semantics.durations import Duration


def parse_delays(text: str) -> list[Duration]:
    """``"1 minute..2 hours/60"`` -> 60 durations from 1 minute to 2 hours, both included,
    evenly spaced (ms precision); ValueError saying what was expected otherwise.

    >>> [d.ms for d in parse_delays("0 seconds..1 minute/3")]
    [0, 30000, 60000]
    """
    m = re.fullmatch(r"\s*(.+?)\s*\.\.\s*(.+?)\s*/\s*(\d+)\s*", text)
    if not m:
        raise ValueError("expected FROM..TO/N, e.g. '1 minute..2 hours/60'")
    lo, hi, n = Duration.parse(m.group(1)), Duration.parse(m.group(2)), int(m.group(3))
    if n < 2 or lo.us < 0 or hi.us <= lo.us:
        raise ValueError("expected 0 <= FROM < TO and N >= 2")
    ms = np.linspace(lo.ms, hi.ms, n).round().astype(np.int64)
    return [Duration(int(v) * 1000, f"{int(v)} milliseconds") for v in ms]
