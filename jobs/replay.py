"""Replay one candidate of a backtest in real Spark and report what Spark did (the "actual").

Feeding (see ``jobs.feed``): one parquet file per DATA tick, read by ONE file stream source with
``maxFilesPerTrigger=1``, so each data tick is exactly one micro-batch for every source at once.

* pace ``backlog``: all files are written up front and the query runs with
  ``Trigger.AvailableNow``; Spark runs the data batches back to back and, if its rule says so,
  one trailing no-data batch.
* pace ``live``: the query runs with the default trigger; for each data tick its file is added
  and ``processAllAvailable()`` waits until Spark has run the data batch and, if its rule says
  so, one no-data batch (= the idle tick after it).

The sink (``jobs.sink``) writes each batch's rows to ``<workdir>/<candidate>/outputs`` and saves
each batch's progress event to ``<workdir>/<candidate>/progress``. After the run, the checkpoint
tells which batches ran on which file (``jobs.checkpoint``), Spark's input is verified against
the schedule (``jobs.verify``) and the report is built from the saved progress events.

An interrupted replay (Ctrl-C, SIGTERM, SIGKILL) resumes from its checkpoint when run again
with the same spec, data and settings, and reports exactly what an uninterrupted run does
(``jobs.resume`` says how); Ctrl-C and SIGTERM stop the query cleanly (``jobs.interrupts``).

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

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark.sql import SparkSession

from jobs import checkpoint as ckpt
from jobs import feed, progress, resume, sink
from jobs.interrupts import Interrupts
from jobs.pyspark_late import replay_late_rows
from jobs.query import build_query
from jobs.spark import is_connect
from jobs.verify import BatchTick, assign_ticks
from semantics import restarts
from semantics.errors import ReplayMismatch, SpecError
from semantics.late_rows import late_rows_under
from semantics.report import RunResult, output_columns, report_columns
from semantics.schedule import Schedule
from semantics.spark_conf import ALLOW_MULTIPLE, NO_DATA_BATCHES, spark_bool
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
           spark: SparkSession, *, fresh: bool = False,
           notify: Callable[[str], None] = lambda _m: None) -> RunResult:
    """Run ``candidate`` of ``spec`` over ``schedule`` in Spark; see the module docstring.

    Works in ``workdir/<candidate>``: a replay interrupted there (Ctrl-C, SIGTERM, SIGKILL)
    with the same spec, data and settings is resumed from its checkpoint, anything else is
    wiped first (``fresh``: always), so a replay is idempotent and its report is the one an
    uninterrupted run makes (``jobs.resume``); ``notify`` gets one line saying it resumes, or
    why an interrupted replay starts afresh. Ctrl-C / SIGTERM stop the query cleanly and raise
    KeyboardInterrupt. Raises :class:`ReplayMismatch` when Spark's batches do not match the
    schedule, WmbtError while another process replays the candidate in ``workdir``.
    """
    cdir = Path(workdir) / candidate
    with resume.exclusive(cdir):
        return _replay(spec, candidate, schedule, cdir, spark, fresh, notify)


def _replay(spec: BacktestSpec, candidate: str, schedule: Schedule, cdir: Path,
            spark: SparkSession, fresh: bool, notify: Callable[[str], None]) -> RunResult:
    connect = is_connect(spark)
    conf = {**REPLAY_CONF, **spec.conf(candidate)}
    fp = resume.fingerprint(spec, candidate, schedule, conf)
    start = resume.prepare(cdir, fp, exact=_watermarked_inputs(spec, candidate) <= 1,
                           fresh=fresh, restarts=bool(schedule.restarts))
    if start.reason is not None:
        notify(f"starting afresh: {start.reason}")
    if start.rerun is not None:
        notify(f"resuming the interrupted replay from its checkpoint (batch {start.rerun} "
               "runs again)")
    input_dir, staging, cp, outputs, saved = (cdir / "input", cdir / "staging",
                                              cdir / "checkpoint", cdir / "outputs",
                                              cdir / "progress")
    for d in (input_dir, staging, outputs):
        d.mkdir(parents=True, exist_ok=True)
    arrow_schema = feed.input_arrow_schema(spec, schedule)
    runs = _runs(spec, candidate, schedule)
    query_name = f"wmbt_{spec.name}_{candidate}_{uuid.uuid4().hex[:8]}".replace("-", "_")
    started = time.monotonic()
    queries: list[Any] = []  # (the runs' queries: the last one may be running)
    done = _files_written(schedule, input_dir)
    try:
        conf_saved = _apply_conf(spark, conf, spec.path)
    except Exception:
        resume.write_manifest(cdir, fp, "failed")
        raise
    saved_confs = [conf_saved]
    try:
        with Interrupts() as interrupts:
            for i, (run_spec, ticks) in enumerate(runs):
                if i:  # a restart from the checkpoint (docs/semantics.md §2.7)
                    notify(f"restarting the query from its checkpoint after tick "
                           f"{schedule.restarts[i - 1]}")
                saved_confs.append(_apply_conf(spark, _run_conf(run_spec, candidate, schedule,
                                                                i, len(runs)), spec.path))
                if not ticks and i:
                    continue  # (a restart after the last data tick: nothing to run)
                query = _run(run_spec, candidate, schedule, ticks, done, cdir, arrow_schema,
                             query_name, spark, connect, interrupts, queries)
                _stop(query)
                exc = query.exception()
                if exc is not None:
                    raise RuntimeError(f"Spark query failed: {exc}")
                for text in progress.progress_texts(query):
                    progress.save(saved, text)
                interrupts.check()  # (a signal during the stop: the folder stays resumable)
    except KeyboardInterrupt as stop:
        _stop_quietly(spark, queries[-1] if queries else None)
        # the same kind (Ctrl-C or SIGTERM: exits.Terminated), without the wait's traceback
        raise type(stop)() from None
    except Exception:
        resume.write_manifest(cdir, fp, "failed")
        _stop(queries[-1] if queries else None)
        raise
    finally:
        for prev in reversed(saved_confs):
            _restore_conf(spark, prev)
    elapsed = time.monotonic() - started
    try:
        result = _result(spec, candidate, schedule, cp, outputs, progress.load_saved(saved),
                         connect, conf, elapsed, spark)
    except Exception:  # (a mismatch: running it again gives the same)
        resume.write_manifest(cdir, fp, "failed")
        raise
    resume.write_manifest(cdir, fp, "complete")
    return result


def _runs(spec: BacktestSpec, candidate: str, schedule: Schedule
          ) -> list[tuple[BacktestSpec, list[tuple[int, int]]]]:
    """The query's runs between restarts: the spec each starts with (the candidate's
    ``after_restart`` as written from the first restart on: Spark itself keeps the settings
    the checkpoint holds) and its data ticks as ``(position, tick)``, the position in the
    schedule's data ticks."""
    data = list(enumerate(schedule.data_ticks))
    switched = restarts.requested(spec, candidate)
    return [(spec if i == 0 else switched, [(p, t) for p, t in data if a <= t < b])
            for i, (a, b) in enumerate(schedule.runs())]


def _run_conf(spec: BacktestSpec, candidate: str, schedule: Schedule, i: int, n: int
              ) -> dict[str, str]:
    """The settings of run ``i`` of ``n``. A run that a restart ends after a data tick runs no
    no-data batch (at ``backlog`` pace the next data tick follows at once without a restart;
    ``availableNow`` would end the run with one); after the final idle tick it may."""
    conf = {**REPLAY_CONF, **spec.conf(candidate)}
    if n > 1:
        ends_on_data = i < n - 1 and not schedule.ticks[schedule.restarts[i]].idle
        conf[NO_DATA_BATCHES] = ("false" if ends_on_data
                                 else conf.get(NO_DATA_BATCHES, "true"))
    return conf


def _run(spec: BacktestSpec, candidate: str, schedule: Schedule, ticks: list[tuple[int, int]],
         done: int, cdir: Path, arrow_schema: pa.Schema, query_name: str, spark: SparkSession,
         connect: bool, interrupts: Interrupts, started: list[Any]
         ) -> Any:
    """Start the query on the checkpoint in ``cdir``, feed it ``ticks`` (those from position
    ``done`` on: a resumed replay wrote the others) at the schedule's pace and return it once
    it has processed them."""
    input_dir, staging = cdir / "input", cdir / "staging"
    todo = [(p, t) for p, t in ticks if p >= done]
    if schedule.pace == "backlog":
        for pos, t in todo:
            interrupts.check()
            feed.write_tick(spec, schedule, t, pos, input_dir, staging, arrow_schema)
    stream = (spark.readStream.schema(feed.input_spark_schema(spec, schedule))
              .option("maxFilesPerTrigger", 1)
              .option("maxFileAge", "36500d")
              .parquet(str(input_dir)))
    built = build_query(spec, candidate, stream, schedule.data_columns)
    writer = (built.df.writeStream.queryName(query_name)
              .outputMode(built.output_mode)
              .foreachBatch(sink.make_sink(cdir / "outputs", None if connect else spark,
                                           query_name, cdir / "progress"))
              .option("checkpointLocation", str(cdir / "checkpoint")))
    interrupts.check()
    if schedule.pace == "backlog":
        query = writer.trigger(availableNow=True).start()
        started.append(query)
        interrupts.wait(query.awaitTermination)
        return query
    query = writer.start()
    started.append(query)
    if done:  # (a resumed replay: Spark first catches up on the files written)
        interrupts.wait(query.processAllAvailable)
    for pos, t in todo:
        interrupts.check()
        feed.write_tick(spec, schedule, t, pos, input_dir, staging, arrow_schema)
        interrupts.wait(query.processAllAvailable)
    return query


def _watermarked_inputs(spec: BacktestSpec, candidate: str) -> int:
    """How many of the query's inputs get a watermark (``jobs.query.source_frames``)."""
    wm = spec.candidates[candidate].watermark
    return sum(s in wm for s in spec.query_sources)


def _files_written(schedule: Schedule, input_dir: Path) -> int:
    """How many data ticks already have their input file (a resumed replay's; files are
    written in tick order)."""
    for pos, t in enumerate(schedule.data_ticks):
        if not (input_dir / feed.file_name(t)).exists():
            return pos
    return len(schedule.data_ticks)


def _stop(query: Any) -> None:
    if query is not None and query.isActive:
        query.stop()


def _stop_quietly(spark: SparkSession, query: Any) -> None:
    """Stop an interrupted query without the error logs its cancelled batch makes (Spark's
    loggers and py4j's are silenced meanwhile); a second Ctrl-C is ignored meanwhile."""
    import logging
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    prev_int = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    # (each py4j logger by name: ``disabled`` is not inherited, and the callback server
    # logs a cancelled foreachBatch call on ``py4j.clientserver``)
    py4j = [logging.getLogger(n) for n in ("py4j", "py4j.clientserver", "py4j.java_gateway")]
    was_disabled = [lg.disabled for lg in py4j]
    for lg in py4j:
        lg.disabled = True
    root = None if is_connect(spark) else \
        spark._jvm.org.apache.logging.log4j.LogManager.getRootLogger()  # noqa: SLF001
    level = None if root is None else root.getLevel().toString()
    try:
        if level is not None:
            spark.sparkContext.setLogLevel("OFF")
        _stop(query)
        if not is_connect(spark):
            sink.wait_idle(30.0)
    except Exception:  # noqa: BLE001 - interrupted anyway; the work folder stays resumable
        pass
    finally:
        if level is not None:
            spark.sparkContext.setLogLevel(level)
        for lg, was in zip(py4j, was_disabled, strict=True):
            lg.disabled = was
        if main:
            signal.signal(signal.SIGINT, prev_int)


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
            elapsed: float, spark: SparkSession | None = None) -> RunResult:
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
                                   int(out_counts.get(bt.batch_id, 0)), disk[bt.batch_id], i))
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
        "spark_version": _spark_version(),  # the pyspark that replayed (jobs.spark_envs)
        "spark_conf": conf,
        "progress": [per_batch[b] for b in batch_ids],
        # the input rows late under Spark's own late watermarks (Spark counts groups for
        # windows, local sessions for sessions: semantics.late_rows)
        # (a pyspark query's: on the rows at its first operator, jobs.pyspark_late)
        "late_rows": late_rows_under(schedule, spec, candidate, batches)
        if spec._pyspark is None else None if connect or spark is None else
        replay_late_rows(spec, candidate, schedule, batches, spark),
        **restarts.describe(spec, candidate, schedule, batches),
    }
    return RunResult(candidate, batches, out, info)


def _spark_version() -> str:
    import pyspark

    return pyspark.__version__


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
            checkpoint_bytes: int, index: int = 0) -> dict[str, Any]:
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
        "operator_index": index,
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
