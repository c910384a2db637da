"""Independent parts of one computation on the machine's cores, in threads.

Operators that compute a whole run at once split it by ranges of key ids (rows of different
keys never meet, and every count is a sum over keys). Numpy releases the GIL in sorts,
gathers, ``bincount`` and ``cumsum`` on numeric arrays, so two parts in two threads take
about the time of one on two cores (the Spark replay they are compared with uses two as well:
``local[2]``).

Invariant: :func:`map_parts` returns what ``[fn(p) for p in parts]`` returns, in that order,
whatever the number of threads; two parts must not write the same elements of an array
(disjoint places of one output array are fine: numpy writes only the elements it is given).
``WMBT_THREADS=1`` runs the parts one after the other.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

P = TypeVar("P")
R = TypeVar("R")

_POOL: tuple[int, int, ThreadPoolExecutor] | None = None  # (threads, process id, pool)
_NAME = "wmbt-part"


def threads() -> int:
    """Threads for parts: ``WMBT_THREADS``, else the cores this process may run on (at most 8).

    >>> threads() >= 1
    True
    """
    env = os.environ.get("WMBT_THREADS", "").strip()
    if env:
        return max(1, int(env))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # (not on Linux)
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def map_parts(fn: Callable[[P], R], parts: Sequence[P]) -> list[R]:
    """``[fn(p) for p in parts]``, computed in up to :func:`threads` threads (one after the
    other when called from a part: a part waiting for parts could hold every thread).

    >>> map_parts(lambda x: x * x, [1, 2, 3])
    [1, 4, 9]
    """
    n = threads()
    if n <= 1 or len(parts) <= 1 or threading.current_thread().name.startswith(_NAME):
        return [fn(p) for p in parts]
    global _POOL
    # a new pool when the setting changed, or in a forked child (its parent's pool has no
    # threads there: work given to it would never run)
    if _POOL is None or _POOL[:2] != (n, os.getpid()):
        if _POOL is not None and _POOL[1] == os.getpid():
            _POOL[2].shutdown(wait=False)
        _POOL = (n, os.getpid(), ThreadPoolExecutor(n, thread_name_prefix=_NAME))
    return list(_POOL[2].map(fn, parts))


def row_parts(n: int, least: int, size: int | None = None) -> list[slice]:
    """Rows ``0 .. n - 1`` as :func:`threads` neighbouring slices of about equal size (one
    slice below ``least`` rows, where threads cost more than they save; ``size``: the rows
    to count instead, when each of the ``n`` stands for many, such as a tick's), for a pass
    over whole-run arrays done part by part in :func:`map_parts`.

    >>> row_parts(3, 4), row_parts(1, 1), row_parts(3, 10, size=5)  # (never an empty slice)
    ([slice(0, 3, None)], [slice(0, 1, None)], [slice(0, 3, None)])
    >>> sum(s.stop - s.start for s in row_parts(10, 4)), len(row_parts(10, 4)) == threads()
    (10, True)
    """
    k = max(1, min(threads(), n)) if (n if size is None else size) >= least else 1
    cuts = [n * i // k for i in range(k + 1)]
    return [slice(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
