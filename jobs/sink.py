"""The replay's foreachBatch sink and reading its output back.

Every micro-batch writes its rows as parquet to ``<outputs>/batch_id=<N>/part-0.parquet``
(a temporary file renamed over it: a re-executed batch replaces its file, and a kill leaves the
old file or the new one, never half of one) with ONE action on the batch DataFrame
(``toArrow``; a second action would recompute the stateful plan). The file is written by the
Python process running the function (the driver in classic mode, the server's Python worker with
Spark Connect), so ``outputs`` must be a path on that machine.

In classic (py4j) mode it also records, for each stateful operator of the batch's executed
plan (plan pre-order = progress ``stateOperators`` order), the two watermarks Spark handed it
(``eventTimeWatermarkForLateEvents`` / ``...ForEviction``) in
``<outputs>/_watermarks/batch_id=<N>.json``, and saves the progress of the batches before this
one that are not saved yet (``jobs.progress.save``; normally batch ``N - 1``): Spark commits
batch ``N`` only after its sink returns, so every committed batch but the last has its progress
on disk (``jobs.resume``). Spark Connect has no py4j; there the watermarks file is absent (the
replay derives the values instead) and progress is saved when the query ends.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from jobs import progress

WATERMARKS_DIR = "_watermarks"
# classic foreachBatch calls running now (py4j runs them on callback-server threads)
_running = threading.Condition()
_calls = 0
# what Spark's StreamExecution.isInterruptionException looks for in a Python sink's error
_INTERRUPTIONS = ("java.lang.InterruptedException", "java.io.InterruptedIOException",
                  "java.nio.channels.ClosedByInterruptException")
# the stateful operators' trait: its package moved in Spark 4.1 (operators.stateful)
_STATE_STORE_WRITERS = ("org.apache.spark.sql.execution.streaming.StateStoreWriter",
                        "org.apache.spark.sql.execution.streaming.operators.stateful."
                        "StateStoreWriter")


def batch_dir(outputs: Path, batch_id: int) -> Path:
    return outputs / f"batch_id={batch_id}"


def _option(o: Any) -> int | None:
    return int(o.get()) if o is not None and o.isDefined() else None


def _active_query(spark: SparkSession, query_name: str) -> Any:
    """The JVM object of the active query ``query_name`` (classic mode), or None."""
    for jq in spark._jsparkSession.streams().active():  # noqa: SLF001 - py4j is the point
        if jq.name() == query_name:
            return jq
    return None


def save_progress_before(spark: SparkSession, query_name: str, batch_id: int,
                         progress_dir: Path) -> None:
    """Save the progress of the query's batches before ``batch_id`` not saved yet (called from
    inside foreachBatch: the query's last progress is the previous batch's)."""
    jq = _active_query(spark, query_name)
    if jq is None:
        return
    recent = jq.recentProgress()
    for i in reversed(range(len(recent))):  # (newest first: normally one step, two reads)
        raw = recent[i].json()
        b = int(json.loads(raw).get("batchId", -1))
        if b >= batch_id:
            continue
        if (progress_dir / f"{b}.json").exists():
            break
        progress.save(progress_dir, raw)


def operator_watermarks(spark: SparkSession, query_name: str) -> dict[str, Any] | None:
    """Late/eviction watermarks of each stateful operator of the running batch of the active
    query ``query_name`` (classic mode only; called from inside foreachBatch, when the query's
    ``lastExecution`` is the batch being written)."""
    jvm = spark._jvm  # noqa: SLF001
    writer = _first_class(jvm, _STATE_STORE_WRITERS)
    jq = _active_query(spark, query_name)
    if jq is not None:
        ex = jq.streamingQuery().lastExecution()
        if ex is None:
            return None
        ops: list[dict[str, Any]] = []
        stack = [ex.executedPlan()]
        while stack:  # pre-order, children left to right
            node = stack.pop()
            if writer.isInstance(node):
                ops.append({
                    "node": node.getClass().getSimpleName(),
                    "late": _option(node.eventTimeWatermarkForLateEvents()),
                    "eviction": _option(node.eventTimeWatermarkForEviction()),
                })
            children = node.children()
            stack.extend(children.apply(i) for i in reversed(range(children.size())))
        return {"batch_watermark_ms": int(ex.offsetSeqMetadata().batchWatermarkMs()),
                "operators": ops}
    return None


def _first_class(jvm: Any, names: tuple[str, ...]) -> Any:
    """The first of ``names`` this JVM has (a class some Spark release moved)."""
    for name in names[:-1]:
        try:
            return jvm.java.lang.Class.forName(name)
        except Exception:  # noqa: BLE001 - py4j's ClassNotFoundException
            continue
    return jvm.java.lang.Class.forName(names[-1])


def to_arrow(df: DataFrame) -> pa.Table:
    """The rows of ``df`` as one Arrow table, in one action (``toArrow`` from Spark 4.0; 3.5
    has the same collection as ``_collect_as_arrow``)."""
    if hasattr(df, "toArrow"):
        return df.toArrow()
    from pyspark.sql.pandas.types import to_arrow_schema

    batches = df._collect_as_arrow()  # noqa: SLF001 - Spark 3.5's toArrow
    schema = to_arrow_schema(df.schema)
    return pa.Table.from_batches(batches, schema) if batches else schema.empty_table()


def make_sink(outputs: Path, spark: SparkSession | None, query_name: str,
              progress_dir: Path | None = None) -> Callable[[DataFrame, int], None]:
    """The foreachBatch function. ``spark`` is the classic session to read operator watermarks
    and progress from, or None (Spark Connect: the function is pickled and runs in a
    server-side Python worker, so that variant references nothing but the standard library
    and pyarrow). ``progress_dir``: where earlier batches' progress is saved (classic)."""
    out = str(outputs)
    # classic sessions collect through ``to_arrow`` (Spark 3.5 has no ``toArrow``); the Connect
    # variant is pickled to a server-side worker, so it references no project function
    collect = to_arrow if spark is not None else None

    def write_rows(df: DataFrame, batch_id: int) -> None:
        import os as _os
        import uuid as _uuid
        from pathlib import Path as _Path

        import pyarrow.parquet as _pq

        target = _Path(out) / f"batch_id={batch_id}"
        target.mkdir(parents=True, exist_ok=True)
        tmp = target / f".part-0.parquet.{_uuid.uuid4().hex}.tmp"
        # one action (toArrow collects once); written locally, no Hadoop commit protocol
        table = df.toArrow() if collect is None else collect(df)
        _pq.write_table(table, tmp)
        _os.replace(tmp, target / "part-0.parquet")  # a re-executed batch replaces its file

    if spark is None:
        return write_rows

    wm_dir = outputs / WATERMARKS_DIR

    def write_rows_and_watermarks(df: DataFrame, batch_id: int) -> None:
        write_rows(df, batch_id)
        try:
            wms = operator_watermarks(spark, query_name)
        except Exception:  # noqa: BLE001 - never fail the batch; the replay derives them
            wms = None
        if wms is not None:
            _replace_text(wm_dir / f"batch_id={batch_id}.json", json.dumps(wms))
        if progress_dir is not None:
            # (a failure here fails the batch: a committed batch must have its progress saved)
            save_progress_before(spark, query_name, batch_id, progress_dir)

    def sink(df: DataFrame, batch_id: int) -> None:
        global _calls
        with _running:
            _calls += 1
        try:
            write_rows_and_watermarks(df, batch_id)
        except Exception as exc:  # noqa: BLE001 - re-raised, short
            raise short_error(exc, batch_id) from None
        finally:
            with _running:
                _calls -= 1
                _running.notify_all()

    return sink


def wait_idle(timeout_s: float) -> bool:
    """Wait until no classic foreachBatch call runs (at most ``timeout_s``); False on timeout.
    A query stopped mid-batch returns from ``stop`` before its cancelled Python call has
    failed and been logged by py4j: an interrupted replay waits for it while py4j's loggers
    are silenced."""
    with _running:
        return _running.wait_for(lambda: _calls == 0, timeout_s)


def short_error(exc: Exception, batch_id: int) -> RuntimeError:
    """The sink's failure as the JVM should get it: a few lines. py4j hands Spark the Python
    traceback as the error's message, and Spark tells a stopped query's interrupted batch
    from a failure by a regular expression over that message (any characters, one group a
    character, between ``Py4JJavaError: An error occurred while calling`` and an
    interruption's class name: ``StreamExecution.isInterruptionException``), which overflows
    the JVM's stack on the pages of Java trace a query stopped mid-batch puts there (a
    StackOverflowError printed on stderr, seen on Ctrl-C). An interruption keeps the words
    Spark looks for; any other failure keeps its first line."""
    text = str(exc)
    lines = text.strip().splitlines()
    first = (lines[0] if lines else type(exc).__name__)[:300]
    hit = next((name for name in _INTERRUPTIONS if name in text), None)
    if hit is not None:
        return RuntimeError(f"py4j.protocol.Py4JJavaError: An error occurred while calling the "
                            f"sink of batch {batch_id}: {hit}")
    return RuntimeError(f"the sink of batch {batch_id} failed: {type(exc).__name__}: {first}")


def _replace_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    tmp.write_text(text)
    os.replace(tmp, path)


def drop_batches(outputs: Path, first: int) -> None:
    """Remove the files of batch ``first`` and later ones (they are written again)."""
    if not outputs.is_dir():
        return
    for d in outputs.glob("batch_id=*"):
        if int(d.name.removeprefix("batch_id=")) >= first:
            shutil.rmtree(d)
    for f in (outputs / WATERMARKS_DIR).glob("batch_id=*.json"):
        if int(f.name.removeprefix("batch_id=").removesuffix(".json")) >= first:
            f.unlink()


def read_watermarks(outputs: Path, batch_id: int) -> dict[str, Any] | None:
    p = outputs / WATERMARKS_DIR / f"batch_id={batch_id}.json"
    return json.loads(p.read_text()) if p.exists() else None


def read_outputs(outputs: Path, batch_ids: list[int], columns: list[str]) -> pd.DataFrame:
    """``batch_id`` + ``columns`` for the given batches, in batch order then file order.

    Timestamps come back as ``datetime64[us, UTC]``; integer columns holding nulls (outer
    joins) as nullable ``Int64``; float columns holding nulls as nullable ``Float64`` (or
    ``Float32``), whose data keeps a NaN apart from a NULL (``operators.columns``).
    """
    tables: list[pa.Table] = []
    for b in batch_ids:
        d = batch_dir(outputs, b)
        files = sorted(p for p in d.glob("*.parquet") if not p.name.startswith(("_", ".")))
        for t in (pq.read_table(p) for p in files):
            if t.num_rows:
                tables.append(t.append_column("batch_id", pa.array(np.full(t.num_rows, b))))
    if not tables:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in ["batch_id", *columns]})
    # one table, converted once: frames of batches with and without a NULL would concatenate
    # a nullable float column with a numpy one, which turns the NaN into NULL
    df = spark_rows_frame(pa.concat_tables(tables, promote_options="default"))
    return df[["batch_id", *columns]]


_FLOATS = {pa.float32(): pd.Float32Dtype(), pa.float64(): pd.Float64Dtype()}


def spark_rows_frame(t: pa.Table) -> pd.DataFrame:
    """Rows Spark collected (``toArrow``) as the replay's frames hold them: integers as int64
    (nullable ``Int64`` with NULLs), timestamps as UTC µs, a float column with NULLs nullable
    (its NaN kept apart from NULL). The emitted rows read back, and the pyspark planner's rows
    evaluated by Spark (``jobs.pyspark_query``), both go through it."""
    df = t.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int64Dtype(),
                                   pa.int16(): pd.Int64Dtype(), pa.int8(): pd.Int64Dtype()}.get)
    for f, col in zip(t.schema, t.columns, strict=True):
        if pa.types.is_timestamp(f.type):
            c = df[f.name]
            if getattr(c.dt, "tz", None) is None:
                c = c.dt.tz_localize("UTC")
            df[f.name] = c.astype("datetime64[us, UTC]")
        elif pa.types.is_integer(f.type) and not col.null_count:
            df[f.name] = df[f.name].astype("int64")
        elif f.type in _FLOATS and col.null_count:
            df[f.name] = col.to_pandas(types_mapper=_FLOATS.get)
    return df
