"""How a state kept as sorted runs is compacted after a batch (session stores, join sides).

A run is written once; a batch adds one and marks entries of older runs as gone. Compaction
decides which runs are rewritten or merged, never what the state holds: runs without a live
entry are dropped, runs with fewer than ``1/dead`` of their entries live are rewritten, and the
newest run is merged into the one before while that one is at most ``ratio`` times its size and
still *hot* (its newest event time is at or after ``horizon``: the batch's rows could reach it).
Cold runs, the oldest, are left alone: new rows skip them and eviction empties them. A state of
at most ``small`` live entries becomes one run without gone entries.

>>> from dataclasses import dataclass
>>> @dataclass
... class R:
...     size: int
...     live: int
...     newest: int
>>> merge = lambda a, b: R(a.live + b.live, a.live + b.live, max(a.newest, b.newest))
>>> rewrite = lambda r: R(r.live, r.live, r.newest)
>>> compact([R(40, 40, 5), R(10, 10, 9), R(10, 10, 9)], 0, 8, rewrite, merge, ratio=2, dead=4)
[R(size=40, live=40, newest=5), R(size=20, live=20, newest=9)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar


class RunLike(Protocol):
    """What compaction reads of a run."""

    @property
    def size(self) -> int: ...  # entries written, gone ones included

    @property
    def live(self) -> int: ...  # entries still in the state

    @property
    def newest(self) -> int: ...  # largest event time (or end) of its entries


R = TypeVar("R", bound=RunLike)


def compact(runs: Sequence[R], small: int | None, horizon: int | None,
            rewrite: Callable[[R], R], merge: Callable[[R, R], R], *, ratio: float,
            dead: int) -> list[R]:
    """``runs`` (oldest first) compacted as the module docstring says; ``small`` None: always
    one run; ``horizon`` None: every run is hot. ``rewrite(r)``: ``r``'s live entries as a new
    run; ``merge(a, b)``: the live entries of both as one run (``a`` first on ties)."""
    runs = [r for r in runs if r.live]
    whole = small is None or sum(r.live for r in runs) <= small
    out: list[R] = []
    for r in runs:
        keep = r.live == r.size or (not whole and dead * r.live >= r.size)
        out.append(r if keep else rewrite(r))
    while len(out) >= 2 and (whole or (
            out[-2].size <= ratio * out[-1].size
            and (horizon is None or out[-2].newest >= horizon))):
        b, a = out.pop(), out.pop()
        out.append(merge(a, b))
    return out
