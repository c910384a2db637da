"""Replay one candidate of a backtest in real Spark and report what Spark did (the "actual").

Feeding (see ``jobs.feed``): one parquet file per DATA tick, read by ONE file stream source with
``maxFilesPerTrigger=1``, so each data tick is exactly one micro-batch for every source at once.

* pace ``backlog``: all files are written up front and the query runs with
  ``Trigger.AvailableNow``; Spark runs the data batches back to back and, if its rule says so,
  one trailing no-data batch.
* pace ``live``: the query runs with the default trigger; for each data tick its file is added
  and ``processAllAvailable()`` waits until Spark has run the data batch and, if its rule says
  so, one no-data batch (= the idle tick after it).

The sink (``jobs.sink``) writes each batch's rows to ``<workdir>/<candidate>/outputs``. After the
run, the checkpoint tells which batches ran on which file (``jobs.checkpoint``), Spark's input is
verified against the schedule (``jobs.verify``) and the report is built from the progress events.

Report conventions (SPEC.md §3): one row per executed batch and stateful operator (Spark's
``stateOperators`` order); ``input_rows`` = progress ``numInputRows``; ``output_rows`` = rows the
sink got; ``state_bytes`` = ``memoryUsedBytes``; ``checkpoint_bytes`` see
:func:`jobs.checkpoint.state_bytes_by_batch`. ``late_watermark_ms`` / ``eviction_watermark_ms``
are read from the executed plan (classic mode); with Spark Connect they are derived (late = the
previous batch's watermark, 0 for the first; eviction = this batch's; both this batch's with
``statefulOperator.allowMultiple=false``) and ``info["operator_watermarks"]`` says which
(``plan`` / ``derived`` / ``mixed``, ``none`` without a watermark).
Without any watermark in the query, ``watermark_ms`` and both operator watermarks are None
(Spark's plan carries Some(0) there, but no late/eviction predicate exists).
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession

from jobs import checkpoint as ckpt
from jobs import feed, progress, sink
from jobs.query import build_query
from jobs.spark import is_connect
from jobs.verify import BatchTick, assign_ticks
from semantics.errors import ReplayMismatch, SpecError
from semantics.late_rows import late_rows_under
from semantics.report import RunResult, output_columns, report_columns
from semantics.schedule import Schedule
from semantics.spark_conf import ALLOW_MULTIPLE, spark_bool
from semantics.spec import BacktestSpec

# Settings the replay itself needs (no semantic effect); restored after the run.
REPLAY_CONF = {
    "spark.sql.streaming.minBatchesToRetain": "1000000",  # keep every offset/commit/state file
    "spark.sql.streaming.fileSource.log.compactInterval": "1000000",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.filterPushdown": "true",  # per-source row groups are skipped (jobs.feed)
}


def replay(spec: BacktestSpec, candidate: str, schedule: Schedule, workdir: Path,
           spark: SparkSession) -> RunResult:
    """Run ``candidate`` of ``spec`` over ``schedule`` in Spark; see the module docstring.

    ``workdir/<candidate>`` is wiped first, so a replay is idempotent and every candidate gets a
    fresh checkpoint. Raises :class:`ReplayMismatch` when Spark's batches do not match the
    schedule.
    """
    cdir = Path(workdir) / candidate
    if cdir.exists():
        shutil.rmtree(cdir)
    input_dir, staging, cp, outputs = (cdir / "input", cdir / "staging", cdir / "checkpoint",
                                       cdir / "outputs")
    for d in (input_dir, staging, outputs):
        d.mkdir(parents=True)
    connect = is_connect(spark)
    arrow_schema = feed.input_arrow_schema(spec, schedule)
    conf = {**REPLAY_CONF, **spec.conf(candidate)}
    saved = _apply_conf(spark, conf, spec.path)
    query_name = f"wmbt_{spec.name}_{candidate}_{uuid.uuid4().hex[:8]}".replace("-", "_")
    started = time.monotonic()
    try:
        if schedule.pace == "backlog":
            for pos, t in enumerate(schedule.data_ticks):
                feed.write_tick(spec, schedule, t, pos, input_dir, staging, arrow_schema)
        stream = (spark.readStream.schema(feed.input_spark_schema(spec, schedule))
                  .option("maxFilesPerTrigger", 1)
                  .option("maxFileAge", "36500d")
                  .parquet(str(input_dir)))
        built = build_query(spec, candidate, stream, schedule.data_columns)
        writer = (built.df.writeStream.queryName(query_name)
                  .outputMode(built.output_mode)
                  .foreachBatch(sink.make_sink(outputs, None if connect else spark, query_name))
                  .option("checkpointLocation", str(cp)))
        if schedule.pace == "backlog":
            query = writer.trigger(availableNow=True).start()
            try:
                query.awaitTermination()
            finally:
                _stop(query)
        else:
            query = writer.start()
            try:
                for pos, t in enumerate(schedule.data_ticks):
                    feed.write_tick(spec, schedule, t, pos, input_dir, staging, arrow_schema)
                    query.processAllAvailable()
            finally:
                _stop(query)
        exc = query.exception()
        if exc is not None:
            raise RuntimeError(f"Spark query failed: {exc}")
        raw = progress.progress_dicts(query)
    finally:
        _restore_conf(spark, saved)
    elapsed = time.monotonic() - started
    return _result(spec, candidate, schedule, cp, outputs, raw, connect, conf, elapsed)


def _stop(query: Any) -> None:
    if query.isActive:
        query.stop()


def _apply_conf(spark: SparkSession, conf: dict[str, str], spec_path: str = "<memory>"
                ) -> dict[str, str | None]:
    """Set ``conf`` on the session; returns the previous values of the keys that were set.

    A key Spark refuses to change at runtime (a static setting such as ``spark.executor.*``;
    every semantic ``spark.sql.streaming.*`` setting is a runtime one) raises a SpecError
    naming it, after restoring what was already set."""
    saved: dict[str, str | None] = {}
    for k, v in conf.items():
        prev = spark.conf.get(k, None)
        try:
            spark.conf.set(k, v)
        except Exception as exc:  # noqa: BLE001 - pyspark raises different classes per mode
            _restore_conf(spark, saved)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SpecError(spec_path, f"spark_conf.{k}",
                            "a Spark setting that can change on a running session (static "
                            f"settings go to jobs.spark.get_spark); Spark said: {first}"
                            ) from None
        saved[k] = prev
    return saved


def _restore_conf(spark: SparkSession, saved: dict[str, str | None]) -> None:
    for k, v in saved.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


def _result(spec: BacktestSpec, candidate: str, schedule: Schedule, cp: Path, outputs: Path,
            raw: list[dict[str, Any]], connect: bool, conf: dict[str, str],
            elapsed: float) -> RunResult:
    executed = ckpt.executed_batches(cp)
    batch_ids = [b.batch_id for b in executed]
    per_batch = progress.by_batch(raw, set(batch_ids))
    ticks = assign_ticks(schedule, spec.query_sources, executed, per_batch)
    for b in executed:
        wm = progress.watermark_ms(per_batch[b.batch_id])
        if wm is not None and wm != b.watermark_ms:
            raise ReplayMismatch(f"batch {b.batch_id}: progress watermark {wm} differs from the "
                                 f"offset log's batchWatermarkMs {b.watermark_ms}")
    cols = output_columns(spec, dict(schedule.data_columns))
    out = sink.read_outputs(outputs, batch_ids, cols)
    out_counts = out.groupby("batch_id").size().to_dict() if len(out) else {}
    disk = ckpt.state_bytes_by_batch(cp, batch_ids)
    allow_multiple = spark_bool(conf.get(ALLOW_MULTIPLE, True), ALLOW_MULTIPLE, spec.path)
    measured = 0
    records: list[dict[str, Any]] = []
    prev_wm: int | None = None
    for bt in ticks:
        p = per_batch[bt.batch_id]
        wm = progress.watermark_ms(p)
        plan_wms = None if connect else sink.read_watermarks(outputs, bt.batch_id)
        ops = p.get("stateOperators") or [{}]
        for i, op in enumerate(ops):
            late, evict = _derived(wm, prev_wm, allow_multiple)
            # Without any watermark in the query Spark still hands every stateful operator
            # Some(0) for both values (unused: no late/eviction predicate exists); the report
            # says None, like watermark_ms (progress has no eventTime) and the predictor.
            if wm is not None and plan_wms is not None and i < len(plan_wms["operators"]):
                late = plan_wms["operators"][i]["late"]
                evict = plan_wms["operators"][i]["eviction"]
                measured += 1
            records.append(_record(spec, bt, wm, op, late, evict,
                                   int(out_counts.get(bt.batch_id, 0)), disk[bt.batch_id]))
        prev_wm = wm
    batches = pd.DataFrame.from_records(records, columns=report_columns(spec))
    n_wm = sum(r["watermark_ms"] is not None for r in records)
    how = ("none" if n_wm == 0 else "plan" if measured == n_wm else
           "derived" if measured == 0 else "mixed")
    info: dict[str, Any] = {
        "elapsed_s": round(elapsed, 3),
        "checkpoint": str(cp),
        "outputs_dir": str(outputs),
        "pace": schedule.pace,
        "operator_watermarks": how,
        "spark_conf": conf,
        "progress": [per_batch[b] for b in batch_ids],
        # the input rows late under Spark's own late watermarks (Spark counts groups for
        # windows, local sessions for sessions: semantics.late_rows)
        "late_rows": late_rows_under(schedule, spec, candidate, batches),
    }
    return RunResult(candidate, batches, out, info)


def _derived(wm: int | None, prev: int | None, allow_multiple: bool
             ) -> tuple[int | None, int | None]:
    """Late/eviction watermarks from the batch watermarks (single stateful operator)."""
    if wm is None:
        return None, None
    if not allow_multiple:
        return wm, wm
    return (prev if prev is not None else 0), wm


def _record(spec: BacktestSpec, bt: BatchTick, wm: int | None, op: dict[str, Any],
            late: int | None, evict: int | None, output_rows: int,
            checkpoint_bytes: int) -> dict[str, Any]:
    def metric(key: str) -> int | None:
        v = op.get(key)
        return None if v is None else int(v)

    return {
        "batch_id": bt.batch_id,
        "tick": bt.tick,
        "has_data": bt.has_data,
        "input_rows": bt.input_rows,
        **{f"input_rows_{s}": n for s, n in bt.input_rows_by_source.items()},
        "watermark_ms": wm,
        "operator": op.get("operatorName"),
        "late_watermark_ms": late,
        "eviction_watermark_ms": evict,
        "dropped_by_watermark": metric("numRowsDroppedByWatermark"),
        "state_rows": metric("numRowsTotal"),
        "state_rows_updated": metric("numRowsUpdated"),
        "state_rows_removed": metric("numRowsRemoved"),
        "output_rows": output_rows,
        "state_bytes": metric("memoryUsedBytes"),
        "checkpoint_bytes": checkpoint_bytes,
    }
