"""A prediction's emitted rows built a range of batches at a time, never all at once.

``predict(..., stream=True)`` leaves ``Prediction.outputs`` empty (its columns only) and sets
``Prediction.streamed`` to an :class:`OutputChunks`: the operator's step outputs, which
:meth:`OutputChunks.frames` builds (``Operator.materialize``) a range of consecutive batches
at a time, each frame of at most ``STREAM_CHUNK_ROWS`` rows unless one batch alone emits
more. A plain ``wmbt predict`` stores and prints them frame by frame (``jobs.results``,
``jobs.cli``), so its peak memory holds one frame of emitted rows, not all of them.

Invariants: the frames, concatenated, are the rows ``predict(..., stream=False)`` gives in
``outputs`` (same columns, values and order; tests/test_output_chunks.py); every batch's
rows are in one frame; frames come in batch order, so each frame's ``batch_id`` values are
above the frame's before it. :meth:`OutputChunks.frames` may be iterated more than once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, cast, runtime_checkable

import numpy as np
import pandas as pd

from semantics.engine import Deferred, Operator, output_frame
from semantics.report import document_pieces, json_rows, nan_kept
from semantics.tuning import STREAM_CHUNK_ROWS


@runtime_checkable
class StreamedRows(Protocol):
    """Emitted rows built or read a range of batches at a time: :class:`OutputChunks`, or
    ``semantics.bounded.SpilledOutputs`` (a bounded prediction's, read from its spills)."""

    def __len__(self) -> int: ...

    def frames(self, rows: int | None = None) -> Iterator[pd.DataFrame]: ...

    def empty(self) -> pd.DataFrame: ...


@dataclass(frozen=True)
class OutputChunks:
    """Step outputs of a run (the non-empty ones, with their batch ids) and how to build them:
    the operator, the columns it builds (as it names them) and their names as emitted."""

    operator: Operator
    deferred: list[Deferred]
    batch_ids: list[int]
    columns: list[str]  # as the operator reads them (``batch_id`` first)
    written: dict[str, str]  # an operator's name -> the name emitted, where they differ

    def __len__(self) -> int:
        """Emitted rows in all."""
        return int(sum(len(d) for d in self.deferred))

    def ranges(self, rows: int | None = None) -> list[slice]:
        """Consecutive ranges of ``deferred``, each of at most ``rows`` emitted rows (default
        ``STREAM_CHUNK_ROWS``) but at least one batch.

        >>> c = OutputChunks(None, [Deferred(None, n) for n in (3, 3, 9, 1)], [0, 1, 2, 3],
        ...                  ["batch_id"], {})  # type: ignore[arg-type]
        >>> c.ranges(6)
        [slice(0, 2, None), slice(2, 3, None), slice(3, 4, None)]
        """
        limit = STREAM_CHUNK_ROWS if rows is None else rows
        out, start, held = [], 0, 0
        for i, d in enumerate(self.deferred):
            if i > start and held + len(d) > limit:
                out.append(slice(start, i))
                start, held = i, 0
            held += len(d)
        if start < len(self.deferred):
            out.append(slice(start, len(self.deferred)))
        return out

    def frames(self, rows: int | None = None) -> Iterator[pd.DataFrame]:
        """The emitted rows (``batch_id`` + the output columns, as emitted), a range of batches
        at a time (:meth:`ranges`); each frame's index counts on from the one before's. No
        frame when nothing was emitted."""
        at = 0
        for part in self.ranges(rows):
            df = output_frame(self.operator, self.deferred[part], self.batch_ids[part],
                              self.columns)
            if self.written:
                df = df.rename(columns=self.written)
            df.index = pd.RangeIndex(at, at + len(df))
            at += len(df)
            yield df

    def empty(self) -> pd.DataFrame:
        """The columns of the emitted rows, no row (``Prediction.outputs`` of a streamed run)."""
        df = pd.DataFrame(columns=self.columns)
        return df.rename(columns=self.written) if self.written else df


def batch_ordered(batch_id: np.ndarray) -> np.ndarray | None:
    """Positions that put rows back in batch order, keeping each batch's own order (a stable
    sort), or None when they are in it already.

    >>> batch_ordered(np.array([2, 2, 0, 1])).tolist(), batch_ordered(np.array([0, 0, 1]))
    ([2, 3, 0, 1], None)
    """
    if len(batch_id) < 2 or bool(np.all(batch_id[1:] >= batch_id[:-1])):
        return None
    return np.argsort(batch_id, kind="stable")


def document_parts(doc: object) -> Iterator[str]:
    """The text ``semantics.report.dumps`` makes of ``doc``, byte for byte, in pieces: where
    ``doc`` holds an :class:`OutputChunks` (``Prediction.to_json(records=False)`` of a
    streamed prediction) its rows are written frame by frame, as :func:`nan_kept` and
    :func:`json_rows` write the whole ``outputs`` frame, so no piece holds every row.

    >>> "".join(document_parts({"n": 1, "rows": pd.DataFrame({"k": ["a"]})}))
    '{"n": 1, "rows": [{"k": "a"}]}'
    """
    texts, values = document_pieces(doc, (pd.DataFrame, StreamedRows))
    yield texts[0]
    for v, after in zip(values, texts[1:], strict=True):
        # (a streamed run's frames get RunResult.to_json's nan_kept one by one)
        frames = [v] if isinstance(v, pd.DataFrame) else \
            (nan_kept(f) for f in cast(StreamedRows, v).frames())
        yield "["
        first = True
        for f in frames:
            if len(f):
                yield ("" if first else ", ") + ", ".join(json_rows(f, list(f.columns)).tolist())
                first = False
        yield "]"
        yield after
