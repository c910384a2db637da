"""How the process's C allocator treats the predictor's large, short-lived arrays.

A prediction allocates and frees arrays of millions of elements many times (a gather per
output column, a sort per run of batches). glibc's malloc serves such sizes by ``mmap`` and
gives them back on ``free`` (or trims the heap past a small threshold), so the next array of
the same size is faulted in from the kernel again, a page at a time, zeroed. Keeping freed
memory for the next array (:func:`reuse_freed_memory`) takes most of those page faults away
and makes predictions markedly faster, for a somewhat larger peak resident memory
(docs/benchmarks-archive.md, the seventeenth pass).

Arrays past ``MMAP_THRESHOLD`` (the largest glibc allows: 32 MiB, 4 M int64 values) were
still served by ``mmap`` and faulted in afresh each time; so ``mmap`` is switched off too
(``M_MMAP_MAX = 0``: every block from the heap, glibc still falls back to ``mmap`` when the
heap cannot grow): the 10 M-event join gains, the other kinds stay level
(docs/benchmarks-archive.md, the twentieth pass).

The setting is process-wide, so it is not made on import: the command line (``wmbt``), the
Dagster assets that predict and ``bench/predict.py`` call :func:`reuse_freed_memory` before
they predict. Freed memory then stays with the process (up to about ``TOP_PAD`` per malloc
arena) until it exits.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager

from semantics.tuning import MMAP_THRESHOLD, TOP_PAD

M_TOP_PAD = -2  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4


def reuse_freed_memory() -> bool:
    """Have malloc serve every block from its heap (none by ``mmap``) and keep up to
    ``TOP_PAD`` of freed heap memory for the next allocation, instead of returning it to
    the kernel. True when set (glibc), False where the C library has no ``mallopt``.
    Idempotent; results do not change, only the time the predictor spends in page faults.

    >>> reuse_freed_memory() in (True, False)
    True
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError, TypeError):  # not glibc (macOS, musl, Windows)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return (bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TOP_PAD, TOP_PAD))
            and bool(mallopt(M_MMAP_MAX, 0)))


@contextmanager
def small_pages() -> Iterator[None]:
    """Within the block, numpy asks no transparent huge pages for its large arrays (it
    ``madvise``\\ s every array of 4 MiB or more by default). Where the kernel compacts memory
    to find a huge page on fault (``defrag`` of ``madvise``, a machine whose memory the page
    cache has fragmented), the faults of a pass that allocates gigabytes cost more system
    time than small pages do: the 10 M-event join sweep spent 6.4 s of system time in its
    15.1 s one pass, 0.9 s without (docs/benchmarks.md, "Joins in the sweep"). Results do not
    change; the setting is restored after the block (it is process-wide, as
    :func:`reuse_freed_memory`'s).

    >>> from numpy._core.multiarray import _set_madvise_hugepage as huge
    >>> was = huge(True)
    >>> with small_pages():
    ...     huge(False)  # (the setting inside: off)
    False
    >>> huge(was)  # (restored on leaving)
    True
    """
    from numpy._core.multiarray import _set_madvise_hugepage

    was = _set_madvise_hugepage(False)
    try:
        yield
    finally:
        _set_madvise_hugepage(was)
