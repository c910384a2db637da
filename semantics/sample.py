"""A key-hash sample of a schedule plus carrier rows (docs/semantics.md §11), and the carrier
rows' contribution taken out of a run's figures. Pure: no Spark.

A sampled replay runs in Spark only the rows whose stateful key falls in the sample, so it
must still run with exactly the full history's watermarks and no-data batches. Both depend
only on each tick's maximum event time per source (docs/semantics.md §2), so every data tick
gets, per source that has rows in it, one *carrier row*: a copy of the tick's row with the
maximum event time whose *marker column* (a key column) holds a value no row of the history
has. The sampled schedule has the full schedule's ticks, unchanged.

Carrier rows are real input to the stateful operator: they may be late (counted in
``dropped_by_watermark``), they hold state, they emit rows. State is per key and the carrier
keys are disjoint from the sampled ones, so with the same watermarks each batch figure of
the sampled run is the sampled keys' figure plus the carrier keys' figure. The carrier keys'
figures are the prediction of the *carrier schedule* (the carrier rows alone, same ticks,
hence the same batches and watermarks); :func:`without_carriers` subtracts them, and drops
the carrier keys' emitted rows by their marker.

Invariants: ``Sample.schedule`` and ``Sample.carriers`` have the ticks of the full schedule;
the per-tick, per-source maximum event time of both equals the full schedule's; carrier row
ids are above every row id of the history (unique, and last in their tick); sampled rows keep
their row ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from semantics.errors import SpecError
from semantics.operators.columns import floats_by_values
from semantics.report import RunResult
from semantics.schedule import ROW_ID, TICK, Schedule
from semantics.spec import (
    AggregationQuery,
    BacktestSpec,
    DeduplicationQuery,
    JoinQuery,
    SessionQuery,
)

OPTION = "--sample"  # (the field an error about sampling names)
# figures that add up over keys (a key's state and rows depend on its rows and the
# watermarks only); the watermarks and the byte estimates are left as they are
ADDITIVE = ("input_rows", "dropped_by_watermark", "state_rows", "state_rows_updated",
            "state_rows_removed")
_HASH_SPAN = float(2 ** 64)


@dataclass(frozen=True)
class Sample:
    """A sampled schedule, its carrier rows alone, and what the report says about them."""

    rate: float
    schedule: Schedule  # sampled rows + carrier rows, the full schedule's ticks
    carriers: Schedule  # the carrier rows alone, the same ticks
    marker: str  # the key column whose value marks a carrier row (as the tables spell it)
    marker_value: object
    key_columns: tuple[str, ...]  # the columns hashed
    sampled_rows: int
    carrier_rows: int
    total_rows: int

    def info(self) -> dict[str, object]:
        """JSON-safe description for the report (``RunResult.info["sample"]``)."""
        return {"rate": self.rate, "keys": list(self.key_columns),
                "sampled_rows": self.sampled_rows, "total_rows": self.total_rows,
                "carrier_rows": self.carrier_rows, "carrier_marker":
                f"{self.marker} = {self.marker_value!r}",
                "note": "figures are for the sampled keys (carrier rows removed); "
                        "watermarks are the full history's"}


def sample_keys(spec: BacktestSpec) -> tuple[str, ...]:
    """The stateful operator's key columns hashed for the sample: the grouping keys of an
    aggregation or a session, the dedup keys, the join keys — without the event-time column
    (a key column a carrier row can take a value of its own in). SpecError (naming
    ``--sample``) when none is left: a global aggregation has no key to sample by."""
    q = spec.query
    times = [spec.sources[s].event_time for s in spec.query_sources]
    keys = tuple(k for k in q.keys if not any(spec.same_column(k, t) for t in times))
    if not keys:
        why = ("a global aggregation (no group key besides the window or the event time) "
               "keeps all its state on one key" if isinstance(q, AggregationQuery) else
               "a query whose only key is the event-time column leaves carrier rows no key "
               "of their own")
        raise SpecError(spec.path, OPTION, f"a query with a key column besides the event time "
                        f"to sample by; {why}, so it cannot be sampled: replay it whole "
                        "(without --sample)")
    return keys


def key_hash(frame: pd.DataFrame, columns: tuple[str, ...]) -> np.ndarray:
    """A stable 64-bit hash of each row's key (pandas' SipHash with its fixed key: the same
    on every machine and run). Numbers hash as float64 whatever their type and width (-0.0
    as 0.0 and every NaN alike, as Spark normalizes grouping and join keys), timestamps as
    microseconds, anything else as text, so both sides of a join agree on every key."""
    cols = {}
    for i, c in enumerate(columns):
        v = frame[c]
        if pd.api.types.is_numeric_dtype(v.dtype):
            x = v.to_numpy(dtype=np.float64, na_value=np.nan) + 0.0  # (-0.0 + 0.0 is 0.0)
            cols[i] = np.where(np.isnan(x), np.nan, x)
        elif pd.api.types.is_datetime64_any_dtype(v.dtype):
            cols[i] = v.to_numpy(dtype="datetime64[us]").astype(np.int64)
        else:
            cols[i] = np.array([None if x is None or x is pd.NA or (isinstance(x, float)
                                                                    and np.isnan(x))
                                else str(x) for x in v], dtype=object)
    return pd.util.hash_pandas_object(pd.DataFrame(cols), index=False).to_numpy()


def in_sample(hashes: np.ndarray, rate: float) -> np.ndarray:
    """The rows whose key hash falls in the lowest ``rate`` of the hash range."""
    if rate >= 1.0:
        return np.ones(len(hashes), dtype=bool)
    return hashes < np.uint64(int(rate * _HASH_SPAN))


def check_rate(spec: BacktestSpec, rate: float) -> None:
    if not (0.0 < rate <= 1.0) or rate != rate:
        raise SpecError(spec.path, OPTION, f"a fraction of the keys above 0 and at most 1 "
                        f"(e.g. 0.01), got {rate!r}")


def carrier_value(spec: BacktestSpec, frames: list[pd.Series], column: str) -> object:
    """A value of ``column`` that no row of the history has (``frames``: the column of each
    source that has it): below the minimum of a number or a timestamp, a reserved text."""
    values = pd.concat(frames, ignore_index=True)
    dtype = frames[0].dtype
    if pd.api.types.is_bool_dtype(dtype):
        raise _bad_marker(spec, column, "boolean")
    if pd.api.types.is_integer_dtype(dtype):
        lows = [np.iinfo(f.dtype.numpy_dtype if hasattr(f.dtype, "numpy_dtype") else f.dtype)
                for f in frames]
        lo, hi = max(i.min for i in lows), min(i.max for i in lows)
        vmin = int(values.min()) if values.notna().any() else 0
        vmax = int(values.max()) if values.notna().any() else 0
        if vmin - 1 >= lo:
            return vmin - 1
        if vmax + 1 <= hi:
            return vmax + 1
        raise _bad_marker(spec, column, "an integer column using its whole range")
    if pd.api.types.is_float_dtype(dtype):
        finite = values[np.isfinite(values.to_numpy(dtype=np.float64, na_value=np.nan))]
        return float(finite.min()) - 1.0 if len(finite) else 0.0
    if pd.api.types.is_datetime64_any_dtype(dtype):
        vmin = values.min()
        return (vmin if not pd.isna(vmin) else pd.Timestamp(0, tz="UTC")) \
            - pd.Timedelta(microseconds=1)
    present = values.dropna()
    if len(present) and not all(isinstance(x, str) for x in present.iloc[:1000]):
        raise _bad_marker(spec, column, f"values of {type(present.iloc[0]).__name__}")
    seen = set(present)
    value, n = "~wmbt-carrier", 0
    while value in seen:
        n += 1
        value = f"~wmbt-carrier-{n}"
    return value


def _bad_marker(spec: BacktestSpec, column: str, what: str) -> SpecError:
    return SpecError(spec.path, OPTION, f"a key column of text, integers, floats or timestamps "
                     f"to mark carrier rows with; key {column!r} holds {what}")


def frame_column(frame: pd.DataFrame, name: str) -> str:
    """``name`` as the frame spells it (keys may differ in case from the table's columns)."""
    if name in frame.columns:
        return name
    for c in frame.columns:
        if isinstance(c, str) and c.lower() == name.lower():
            return c
    raise KeyError(name)


def with_carriers(rows: Sequence[pd.DataFrame], carriers: pd.DataFrame) -> pd.DataFrame:
    """A source's rows (frames of the schedule's layout, any order) and its carrier rows in
    the order a schedule holds rows: by tick, then row id (a sample, a key range's
    schedule)."""
    both = pd.concat([*rows, carriers], ignore_index=True)
    by = np.lexsort((both[ROW_ID].to_numpy(), both[TICK].to_numpy()))
    return both.take(by).reset_index(drop=True)


def draw(schedule: Schedule, spec: BacktestSpec, rate: float) -> Sample:
    """The key-hash sample of ``schedule`` at ``rate`` plus one carrier row per data tick and
    source with rows (see the module docstring)."""
    check_rate(spec, rate)
    keys = sample_keys(spec)
    sources = [s for s in spec.query_sources if s in schedule.rows]
    cols = {s: tuple(frame_column(schedule.rows[s], k) for k in keys) for s in sources}
    marker_of = {s: cols[s][0] for s in sources}
    value = carrier_value(spec, [schedule.rows[s][marker_of[s]] for s in sources], keys[0])
    next_id = 1 + max((int(df[ROW_ID].max()) for df in schedule.rows.values() if len(df)),
                      default=-1)
    sampled: dict[str, pd.DataFrame] = {}
    carriers: dict[str, pd.DataFrame] = {}
    n_sampled = n_carriers = 0
    for s in sources:
        df = schedule.rows[s]
        keep = in_sample(key_hash(df, cols[s]), rate)
        tick = df[TICK].to_numpy()
        us = schedule.event_time_us(s)  # (NaT is int64's minimum: never a tick's maximum)
        order = np.lexsort((us, tick))
        last = order[np.r_[np.flatnonzero(np.diff(tick[order]) != 0), len(order) - 1]] \
            if len(order) else order
        car = df.iloc[last].copy()
        car[marker_of[s]] = pd.Series([value] * len(car), index=car.index,
                                      dtype=df[marker_of[s]].dtype)
        car[ROW_ID] = np.arange(next_id, next_id + len(car), dtype=df[ROW_ID].dtype)
        next_id += len(car)
        car = car.reset_index(drop=True)
        carriers[s] = car
        sampled[s] = with_carriers([df[keep]], car)
        n_sampled += int(keep.sum())
        n_carriers += len(car)
    return Sample(rate=rate, schedule=replace(schedule, rows=sampled),
                  carriers=replace(schedule, rows=carriers), marker=marker_of[sources[0]],
                  marker_value=value, key_columns=keys, sampled_rows=n_sampled,
                  carrier_rows=n_carriers, total_rows=schedule.total_rows)


def carrier_outputs(spec: BacktestSpec, sample: Sample, outputs: pd.DataFrame) -> np.ndarray:
    """Which emitted rows belong to a carrier key (their marker column holds the carrier
    value; a join's row: on either side)."""
    q = spec.query
    k = sample.key_columns[0]
    if isinstance(q, JoinQuery):
        names = [f"{side}_{frame_column(sample.schedule.rows[side], k)}"
                 for side in (q.left, q.right)]
    elif isinstance(q, DeduplicationQuery):
        names = [sample.marker]
    else:
        assert isinstance(q, AggregationQuery | SessionQuery)
        names = [q.output_keys[list(q.keys).index(k)]]
    mask = np.zeros(len(outputs), dtype=bool)
    for n in names:
        if n in outputs.columns:
            mask |= (outputs[n] == sample.marker_value).fillna(False).to_numpy(dtype=bool)
    return mask


def predicted_outputs(outputs: pd.DataFrame, spec: BacktestSpec) -> pd.DataFrame:
    """A prediction's emitted rows, carrier rows dropped, typed as the prediction of the
    history without them types them (docs/semantics.md §15.2): no row left, the untyped frame
    of a run that emits nothing; an aggregation's or a session's float columns (built from
    their values, ``columns.to_series``) ``float64`` unless a NULL is left (a carrier key's
    ``sum`` of NULLs made them nullable). A deduplication's or a join's columns keep their
    type (the schedule's, with or without the carrier rows: they copy history rows)."""
    if not len(outputs):
        return pd.DataFrame(columns=outputs.columns)
    if isinstance(spec.query, AggregationQuery | SessionQuery):
        return floats_by_values(outputs)
    return outputs


def without_carriers(result: RunResult, carrier: RunResult, sample: Sample,
                     spec: BacktestSpec) -> RunResult:
    """``result`` (a run of ``sample.schedule``) for the sampled keys only: the additive
    figures of ``carrier`` (the prediction of ``sample.carriers``) subtracted batch by batch,
    the carrier keys' emitted rows dropped and ``output_rows`` counted again without them.
    ValueError when the two runs do not have the same batches (ticks, no-data batches)."""
    b, c = result.batches.reset_index(drop=True), carrier.batches.reset_index(drop=True)
    shape = ["batch_id", "tick", "has_data"]
    if len(b) != len(c) or not b[shape].astype(object).equals(c[shape].astype(object)):
        raise ValueError("the sampled run and its carrier rows' prediction ran different "
                         "batches: the carrier rows did not keep the watermarks")
    out = b.copy()
    for col in [*ADDITIVE, *(x for x in b.columns if x.startswith("input_rows_"))]:
        if col in b.columns and col in c.columns:
            diff = pd.to_numeric(b[col]) - pd.to_numeric(c[col]).fillna(0)
            out[col] = diff.astype(b[col].dtype) if not b[col].hasnans else diff
    mask = carrier_outputs(spec, sample, result.outputs)
    emitted = result.outputs[~mask].reset_index(drop=True)
    counts = emitted.groupby("batch_id").size()
    out["output_rows"] = out["batch_id"].map(counts).fillna(0).astype(np.int64)
    info = dict(result.info)
    info["sample"] = sample.info()
    late, late_c = info.get("late_rows"), carrier.info.get("late_rows")
    if isinstance(late, int) and isinstance(late_c, int):
        info["late_rows"] = late - late_c
    fields: dict[str, object] = {"batches": out, "outputs": emitted, "info": info}
    raw = getattr(result, "raw_fates", None)
    if isinstance(raw, pd.DataFrame) and len(raw):
        ids = np.concatenate([df[ROW_ID].to_numpy() for df in sample.carriers.rows.values()])
        fields["raw_fates"] = raw.loc[~raw["row_id"].isin(ids)]
    return replace(result, **fields)
