"""One join side's buffered rows, kept as runs so that a batch costs what it adds and removes.

A side's state used to be one array sorted by (key, event time), merged with the batch's rows
and filtered by eviction every batch: with a long watermark delay that rewrote millions of
rows to insert twenty thousand. Here a batch's stored rows become a new *run* (sorted like the
state was); a run is never rewritten in place, and join rows leave the state only by eviction,
so a run's rows that are gone are exactly those with ``ev <= run.dead_us`` (the largest state
threshold applied to it). Runs are merged LSM-style (the newest into the one before while that
one is at most ``RATIO`` times its size and still *hot*: its newest event time is one the other
side's rows of this batch could match); runs mostly gone are rewritten; a side of at most
``WHOLE`` times the batch's rows is kept as one run, rewritten every batch (cheaper than several
searches while it is small).

Cold runs are left as they are: new rows skip them (their event-time ranges cannot meet), and
as the oldest they are evicted first, mostly whole, instead of being rewritten into the newest
rows' run and scanned for eviction every batch. How runs are kept changes the cost, never the
result (tests/test_predict_join_store.py).

Invariants: every run's ``rows`` are sorted by ``comp`` when keys are packed (else in insertion
order, and a side is always one run); ``live`` counts the rows with ``ev > dead_us``; a run with
no live row is dropped; ``matched`` flags are copied before they change (a step never writes a
run it was given); ``tally`` counts the live rows per key code while its ``mark`` equals the
side's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from semantics.operators.grouping import count_distinct, interleave, merge_positions
from semantics.operators.key_tally import KeyTally
from semantics.operators.runs import compact
from semantics.tuning import DEAD, RATIO

_NONE = np.iinfo(np.int64).min  # dead_us of a run no threshold has reached yet
_EMPTY = np.array([], dtype=np.int64)


@dataclass(frozen=True)
class SideRows:
    """Rows of one join side as aligned arrays.

    A row refers to its source row (``pos``: position in ``schedule.rows[source]``); column
    values are gathered from there only when the run's output is materialised. Invariant: when
    the operator packs keys (``comp`` from :class:`~semantics.operators.join_frames.Packing`),
    rows are sorted by ``comp`` (key code, then event time); otherwise they are in insertion
    order and ``comp`` is unused.
    """

    pos: np.ndarray  # int64 position of the source row
    code: np.ndarray  # int64 join-key code (equal key tuples, equal codes; null == null)
    et: np.ndarray  # int64 event time (µs)
    ev: np.ndarray  # int64 value the state predicate compares (µs; never evicted: int64 max)
    matched: np.ndarray  # bool, Spark's state-format-v2 flag
    comp: np.ndarray  # int64 sort key (code, event time)

    def __len__(self) -> int:
        return len(self.pos)

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return self.pos, self.code, self.et, self.ev, self.matched, self.comp

    def take(self, sel: np.ndarray) -> SideRows:
        """Rows at ``sel`` (positions or a boolean mask), new arrays."""
        if sel.dtype == bool:  # one pass over the mask, then six gathers (not six compresses)
            sel = np.flatnonzero(sel)
        return SideRows(*(a[sel] for a in self._arrays()))

    def with_matched(self, matched: np.ndarray) -> SideRows:
        return SideRows(self.pos, self.code, self.et, self.ev, matched, self.comp)

    def then(self, other: SideRows) -> SideRows:
        """``self`` followed by ``other`` (always new arrays: a step never mutates its input)."""
        return SideRows(*(np.concatenate([a, b]) for a, b in
                          zip(self._arrays(), other._arrays(), strict=True)))

    def merged(self, other: SideRows) -> SideRows:
        """Both sorted by ``comp``: their sorted union (``self`` first on ties), new arrays."""
        if not len(other) or not len(self):
            return self.then(other)
        pa, pb = merge_positions(self.comp, other.comp)
        return SideRows(*(interleave(pa, a, pb, b) for a, b in
                          zip(self._arrays(), other._arrays(), strict=True)))

    @staticmethod
    def concat(parts: list[SideRows]) -> SideRows:
        """The rows of ``parts`` one after the other."""
        if not parts:
            return SideRows.empty()
        if len(parts) == 1:
            return parts[0]
        return SideRows(*(np.concatenate(a) for a in zip(*(p._arrays() for p in parts),
                                                         strict=True)))

    @classmethod
    def empty(cls) -> SideRows:
        e = np.array([], dtype=np.int64)
        return cls(e, e, e, e, np.array([], dtype=bool), e)


@dataclass(frozen=True)
class Gone:
    """Rows ``idx`` (ascending) of a run's ``rows``, just evicted; their columns are gathered
    only when read (an inner join without explain reads none)."""

    rows: SideRows
    idx: np.ndarray

    def __len__(self) -> int:
        return len(self.idx)

    def col(self, name: str) -> np.ndarray:
        """One column (``pos``, ``code``, ``matched``, ...) of the evicted rows."""
        return getattr(self.rows, name)[self.idx]

    def take(self) -> SideRows:
        return self.rows.take(self.idx)


@dataclass(frozen=True)
class Run:
    """Rows stored by one batch (or merged from several runs); those with ``ev <= dead_us``
    have been evicted. ``min_*``/``max_*`` bound all its rows, gone ones included (perhaps
    loosely: a merge into the run keeps them)."""

    rows: SideRows
    live: int
    dead_us: int
    min_et: int
    max_et: int
    min_ev: int

    @classmethod
    def of(cls, rows: SideRows) -> Run:
        return cls(rows, len(rows), _NONE, int(rows.et.min()), int(rows.et.max()),
                   int(rows.ev.min()))

    @property
    def size(self) -> int:
        return len(self.rows)

    @property
    def newest(self) -> int:
        return self.max_et

    def merged_with(self, rows: SideRows, packed: bool) -> Run:
        """This run's live rows and ``rows`` as one run; its bounds are widened by the rows'
        (kept loose: no pass over the run to recompute them)."""
        old, new = self.live_rows(), Run.of(rows)
        return Run(old.merged(rows) if packed else old.then(rows), len(old) + len(rows), _NONE,
                   min(self.min_et, new.min_et), max(self.max_et, new.max_et),
                   min(self.min_ev, new.min_ev))

    def alive(self, idx: np.ndarray) -> np.ndarray:
        """Which of the rows at ``idx`` are still in the state (a boolean per index)."""
        return self.rows.ev[idx] > self.dead_us

    def live_rows(self) -> SideRows:
        if self.live == len(self.rows):
            return self.rows
        return self.rows.take(self.rows.ev > self.dead_us)


@dataclass(frozen=True)
class SideStore:
    """One side's buffered rows: the live rows of ``runs`` (oldest first); ``tally`` counts
    them per key code while ``tally.mark == mark``."""

    runs: tuple[Run, ...] = ()
    tally: KeyTally | None = None
    mark: int = 0

    def __len__(self) -> int:
        return sum(r.live for r in self.runs)

    def live_rows(self) -> SideRows:
        """Every live row (runs one after the other)."""
        return SideRows.concat([r.live_rows() for r in self.runs])

    def live_codes(self) -> np.ndarray:
        """The key code of every live row (runs one after the other)."""
        parts = [r.rows.code if r.live == len(r.rows) else r.rows.code[r.rows.ev > r.dead_us]
                 for r in self.runs]
        return np.concatenate(parts) if parts else np.array([], dtype=np.int64)


class SideWork:
    """A step's working copy of a side: runs replaced (never written) as their matched flags
    change, rows evicted, a new run added. ``packed``: runs are sorted by (key code, time), else
    in insertion order."""

    def __init__(self, store: SideStore, packed: bool):
        self.store = store
        self.packed = packed
        self.runs = list(store.runs)
        self._own: set[int] = set()  # runs whose matched flags this step already copied
        self.added = SideRows.empty()

    def add(self, rows: SideRows, small: int | None) -> None:
        """Store ``rows`` (this step's own arrays, sorted like a run): merged with the live
        rows of the side's run if it is one run and they hold at most ``small`` rows (None:
        always), else as a new run."""
        self.added = rows
        if not len(rows):
            return
        if len(self.runs) == 1 and (small is None or self.runs[0].live + len(rows) <= small):
            self.runs[0] = self.runs[0].merged_with(rows, self.packed)
        else:
            self.runs.append(Run.of(rows))
        self._own.add(len(self.runs) - 1)

    def count_keys(self, size: int) -> tuple[int, KeyTally | None]:
        """Distinct key codes of the side now (rows added, none evicted yet) and the tally to
        keep (None: not kept). One run without gone rows: counted on it; else by the store's
        tally (counted afresh if a step moved it on; ``size``: codes there are), updated with
        the added rows and to be updated with the evicted ones (:meth:`untally`)."""
        if len(self.runs) == 1 and self.runs[0].live == len(self.runs[0].rows):
            return count_distinct(self.runs[0].rows.code, self.packed), None
        tally = KeyTally.kept(self.store.tally, self.store.mark, size, self.store.live_codes)
        tally.update(self._sorted(self.added.code))
        return tally.keys, tally

    def untally(self, tally: KeyTally | None, gone: list[Gone]) -> None:
        """Count the evicted rows out of ``tally`` (None: nothing kept)."""
        if tally is not None:
            tally.update(_EMPTY, *(self._sorted(g.col("code")) for g in gone))

    def _sorted(self, code: np.ndarray) -> np.ndarray:
        """Key codes of rows of one run, sorted (a packed run is sorted by code)."""
        return code if self.packed else np.sort(code)

    def set_matched(self, i: int, idx: np.ndarray) -> None:
        """Flag the rows at ``idx`` of run ``i`` as matched (copy-on-write)."""
        if not len(idx):
            return
        run = self.runs[i]
        if i not in self._own:
            run = replace(run, rows=run.rows.with_matched(run.rows.matched.copy()))
            self.runs[i] = run
            self._own.add(i)
        run.rows.matched[idx] = True

    def evict(self, thr_us: int | None, small: int | None) -> list[Gone]:
        """Remove the rows with ``ev <= thr_us`` (None: none); returns them, run by run (each
        sorted like its run). A side that is one run of at most ``small`` rows (None: any) loses
        them at once (the next batch merges into the run without a pass to drop them); runs
        mark them gone."""
        if thr_us is None:
            return []
        gone = []
        one = len(self.runs) == 1 and (small is None or self.runs[0].live <= small)
        for i, run in enumerate(self.runs):
            if run.min_ev > thr_us or thr_us <= run.dead_us:
                continue
            ev = run.rows.ev
            out = ev <= thr_us
            if run.dead_us != _NONE:
                out &= ev > run.dead_us
            idx = np.flatnonzero(out)
            if not len(idx):
                continue
            gone.append(Gone(run.rows, idx))
            if one and run.dead_us == _NONE:
                out = np.logical_not(out, out=out)
                self.runs[i] = replace(run, rows=run.rows.take(out), live=run.live - len(idx))
            else:
                self.runs[i] = replace(run, live=run.live - len(idx), dead_us=thr_us)
        return gone

    def stored(self, tally: KeyTally | None, small: int | None, horizon: int | None = None
               ) -> SideStore:
        """The side after this step (``tally``: its live rows per key, already updated; None:
        not kept), compacted (:func:`~semantics.operators.runs.compact`): ``horizon`` is the
        oldest event time a row of the other side in this batch could match (None: no bound);
        all in one run when they hold at most ``small`` rows (None: always)."""
        def merge(a: Run, b: Run) -> Run:
            x, y = a.live_rows(), b.live_rows()
            return Run.of(x.merged(y) if self.packed else x.then(y))

        out = compact(self.runs, small, horizon, lambda r: Run.of(r.live_rows()), merge,
                      ratio=RATIO, dead=DEAD)
        return SideStore(tuple(out), tally, 0 if tally is None else tally.mark)
