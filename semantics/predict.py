"""Prediction without Spark: run the query's operator model through the engine's batch loop.

>>> result = predict(schedule, spec, "current")          # doctest: +SKIP
>>> result.batches[["batch_id", "dropped_by_watermark"]]  # doctest: +SKIP
>>> result.fates.query("fate == 'late'")                  # doctest: +SKIP

``batches`` has ``report_columns(spec)`` in that order; ``outputs`` is ``batch_id`` +
``output_columns(spec)``; ``fates`` (``batch_id, row_id, fate, detail`` plus the structured
columns of ``semantics.operators.fates``) explains why input rows were dropped and when state
entries left the state. Its ``detail`` text is rendered on first access (vectorised), so a
prediction that nobody explains pays nothing for it; ``info["fates"]`` (explained
predictions) holds JSON-safe counts, ``info["late_rows"]`` (explained predictions, or
``count_late``) the input rows dropped as late and ``info["never_evicted"]`` the state no
watermark ever evicts (``semantics.retention``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from functools import cached_property

import pandas as pd

from semantics import byte_facts, engine, restarts
from semantics.byte_facts import ByteFacts
from semantics.column_names import output_names
from semantics.config import resolve
from semantics.operators import fates as F
from semantics.operators import make_operator
from semantics.output_chunks import OutputChunks, StreamedRows
from semantics.report import (
    RunResult,
    frame_to_records,
    nan_kept,
    output_columns,
    report_columns,
)
from semantics.retention import never_evicted
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec

FATE_COLUMNS = ["batch_id", "row_id", "fate", "detail"]


@dataclass(frozen=True)
class Prediction(RunResult):
    """A :class:`RunResult` plus the explain table (see the module docstring)."""

    raw_fates: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=FATE_COLUMNS),
                                    repr=False)
    # ``predict(..., stream=True)``: the emitted rows, built a range at a time (``outputs``
    # then holds their columns only; a bounded prediction's: read from its spills)
    streamed: StreamedRows | None = field(default=None, repr=False)
    # what the byte estimates read besides the report (a join's records: with checkpoint
    # bytes asked), which a prediction in key ranges sums over its ranges
    byte_facts: ByteFacts | None = field(default=None, repr=False)

    def to_json(self, records: bool = True) -> dict[str, object]:
        """:meth:`RunResult.to_json`; a streamed prediction's ``outputs`` (``records=False``)
        is its :class:`OutputChunks`, for ``output_chunks.document_parts`` to write."""
        doc = super().to_json(records)
        if self.streamed is not None and not records:
            doc["outputs"] = self.streamed
        elif self.streamed is not None and len(self.streamed):  # (every row at once, as
            # records: what the streamed route is there to avoid)
            doc["outputs"] = frame_to_records(nan_kept(pd.concat(list(self.streamed.frames()))))
        return doc

    @cached_property
    def fates(self) -> pd.DataFrame:
        """``batch_id, row_id, fate, detail`` first, then the structured columns (rendering costs
        about a microsecond per row: prefer :meth:`fates_for` to explain a few rows)."""
        return _rendered(self.raw_fates)

    def fates_for(self, row_ids: list[int] | pd.Index) -> pd.DataFrame:
        """:attr:`fates` of the given input rows only (renders just those)."""
        raw = self.raw_fates
        return self.render(raw.loc[raw["row_id"].isin(list(row_ids))])

    @staticmethod
    def render(raw: pd.DataFrame) -> pd.DataFrame:
        """Some rows of :attr:`raw_fates` as :attr:`fates` renders them."""
        return _rendered(raw)


def _rendered(raw: pd.DataFrame) -> pd.DataFrame:
    df = raw.copy()
    if "detail" not in df.columns:
        df["detail"] = None
    todo = df["detail"].isna().to_numpy()
    if todo.any() and "bound_us" in df.columns:
        df["detail"] = df["detail"].astype(object)
        df.loc[todo, "detail"] = F.render(df.loc[todo])
    rest = [c for c in df.columns if c not in FATE_COLUMNS]
    df = df[FATE_COLUMNS + rest]
    if len(df):
        df = df.astype({"batch_id": "int64", "row_id": "int64"})
    return df.reset_index(drop=True)


def predict(schedule: Schedule, spec: BacktestSpec, candidate: str, *,
            explain: bool = True, columns: Collection[str] | None = None,
            count_late: bool = False, path: engine.Path = "auto",
            checkpoint: bool = True, stream: bool = False) -> Prediction:
    """Predict Spark's batches, emitted rows and row fates for ``candidate`` on ``schedule``.

    ``explain=False`` skips collecting fate rows altogether; ``columns`` builds only these
    output columns (plus ``batch_id``; e.g. the reference times a sweep reads), not all;
    ``count_late`` counts the input rows dropped as late (``info["late_rows"]``) without
    explain too. ``path`` picks how the operator computes the run (:func:`semantics.engine.run`:
    "auto", "step" or "whole_run", which raises :class:`semantics.engine.WholeRunDeclined`
    when the whole-run path declines); ``info["path"]`` says which ran and
    ``info["path_reason"]`` why (docs/architecture.md). ``checkpoint=False`` leaves the
    ``checkpoint_bytes`` column empty (its estimate encodes and compresses a sample of state
    records: a fixed cost a sweep's predictions skip). ``stream=True`` (one operator, not a
    pipeline) builds no output frame: ``outputs`` holds the columns only and ``streamed``
    builds the rows a range of batches at a time (``semantics.output_chunks``)."""
    if candidate not in spec.candidates:
        raise KeyError(f"no candidate {candidate!r} (candidates: {', '.join(spec.candidates)})")
    if spec.query.kind == "pipeline":  # (several operators: semantics.pipeline)
        from semantics.pipeline.predict import predict_pipeline

        res = predict_pipeline(schedule, spec, candidate, path, explain or count_late)
        return Prediction(candidate, res.batches, res.outputs, res.info)
    config = resolve(spec, candidate)  # (once: the engine and the operator read it)
    op = make_operator(spec, config, schedule, explain=explain)
    cols = output_columns(spec, dict(schedule.data_columns))
    if columns is not None:
        unknown = sorted(set(columns) - set(cols) - {"batch_id"})
        if unknown:
            raise KeyError(f"no output columns {unknown} (columns: {', '.join(cols)})")
        cols = [c for c in cols if c in columns]
    # the operators name a group key as the table spells it, Spark as the spec writes it
    written = output_names(spec)
    read_as = {w: k for k, w in written.items()}
    read_cols = [read_as.get(c, c) for c in cols]
    res = engine.run(schedule, spec, config, op, read_cols, count_late and not explain,
                     path=path, materialize=not stream)
    batches = res.batches.reindex(columns=report_columns(spec))
    # (the estimates read the run's facts, as a prediction in key ranges reads its ranges')
    ask = checkpoint and batches["checkpoint_bytes"].isna().all() and len(batches) > 0
    facts = byte_facts.of_run(res.batches, byte_facts.join_records(spec, candidate, schedule)
                              if ask else None,
                              byte_facts.dedup_entries(spec, candidate, schedule, batches,
                                                       res.deferred, res.deferred_ids))
    if batches["state_bytes"].isna().all() and len(batches):
        batches["state_bytes"] = byte_facts.state_bytes(spec, candidate, schedule, batches,
                                                        facts)
    if ask:
        batches["checkpoint_bytes"] = byte_facts.checkpoint_bytes(spec, candidate, schedule,
                                                                  batches, facts)
    raw = res.fates
    summary = ({str(k): int(v) for k, v in raw["fate"].value_counts().items() if v}
               if len(raw) else {})
    outputs = res.outputs.rename(columns=written) if written else res.outputs
    if not (isinstance(outputs.index, pd.RangeIndex) and outputs.index.start == 0
            and outputs.index.step == 1):
        outputs = outputs.reset_index(drop=True)
    info: dict[str, object] = {"operator": op.name, "path": res.path,
                               "path_reason": res.path_reason,
                               # the Spark release's rules predicted (semantics/profiles.py)
                               "spark_profile": config.profile.name,
                               **({"fates": summary} if explain else {}),
                               "never_evicted": never_evicted(spec, candidate)}
    if explain:  # input rows dropped as late (in at least one of their windows)
        info["late_rows"] = int(raw.loc[raw["fate"] == "late", "row_id"].nunique()) \
            if len(raw) else 0
    elif res.late_rows is not None:
        info["late_rows"] = res.late_rows
    info.update(restarts.describe(spec, candidate, schedule, batches))
    streamed = OutputChunks(op, res.deferred, res.deferred_ids, ["batch_id", *read_cols],
                            written) if stream else None
    return Prediction(candidate, batches, outputs if streamed is None else streamed.empty(),
                      info, raw, streamed, facts)
