"""A prediction split into key ranges and combined again (docs/semantics.md §15): what a
cluster runs per range (``jobs.predict_cluster``), pure, so it is also run range by range in
one process. No Spark.

Each key range is predicted on its own rows plus the carrier rows of ``semantics.sample``
(one per data tick and source, carrying the tick's maximum event time on a key no row has),
so every range runs the full history's batches with the full history's watermarks (§11).
``semantics.sample.without_carriers`` takes the carrier keys' figures out of each range;
then, as keys do not interact given the watermarks, the additive figures
(``semantics.sample.ADDITIVE``, ``input_rows_<source>``, ``output_rows``,
``info["late_rows"]``) of the whole run are the sums over the ranges, its emitted rows the
union, and every other report column (batch ids, ticks, watermarks, operator) is each
range's, equal in all of them. The emitted rows are typed as the single machine types them
(§15.2): each range's by ``semantics.sample.predicted_outputs`` once its carrier rows are
dropped, the ranges joined by ``columns.concat_rows`` (a NaN never made NULL). The byte
estimates (:func:`finish`) read the ranges' byte facts (``semantics.byte_facts``: per-key
figures the report lacks, the carrier keys' taken out of each range), summed: the whole
run's facts, so every kind's estimates are the single machine's.

Invariants: the ranges partition the key-hash range ``[0, 2^64)`` into ``count`` equal
intervals, so every key (every row of one key, on every source) is in exactly one range;
a range's schedule has the full schedule's ticks; the combined outputs are in batch order
(within a batch, in range order: Spark's order within a batch is not defined either) and have
the single-machine prediction's dtypes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from semantics import byte_facts
from semantics.errors import SpecError
from semantics.operators.columns import concat_rows
from semantics.predict import Prediction, predict
from semantics.report import RunResult
from semantics.sample import (
    ADDITIVE,
    Sample,
    draw,
    frame_column,
    key_hash,
    predicted_outputs,
    sample_keys,
    with_carriers,
    without_carriers,
)
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec

if TYPE_CHECKING:
    from semantics.checkpoint_bytes import SampleRows

MASTER_OPTION = "--master"  # (the field an error about splitting names)
_SPAN = 2 ** 64
_NO_KEY = 1e-300  # (times 2^64 below 1: no key hash in the sample)
# report columns every range must agree on (the batches Spark runs and their watermarks)
RANGE_SHARED = ("batch_id", "tick", "has_data", "watermark_ms", "operator",
                "late_watermark_ms", "eviction_watermark_ms")


@dataclass(frozen=True)
class Split:
    """What every range needs besides its own rows: the carrier rows (``carriers.schedule``
    holds them alone, like ``carriers.carriers``: no history row is shipped with it) and the
    carrier keys' prediction to subtract."""

    carriers: Sample
    carrier: Prediction
    count: int  # the number of key ranges


def check_splittable(spec: BacktestSpec) -> None:
    """SpecError naming ``--master`` for a query the ranges cannot split: a pipeline (its
    stages may key differently) or one without a key besides the event time."""
    if spec.query.kind == "pipeline":
        raise SpecError(spec.path, MASTER_OPTION, "a query of one stateful operator to predict "
                        "on a cluster (a pipeline is predicted on one machine: without "
                        "--master)")
    try:
        sample_keys(spec)
    except SpecError as exc:
        raise SpecError(spec.path, MASTER_OPTION, f"{exc.expected} (predict it without --master)"
                        .replace("--sample", MASTER_OPTION)) from None


def range_of(hashes: np.ndarray, count: int) -> np.ndarray:
    """The key range (0 .. count - 1) of each key hash: ``count`` equal intervals of the hash
    range, in order."""
    if count == 1:  # (2^64 itself is no uint64)
        return np.zeros(len(hashes), dtype=np.int64)
    width = np.uint64(-(-_SPAN // count))  # (ceil: the last interval ends at 2^64)
    return (hashes // width).astype(np.int64)


def split(schedule: Schedule, spec: BacktestSpec, candidate: str, count: int) -> Split:
    """The carrier rows and their prediction for ``count`` ranges of ``schedule``'s keys."""
    check_splittable(spec)
    # the carriers of the full history; a rate no key hash is below, so that no row of the
    # history is copied into the sample (the ranges take the rows)
    drawn = draw(schedule, spec, _NO_KEY)
    light = replace(drawn, schedule=drawn.carriers)
    return Split(light, predict_carriers(drawn.carriers, spec, candidate), count)


def predict_carriers(carriers: Schedule, spec: BacktestSpec, candidate: str) -> Prediction:
    """The carrier rows' prediction, with the facts of their keys that every range's byte
    facts hold too (a join's checkpoint records, ``semantics.byte_facts``)."""
    got = predict(carriers, spec, candidate, explain=False, count_late=True, checkpoint=False)
    return _with_join_records(got, carriers, spec, candidate, None)


def _with_join_records(got: Prediction, schedule: Schedule, spec: BacktestSpec,
                       candidate: str, skip: np.ndarray | None) -> Prediction:
    """``got`` (a run of ``schedule``, its checkpoint bytes not asked) with a join's
    checkpoint records in its byte facts, the sample rows not those of ``skip``."""
    facts = got.byte_facts or byte_facts.ByteFacts()
    if len(got.batches):
        facts = replace(facts, join=byte_facts.join_records(spec, candidate, schedule, skip))
    return replace(got, byte_facts=facts)


def pieces(schedule: Schedule, split_: Split, spec: BacktestSpec, rows_per_piece: int
           ) -> Iterator[tuple[int, str, pd.DataFrame]]:
    """``(range, source, rows)`` covering every row of the query's sources once, each at
    most ``rows_per_piece`` rows, in row order within a range and source."""
    keys = split_.carriers.key_columns
    for s in split_.carriers.carriers.rows:
        df = schedule.rows[s]
        if not len(df):
            continue
        cols = tuple(frame_column(df, k) for k in keys)
        ranges = range_of(key_hash(df, cols), split_.count)
        order = np.argsort(ranges, kind="stable")
        bounds = np.searchsorted(ranges[order], np.arange(split_.count + 1))
        for r in range(split_.count):
            idx = order[bounds[r]:bounds[r + 1]]
            for lo in range(0, len(idx), rows_per_piece):
                yield r, s, df.take(idx[lo:lo + rows_per_piece])


def range_schedule(split_: Split, rows: Mapping[str, Iterable[pd.DataFrame]]) -> Schedule:
    """One range's schedule: its rows (pieces of :func:`pieces`, any order) plus the carrier
    rows, sorted by (tick, row id) as a schedule is."""
    carriers = split_.carriers.carriers
    out: dict[str, pd.DataFrame] = {}
    for s, car in carriers.rows.items():
        out[s] = with_carriers(list(rows.get(s, [])), car)
    return replace(carriers, rows=out)


def predict_range(split_: Split, rows: Mapping[str, Iterable[pd.DataFrame]],
                  spec: BacktestSpec, candidate: str) -> Prediction:
    """The prediction for one range's keys: its schedule predicted, carriers removed (their
    figures and their byte facts). The byte estimates are left to :func:`finish`, from the
    ranges' facts combined (``byte_facts``)."""
    sched = range_schedule(split_, rows)
    carriers = np.concatenate([df[ROW_ID].to_numpy() for df in
                               split_.carriers.carriers.rows.values()])
    whole = _with_join_records(
        predict(sched, spec, candidate, explain=False, count_late=True, checkpoint=False),
        sched, spec, candidate, carriers)
    part = without_carriers(whole, split_.carrier, replace(split_.carriers, schedule=sched),
                            spec)
    info = {k: v for k, v in part.info.items() if k != "sample"}
    facts = whole.byte_facts.minus(split_.carrier.byte_facts) \
        if whole.byte_facts is not None and split_.carrier.byte_facts is not None else None
    return Prediction(candidate, part.batches, predicted_outputs(part.outputs, spec), info,
                      byte_facts=facts)


def combine(parts: list[RunResult], split_: Split, spec: BacktestSpec,
            candidate: str) -> Prediction:
    """The whole run from its ranges' runs (module docstring), with their byte facts
    combined when every range has them (its predictions, :func:`predict_range`). ValueError
    when two ranges ran different batches or watermarks (the carrier rows did not keep
    them)."""
    if not parts:  # (no row at all: the carrier rows' run without them)
        parts = [_empty(split_, spec, candidate)]
    first = parts[0].batches.reset_index(drop=True)
    out = first.copy()
    shared = [c for c in RANGE_SHARED if c in first.columns]
    added = [c for c in [*ADDITIVE, "output_rows"] if c in first.columns] + \
        [c for c in first.columns if c.startswith("input_rows_")]
    for p in parts[1:]:
        b = p.batches.reset_index(drop=True)
        if len(b) != len(first) or not b[shared].astype(object).equals(
                first[shared].astype(object)):
            raise ValueError("two key ranges ran different batches or watermarks: the carrier "
                             "rows did not keep them")
        for c in added:
            out[c] = out[c] + b[c]
    # (a range without emitted rows holds untyped columns: not concatenated; a float column
    # numpy in some ranges, nullable in others is nullable, its NaN kept: §15.2)
    emitted = [p.outputs for p in parts if len(p.outputs)] or [parts[0].outputs]
    outputs = concat_rows(emitted)
    if len(outputs):
        outputs = outputs.take(np.argsort(outputs["batch_id"].to_numpy(), kind="stable")
                               ).reset_index(drop=True)
    info = dict(parts[0].info)
    late = [p.info.get("late_rows") for p in parts]
    if all(isinstance(x, int) for x in late):
        info["late_rows"] = sum(x for x in late if isinstance(x, int))
    paths = sorted({str(p.info.get("path")) for p in parts})
    info["path"] = paths[0] if len(paths) == 1 else ", ".join(paths)
    info["path_reason"] = "; ".join(sorted({str(p.info.get("path_reason")) for p in parts}))
    info["key_ranges"] = {"ranges": split_.count, "ranges_with_rows": len(parts),
                          "carrier_rows": split_.carriers.carrier_rows,
                          "keys": list(split_.carriers.key_columns)}
    known = [p.byte_facts for p in parts if isinstance(p, Prediction) and p.byte_facts]
    return Prediction(candidate, out, outputs, info, byte_facts=byte_facts.combined(known)
                      if len(known) == len(parts) else None)


def _empty(split_: Split, spec: BacktestSpec, candidate: str) -> Prediction:
    return predict_range(split_, {}, spec, candidate)


def finish(result: RunResult, schedule: Schedule, spec: BacktestSpec, candidate: str, *,
           checkpoint: bool = True, got: SampleRows | None = None) -> Prediction:
    """The combined run with the byte estimates the single-machine prediction computes, by
    the same functions (``semantics.byte_facts``), from the schedule, the combined figures
    and the ranges' byte facts combined (``result.byte_facts``: a session's or a join's
    state keys, a join's checkpoint records; without them, as a run that is no
    :class:`Prediction`, those estimates are left empty). ``got``: the checkpoint sample's
    rows read from the files, ``schedule`` then holding only the rows that the estimates
    read (``semantics.file_ranges``)."""
    batches = result.batches.copy()
    known = result.byte_facts if isinstance(result, Prediction) else None
    # (without facts, what reads none: an aggregation's or a deduplication's estimates)
    facts = known or byte_facts.ByteFacts()
    if len(batches):
        batches["state_bytes"] = \
            pd.Series([None] * len(batches), index=batches.index, dtype="Int64") \
            if known is None and spec.query.kind in ("session", "join") else \
            byte_facts.state_bytes(spec, candidate, schedule, batches, facts)
        if checkpoint:
            batches["checkpoint_bytes"] = byte_facts.checkpoint_bytes(
                spec, candidate, schedule, batches, facts, got)
    return Prediction(candidate, batches, result.outputs, result.info, byte_facts=facts)


def predict_in_ranges(schedule: Schedule, spec: BacktestSpec, candidate: str, count: int, *,
                      rows_per_piece: int = 1 << 16,
                      run: Callable[[Split, dict[int, dict[str, list[pd.DataFrame]]]],
                                    list[RunResult]] | None = None) -> Prediction:
    """``schedule`` predicted in ``count`` key ranges and combined: by default range after
    range in this process; ``run`` (given the split and each range's pieces by source) runs
    them elsewhere, e.g. on Spark's executors."""
    sp = split(schedule, spec, candidate, count)
    by_range: dict[int, dict[str, list[pd.DataFrame]]] = {}
    for r, s, df in pieces(schedule, sp, spec, rows_per_piece):
        by_range.setdefault(r, {}).setdefault(s, []).append(df)
    parts = run(sp, by_range) if run is not None else \
        [predict_range(sp, rows, spec, candidate) for _, rows in sorted(by_range.items())]
    return finish(combine(parts, sp, spec, candidate), schedule, spec, candidate)
