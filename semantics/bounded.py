"""A plain ``wmbt predict`` of a large history in bounded memory (docs/semantics.md §15.3):
the key ranges of §15/§15.1 run one after the other on this machine, their rows and emitted
rows kept in spill files, so that no step holds the history or its emitted rows.

1. Facts pass (``file_ranges.file_facts``): each data file read once, reduced to its facts;
   the plan (``file_ranges.plan_files``: row ids, ticks, carrier rows and their prediction)
   is made from them.
2. Spill pass: each data file read once more (``file_ranges.file_pieces``), its rows in the
   schedule's layout cut by key range and appended, pickled a piece at a time, to that
   range's spill file of its source (pickled pandas frames, as the cluster ships them: every
   column keeps its pandas type).
3. Range after range: its spilled rows read back and predicted with the carrier rows
   (``key_ranges.predict_range``), its small batch report kept, its emitted rows spilled in
   slices (in batch order) and its input spill deleted.
4. The reports combined (``key_ranges.combine``) with the byte estimates of §15.1
   (``file_ranges.with_byte_estimates``); the emitted rows streamed by
   :class:`SpilledOutputs` in batch order, merging the ranges' spills a range of batches at
   a time, for the results store and ``--json`` (as ``semantics.output_chunks`` does).

The spill folder is made inside the folder given (the results' ``_work``) and removed when
the prediction's emitted rows are dropped (or the interpreter exits), and at once when
anything fails midway (an error, Ctrl-C, SIGTERM): no spill outlives the run.

Invariants: the batch report, the late rows and the run id are the single-machine
prediction's (the plan is ``file_ranges``'s, the ranges ``key_ranges``'s); the emitted rows
are the single machine's per batch as multisets, with its column types (a float column is
nullable when one range's is, §15.2); frames come in batch order, every batch's rows in one
frame, within a batch range after range (§15). Peak memory: one range's prediction, a
piece of a file, and one frame of emitted rows (with a slice per range being merged).
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from deltalake.exceptions import DeltaError

from semantics.column_names import open_table
from semantics.errors import SpecError, WmbtError
from semantics.file_ranges import (
    FilePlan,
    file_facts,
    file_pieces,
    list_files,
    not_from_files,
    plan_files,
    with_byte_estimates,
)
from semantics.history import TableFiles
from semantics.key_ranges import check_splittable, combine, predict_range
from semantics.operators.columns import concat_rows, kind_of, nullable_floats
from semantics.predict import Prediction
from semantics.report import RunResult
from semantics.spec import BacktestSpec
from semantics.tuning import (
    BOUNDED_FROM_ROWS,
    BOUNDED_MIN_RANGE_ROWS,
    RANGE_BYTES_PER_EVENT,
    RANGE_PEAK_BYTES_PER_ROW,
    STREAM_CHUNK_ROWS,
)

Progress = Callable[[str], None]
SPILL_PIECE_ROWS = 1 << 16  # rows of one pickled piece of a file's range (spilled at once)
SPILL_PREFIX = "wmbt-spill-"


def not_bounded(spec: BacktestSpec, candidate: str) -> str | None:
    """Why ``candidate`` cannot take the bounded route (None: it can): what §15.1 cannot plan
    from the files, a pipeline or a query without a key besides the event time (§15)."""
    why = not_from_files(spec, candidate)
    if why is not None:
        return why
    try:
        check_splittable(spec)
    except SpecError as exc:
        return exc.expected
    return None


def logged_rows(spec: BacktestSpec) -> int | None:
    """The rows of the query's sources as their Delta logs' statistics count them (the
    latest snapshot's files, before any filter: a bound to choose a route by, not a row
    count), None where a file has no statistics."""
    total = 0
    for s in spec.query_sources:
        adds = pa.table(open_table(spec, s).get_add_actions(flatten=True))
        if "num_records" not in adds.column_names:
            return None
        n = adds.column("num_records")
        if n.null_count:
            return None
        total += int(pc.sum(n).as_py() or 0)
    return total


def takes_bounded(spec: BacktestSpec, candidate: str, from_rows: int = BOUNDED_FROM_ROWS
                  ) -> bool:
    """Whether a plain prediction of ``candidate`` takes the bounded route: it qualifies
    (:func:`not_bounded`) and its history has ``from_rows`` rows or more by the logs'
    statistics (no statistics: taken; a log that cannot be read: not, the whole history's
    route reports it)."""
    if not_bounded(spec, candidate) is not None:
        return False
    if from_rows <= 0:
        return True
    try:
        rows = logged_rows(spec)
    except (WmbtError, DeltaError):  # (the whole history's route reads it and says why)
        return False
    return rows is None or rows >= from_rows


def range_count(rows: int) -> int:
    """Key ranges for ``rows`` rows of history: enough that one range's prediction takes at
    most ``RANGE_BYTES_PER_EVENT`` bytes per event of the whole history, no range under
    ``BOUNDED_MIN_RANGE_ROWS`` rows where that allows.

    >>> range_count(10_000_000), range_count(100_000), range_count(0)
    (16, 1, 1)
    """
    want = -(-RANGE_PEAK_BYTES_PER_ROW // RANGE_BYTES_PER_EVENT)
    return max(1, min(want, rows // BOUNDED_MIN_RANGE_ROWS))


class _Folder:
    """A spill folder inside ``parent``, made with the folders it needs; :attr:`remove`
    removes it and those of them left empty, once: when called, when this is dropped, or
    when the interpreter exits."""

    def __init__(self, parent: Path) -> None:
        made, p = [], parent.resolve()
        while not p.exists():
            made.append(p)
            p = p.parent
        parent.mkdir(parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(prefix=SPILL_PREFIX, dir=parent))
        self.remove = weakref.finalize(self, _removed, self.path, made)


def _removed(path: Path, made: list[Path]) -> None:
    shutil.rmtree(path, ignore_errors=True)
    for p in made:  # (innermost first)
        try:
            p.rmdir()
        except OSError:  # (not empty: something else is there)
            break


@dataclass(frozen=True)
class SpilledOutputs:
    """The emitted rows of a bounded prediction: per range with rows, a spill file of
    pickled slices in batch order. Read as ``output_chunks.OutputChunks`` is (``len``,
    :meth:`frames`, :meth:`empty`); :meth:`frames` may be iterated more than once."""

    files: tuple[Path, ...]
    rows: int
    columns: tuple[str, ...]
    nullable: frozenset[str]  # float columns nullable in the whole run (§15.2)
    spill: _Folder | None = field(default=None, repr=False, compare=False)  # (removed with
    # the last reference to it)

    def __len__(self) -> int:
        return self.rows

    def empty(self) -> pd.DataFrame:
        return pd.DataFrame(columns=list(self.columns))

    def close(self) -> None:
        """Remove the spill folder now (else when this is dropped)."""
        if self.spill is not None:
            self.spill.remove()

    def frames(self, rows: int | None = None) -> Iterator[pd.DataFrame]:
        """The emitted rows in batch order, each frame whole batches of all the ranges, of
        about ``rows`` rows (default ``STREAM_CHUNK_ROWS``: at least that many but where the
        ranges' rows read so far end sooner; more where a batch's rows run over); each
        frame's index counts on from the one before's."""
        limit = STREAM_CHUNK_ROWS if rows is None else rows
        readers = [_loaded(p) for p in self.files]
        pending: list[pd.DataFrame | None] = [None] * len(readers)
        live = [True] * len(readers)
        held: list[pd.DataFrame] = []
        at = 0

        def more(i: int) -> None:
            got = next(readers[i], None)
            if got is None:
                live[i] = False
            else:
                p = pending[i]
                pending[i] = got if p is None else pd.concat([p, got])

        while True:
            for i in range(len(readers)):
                if live[i] and pending[i] is None:
                    more(i)
            if not any(live) and all(p is None for p in pending):
                break
            # rows of a batch before every live range's last one read are all here
            lasts = [int(p["batch_id"].iat[-1]) for p, ok in zip(pending, live, strict=True)
                     if ok and p is not None]
            cut = min(lasts) if lasts else None
            took = False
            for i, p in enumerate(pending):
                if p is None:
                    continue
                k = len(p) if cut is None else int(np.searchsorted(
                    p["batch_id"].to_numpy(), cut, side="left"))
                if k:
                    held.append(p.iloc[:k])
                    pending[i] = p.iloc[k:] if k < len(p) else None
                    took = True
            if not took:  # (every range's rows read end at the cut batch: read on)
                for i, p in enumerate(pending):
                    if live[i] and p is not None and int(p["batch_id"].iat[-1]) == cut:
                        more(i)
                continue
            if sum(len(h) for h in held) >= limit:
                frame = self._frame(held, at)
                at += len(frame)
                held = []
                yield from _whole_batches(frame, limit)
        if held:
            yield from _whole_batches(self._frame(held, at), limit)

    def _frame(self, pieces: list[pd.DataFrame], at: int) -> pd.DataFrame:
        """The pieces (whole batches, from several ranges) as one frame in batch order (a
        batch's rows range after range), typed as the whole run's rows."""
        df = concat_rows(pieces)
        order = np.argsort(df["batch_id"].to_numpy(), kind="stable")
        df = df.take(order)
        for c in self.nullable:
            if isinstance(df[c].dtype, np.dtype):  # (a NaN stays a NaN: §6)
                df[c] = nullable_floats(df[c].to_numpy())
        df.index = pd.RangeIndex(at, at + len(df))
        return df


def _whole_batches(frame: pd.DataFrame, rows: int) -> Iterator[pd.DataFrame]:
    """``frame`` (in batch order) in consecutive parts of at least ``rows`` rows (the last:
    what is left), each ending where a batch does.

    >>> [len(f) for f in _whole_batches(pd.DataFrame({"batch_id": [0, 0, 1, 2, 2, 3]}), 2)]
    [2, 3, 1]
    """
    b = frame["batch_id"].to_numpy()
    start = 0
    while start < len(b):
        end = len(b) if start + rows >= len(b) else \
            int(np.searchsorted(b, b[start + rows - 1], side="right"))
        yield frame.iloc[start:end]
        start = end


def _loaded(path: Path) -> Iterator[pd.DataFrame]:
    """The frames pickled one after the other into ``path``."""
    with open(path, "rb") as f:
        while True:
            try:
                yield pickle.load(f)
            except EOFError:
                return


def _nullable_floats(df: pd.DataFrame) -> set[str]:
    return {c for c in df.columns
            if kind_of(df[c].dtype) == "float" and not isinstance(df[c].dtype, np.dtype)}


def predict_bounded(spec: BacktestSpec, candidate: str, work: Path, *,
                    count: int | None = None, rows_per_piece: int = SPILL_PIECE_ROWS,
                    progress: Progress = lambda _m: None) -> tuple[Prediction, FilePlan]:
    """``candidate`` predicted from the files range after range (module docstring), its
    emitted rows in :class:`SpilledOutputs` (``Prediction.streamed``; ``outputs``: the
    columns only), and the plan (for the run id). ``count``: the key ranges (default
    :func:`range_count` of the history's rows). Spills go in a folder inside ``work``."""
    folder = _Folder(work)
    try:
        files = list_files(spec)
        facts = [file_facts(spec, f, i) for f in files.values() for i in range(len(f.path))]
        total = sum(f.rows for f in facts)
        n = count if count is not None else range_count(total)
        plan = plan_files(spec, candidate, files, facts, n)
        progress(f"[{candidate}] planned {len(plan.schedule.ticks)} ticks from the files, "
                 f"{total} rows in {n} key ranges")
        spilled = _spill_inputs(spec, files, plan, folder.path, rows_per_piece)
        parts: list[RunResult] = []
        outs: list[Path] = []
        rows, columns, nullable = 0, None, set()
        slice_rows = max(1024, STREAM_CHUNK_ROWS // n)
        for r in range(n):
            paths = {s: folder.path / f"in-{r}-{i}" for i, s in enumerate(files)
                     if (r, s) in spilled}
            if not paths:
                continue
            part = predict_range(plan.split, {s: list(_loaded(p)) for s, p in paths.items()},
                                 spec, candidate)
            for p in paths.values():
                p.unlink()
            emitted = part.outputs
            if len(emitted):
                out = folder.path / f"out-{r}"
                with open(out, "wb") as f:
                    for lo in range(0, len(emitted), slice_rows):
                        pickle.dump(emitted.iloc[lo:lo + slice_rows], f, protocol=5)
                outs.append(out)
                rows += len(emitted)
                nullable |= _nullable_floats(emitted)
            columns = columns or tuple(emitted.columns)
            # (a copy: a slice of no row is still a view holding every emitted row)
            parts.append(replace(part, outputs=emitted.iloc[:0].copy()))
            del part, emitted
        combined = combine(parts, plan.split, spec, candidate)
        parts.clear()  # (their byte facts are combined: a dedup's entries held once)
        columns = columns or tuple(combined.outputs.columns)
        pred = with_byte_estimates(replace(combined, outputs=combined.outputs.iloc[:0]), spec,
                                   candidate, files, plan, facts)
        streamed = SpilledOutputs(tuple(outs), rows, columns, frozenset(nullable), folder)
        return Prediction(candidate, pred.batches, streamed.empty(), pred.info,
                          streamed=streamed), plan
    except BaseException:
        folder.remove()
        raise


def _spill_inputs(spec: BacktestSpec, files: dict[str, TableFiles], plan: FilePlan,
                  folder: Path, rows_per_piece: int) -> set[tuple[int, str]]:
    """Every file's rows appended, by key range, to the range's spill file of its source
    (``in-<range>-<source's position>``); the (range, source) pairs with rows."""
    handles: dict[tuple[int, str], BinaryIO] = {}
    names = {s: i for i, s in enumerate(files)}
    try:
        for s, f in files.items():
            for i in range(len(f.path)):
                if not plan.rows[s][i]:
                    continue
                for r, df in file_pieces(spec, f, plan, i, rows_per_piece):
                    h = handles.get((r, s))
                    if h is None:
                        h = handles[(r, s)] = open(folder / f"in-{r}-{names[s]}", "wb")
                    pickle.dump(df, h, protocol=5)
    finally:
        for h in handles.values():
            h.close()
    return set(handles)
