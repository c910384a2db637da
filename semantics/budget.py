"""What a prediction may hold in memory, checked before anything large is allocated.

A sliding window puts each row into ``ceil(duration / slide)`` windows (Spark's
``TimeWindowing`` expands every row that many times, and so do the predictor's paths, whole-run
or batch by batch): ``window: {duration: 1 day, slide: 1 microsecond}`` is 86 400 000 000
windows per row, which no machine holds. :func:`check_fits` refuses such a spec with a
:class:`SpecError` naming the field, from the rows the schedule holds and the memory this
process can still get (:func:`available_bytes`: the least of the system's available memory,
the cgroup's room and the address-space limit). Dense grids of the whole-run paths are bounded
by their own budgets (in the rows' pairs, ``whole_run.aggregation`` /
``whole_run.tumbling``), falling back to stepping, whose memory follows the pairs.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from semantics.errors import SpecError
from semantics.schedule import Schedule
from semantics.spec import AggregationQuery, BacktestSpec

# bytes a (row, window) pair takes at the peak of a prediction, on the safe side of what was
# measured (2 000 rows over 50 keys in windows of 20 000 days sliding by a day, 4e7 pairs;
# peak resident memory less the process's 200 MB): append mode 26 B a pair, append with the
# rows' fates (--late, --explain) 120 B, update mode (a group emitted each batch it is put
# in) 235 B
PAIR_BYTES = 256


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _meminfo(field: str, path: str = "/proc/meminfo") -> int | None:
    """A ``/proc/meminfo`` (or ``/proc/self/status``) field in bytes (None where absent)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def available_bytes() -> int:
    """Memory this process can still allocate: the least of the system's ``MemAvailable``
    (else its free pages), the cgroup's limit less its usage (v2, else v1) and the soft
    ``RLIMIT_AS`` less the process's virtual size. Always positive.

    >>> available_bytes() > 0
    True
    """
    room: list[int] = []
    avail = _meminfo("MemAvailable")
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            avail = None
    if avail is not None:
        room.append(avail)
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                          "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        lim, use = _read_int(limit), _read_int(usage)  # ("max": no limit, None)
        if lim is not None and use is not None and lim < 1 << 60:
            room.append(lim - use)
            break
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        room.append(soft - (_meminfo("VmSize", "/proc/self/status") or 0))
    return max(min(room, default=1 << 62), 1)


def _size(n: int) -> str:
    for unit, b in (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20)):
        if n >= b:
            return f"{n / b:,.1f} {unit}"
    return f"{n / 1024:,.1f} KB"


def check_fits(spec: BacktestSpec, schedule: Schedule) -> None:
    """Refuse (SpecError on ``query.window.slide``) a sliding window whose rows' windows
    would not fit the memory available: ``rows × ceil(duration / slide) × PAIR_BYTES``."""
    q = spec.query
    if not isinstance(q, AggregationQuery) or q.window is None or q.window.slide is None:
        return
    w = q.window
    per_row = -(-w.duration.us // w.slide_us)
    rows = len(schedule.rows[q.source]) if q.source in schedule.rows else 0
    need, have = rows * per_row * PAIR_BYTES, available_bytes()
    if need > have:
        raise SpecError(spec.path, "query.window.slide",
                        f"a slide of {w.slide} gives {per_row:,} windows per row (duration "
                        f"{w.duration}); the {rows:,} rows' windows need about {_size(need)} "
                        f"of memory and {_size(have)} are available: use a longer slide")
