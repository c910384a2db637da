"""How many distinct keys a state holds, kept up to date batch by batch.

Spark's session state map also indexes every session by its group key (group key → set of its
session keys), a memory cost per distinct key that ``state_bytes`` models; the session operator
reports the keys of its state in every batch. Counting them afresh would read the whole state
(a merge of several sorted runs) every batch; a tally of live sessions per key, updated by what
a batch adds and removes, reads only those.

Invariants: ``counts[i]`` is the number of live entries of the key with dense index ``i``, never
negative; ``keys`` is the number of indices with a positive count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics.tuning import DIRECT_LIMIT, RANGE_FACTOR, RANGE_SLACK


@dataclass(frozen=True)
class KeyIndex:
    """Key id → dense index, order-preserving (sorted ids give sorted indices): the id itself
    when ids are exact and few (``ids`` None), else its rank among ``ids``, the sorted distinct
    ids of the whole source.

    >>> KeyIndex.ranked(np.array([900, 5, 900])).of_ids(np.array([5, 900]))
    array([0, 1])
    """

    size: int
    ids: np.ndarray | None = None

    @staticmethod
    def direct(slots: int, rows: int) -> bool:
        """Can exact ids ``0 .. slots - 1`` of a source of ``rows`` rows index the counts
        themselves?"""
        return slots <= max(DIRECT_LIMIT, rows)

    @classmethod
    def of(cls, slots: int | None, rows: int, source_ids: Callable[[], np.ndarray]) -> KeyIndex:
        """The index for the key ids of a source of ``rows`` rows: the ids themselves when they
        are exact (``slots``: how many the coder gives; None: not exact) and few, else their
        rank among ``source_ids()`` (computed only then)."""
        if slots is not None and cls.direct(slots, rows):
            return cls(slots)
        return cls.ranked(source_ids())

    @classmethod
    def ranked(cls, source_ids: np.ndarray) -> KeyIndex:
        """By rank among the distinct ``source_ids`` (the key id of every source row)."""
        ids = np.sort(pd.unique(source_ids))
        return cls(len(ids), ids)

    def of_ids(self, gid: np.ndarray) -> np.ndarray:
        return gid if self.ids is None else np.searchsorted(self.ids, gid)


@dataclass
class KeyTally:
    """Live entries per key (by :class:`KeyIndex`) and the number of keys with any. Updated in
    place; ``mark`` changes with every update, so a holder that kept the mark it saw can tell
    whether the tally is still the one of its state."""

    counts: np.ndarray  # int64 per dense key index
    keys: int = 0
    mark: int = 0

    @classmethod
    def kept(cls, tally: KeyTally | None, mark: int, size: int,
             index: Callable[[], np.ndarray]) -> KeyTally:
        """``tally`` if a holder that saw ``mark`` may still use it (no step updated it since),
        else a fresh count of the dense key indices ``index()`` (the holder's live entries).

        >>> t = KeyTally.of(3, np.array([0])); t.update(np.array([2]))
        >>> KeyTally.kept(t, t.mark, 3, lambda: np.array([1])) is t
        True
        >>> KeyTally.kept(t, 0, 3, lambda: np.array([1])).counts.tolist()
        [0, 1, 0]
        """
        if tally is not None and tally.mark == mark:
            return tally
        return cls.of(size, index())

    @classmethod
    def of(cls, size: int, index: np.ndarray) -> KeyTally:
        """A tally of the entries with dense key indices ``index`` (any order).

        >>> KeyTally.of(4, np.array([2, 0, 2])).keys
        2
        """
        counts = np.bincount(index, minlength=size).astype(np.int64)
        return cls(counts, int(np.count_nonzero(counts)))

    def update(self, added: np.ndarray, *removed: np.ndarray) -> None:
        """Count entries with the sorted dense key indices ``added`` in and those of each of
        ``removed`` out (an entry counted out must be counted in, now or before). The indices
        of one batch usually lie close together: then one pass over their range, else one per
        array over its distinct indices.

        >>> t = KeyTally.of(4, np.array([1]))
        >>> t.update(np.array([1, 1, 3])); t.keys
        2
        >>> t.update(np.array([]), np.array([1, 1]), np.array([1])); t.keys, t.counts.tolist()
        (1, [0, 0, 0, 1])
        """
        self.mark += 1
        parts = [(a, 1) for a in (added,) if len(a)] + [(r, -1) for r in removed if len(r)]
        if not parts:
            return
        lo = min(int(a[0]) for a, _ in parts)
        hi = max(int(a[-1]) for a, _ in parts) + 1
        if hi - lo <= RANGE_FACTOR * sum(len(a) for a, _ in parts) + RANGE_SLACK:
            seg = self.counts[lo:hi]
            before = np.count_nonzero(seg)
            for a, sign in parts:
                if sign > 0:
                    seg += np.bincount(a - lo, minlength=hi - lo)
                else:
                    seg -= np.bincount(a - lo, minlength=hi - lo)
            self.keys += int(np.count_nonzero(seg)) - int(before)
            return
        for a, sign in parts:
            heads = np.flatnonzero(np.r_[True, a[1:] != a[:-1]])
            k = a[heads]
            before = self.counts[k]
            after = before + sign * np.diff(np.r_[heads, len(a)])
            self.counts[k] = after
            self.keys += int(np.count_nonzero(after)) - int(np.count_nonzero(before))
