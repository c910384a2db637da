"""``wmbt predict --master spark://… | sc://…``: the prediction run per key range on Spark's
executors and combined on the driver (``semantics.key_ranges``, docs/semantics.md §15).

The driver plans the schedule, draws the carrier rows and predicts them (small: one row per
data tick and source), and cuts the rows into pieces by key range. Spark moves the pieces
(each a pickled frame of at most ``PIECE_ROWS`` rows, in an Arrow batch) to the executors,
``groupBy(range).applyInPandas`` hands each range's pieces to one Python task, which runs the
pure predictor on them (``semantics.key_ranges.predict_range``) and returns its report and
emitted rows, pickled. Frames travel pickled rather than as Spark columns so that every
column keeps its pandas type (timestamps with their zone, nullable integers, decimals): the
answer is the single-machine prediction's, not one through Spark's type mapping.

A task holds one range's rows, its carrier rows and its state: memory per task is bounded by
the range, not the history. :func:`predict_on_cluster` is given a planned schedule (the driver
read the history); :func:`predict_files_on_cluster` reads none of it on the driver
(``semantics.file_ranges``, docs/semantics.md §15.1): executors read each data file twice,
once for its facts (a small aggregation the driver plans the ticks and carrier rows from),
once for its rows, which go to their key ranges' tasks through Spark's shuffle; the driver
then reads the few rows the byte estimates read (``file_ranges.with_byte_estimates``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from semantics.file_ranges import (
    FilePlan,
    file_facts,
    file_pieces,
    guarded,
    list_files,
    plan_files,
    unguarded,
    with_byte_estimates,
)
from semantics.history import TableFiles
from semantics.key_ranges import Split, predict_in_ranges, predict_range
from semantics.predict import Prediction
from semantics.report import RunResult
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

PIECE_ROWS = 1 << 16  # rows of one pickled piece (a Spark row: well under any message cap)
_PACKAGE = Path(__file__).resolve().parent.parent / "semantics"
_SHIPPED = "wmbt_semantics.zip"


def ranges_for(spark: SparkSession, rows: int) -> int:
    """How many key ranges: two per executor core (``spark.default.parallelism`` of the
    session, at least 2), more where a range would pass ``RANGE_ROWS`` rows."""
    from semantics.tuning import RANGE_ROWS

    try:
        cores = int(spark.conf.get("spark.default.parallelism", "2") or 2)
    except Exception:  # noqa: BLE001 - a Connect session may not expose it
        cores = 2
    return max(2 * cores, -(-rows // RANGE_ROWS), 2)


def ship_code(spark: SparkSession) -> None:
    """Make ``semantics`` importable on the executors (a zip of the package added to the
    session: ``addPyFile``, or ``addArtifacts`` under Spark Connect). Once per session."""
    from jobs.spark import is_connect

    if getattr(spark, "_wmbt_shipped", False):
        return
    target = Path(spark.conf.get("spark.local.dir", "/tmp") if not is_connect(spark)
                  else "/tmp") / f"wmbt-{os.getpid()}-{id(spark)}" / _SHIPPED
    target.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(_PACKAGE.rglob("*.py")):
            z.write(f, f.relative_to(_PACKAGE.parent).as_posix())
    target.write_bytes(buf.getvalue())
    if is_connect(spark):
        spark.addArtifacts(str(target), pyfile=True)
    else:
        spark.sparkContext.addPyFile(str(target))
    spark._wmbt_shipped = True  # type: ignore[attr-defined]


def run_on_spark(spark: SparkSession, split_: Split,
                 by_range: dict[int, dict[str, list[pd.DataFrame]]], spec: BacktestSpec,
                 candidate: str) -> list[RunResult]:
    """Every range's prediction, run on Spark's executors (one task per range)."""
    ship_code(spark)
    table = pd.DataFrame(
        [(r, pickle.dumps((s, df), protocol=5))
         for r, sources in sorted(by_range.items()) for s, dfs in sources.items() for df in dfs],
        columns=["range", "piece"])
    if not len(table):
        return []

    def one_range(frame: pd.DataFrame) -> pd.DataFrame:
        rows: dict[str, list[pd.DataFrame]] = {}
        for blob in frame["piece"]:
            s, df = pickle.loads(blob)
            rows.setdefault(s, []).append(df)
        part = predict_range(split_, rows, spec, candidate)
        blob = pickle.dumps((part.batches, part.outputs, part.info, part.byte_facts),
                            protocol=5)
        return pd.DataFrame({"range": [int(frame["range"].iloc[0])], "part": [blob]})

    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    df = spark.createDataFrame(table, schema="range int, piece binary")
    got = (df.repartition(split_.count, "range").groupBy("range")
           .applyInPandas(one_range, schema="range int, part binary").collect())
    return _parts(got, candidate)


def _parts(got: list[Row], candidate: str) -> list[RunResult]:
    """The ranges' predictions the tasks pickled (report, emitted rows, info, byte facts),
    in range order."""
    parts: list[RunResult] = []
    for row in sorted(got, key=lambda r: r["range"]):
        batches, outputs, info, facts = pickle.loads(row["part"])
        parts.append(Prediction(candidate, batches, outputs, info, byte_facts=facts))
    return parts


def predict_on_cluster(schedule: Schedule, spec: BacktestSpec, candidate: str,
                       spark: SparkSession, *, ranges: int | None = None) -> Prediction:
    """``schedule`` predicted for ``candidate`` in key ranges on ``spark``'s executors: the
    single-machine prediction's batches, emitted rows and byte estimates (without fates;
    ``semantics.key_ranges.finish``)."""
    count = ranges or ranges_for(spark, schedule.total_rows)
    out = predict_in_ranges(schedule, spec, candidate, count, rows_per_piece=PIECE_ROWS,
                            run=lambda sp, by: run_on_spark(spark, sp, by, spec, candidate))
    out.info["master"] = spark.conf.get("spark.master", None) if not _connect(spark) \
        else "spark connect"
    return out


def _files_frame(spark: SparkSession, files: dict[str, TableFiles], which: Callable[[str, int],
                 bool]) -> DataFrame:
    """One Spark row per data file (``source``, ``add_index``), spread over the cores."""
    rows = [(s, i) for s, f in files.items() for i in range(len(f.path)) if which(s, i)]
    table = pd.DataFrame(rows, columns=["source", "file"])
    parts = max(1, min(len(rows), 4 * _cores(spark)))
    return spark.createDataFrame(table, schema="source string, file int").repartition(parts)


def _cores(spark: SparkSession) -> int:
    try:
        return int(spark.conf.get("spark.default.parallelism", "2") or 2)
    except Exception:  # noqa: BLE001 - a Connect session may not expose it
        return 2


def predict_files_on_cluster(spec: BacktestSpec, candidate: str, spark: SparkSession, *,
                             ranges: int | None = None, rows_per_piece: int = PIECE_ROWS
                             ) -> tuple[Prediction, FilePlan]:
    """``candidate`` predicted in key ranges on ``spark``'s executors, the Delta files read
    there (module docstring): the single-machine prediction's batches and emitted rows, byte
    estimates included. Also the plan (its
    ``schedule``: the carrier rows on the full ticks)."""
    from semantics.key_ranges import check_splittable, combine

    check_splittable(spec)
    ship_code(spark)
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    # (a batch of pickled pieces under Arrow's 2 GB binary column)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "16")
    files = list_files(spec)

    def facts(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for b in batches:
            yield pd.DataFrame({"blob": [guarded(lambda s=s, i=i: file_facts(spec, files[s], i))
                                         for s, i in zip(b["source"], b["file"], strict=True)]})

    got = _files_frame(spark, files, lambda _s, _i: True).mapInPandas(
        facts, schema="blob binary").collect()
    found = [unguarded(r["blob"]) for r in got]
    rows = sum(f.rows for f in found)  # type: ignore[attr-defined]
    count = ranges or ranges_for(spark, rows)
    fplan = plan_files(spec, candidate, files, found, count)  # type: ignore[arg-type]
    split_ = fplan.split

    def cut_files(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for b in batches:
            for s, i in zip(b["source"], b["file"], strict=True):
                for r, df in file_pieces(spec, files[s], fplan, int(i), rows_per_piece):
                    yield pd.DataFrame({"range": [r], "piece": [
                        pickle.dumps((s, df), protocol=5)]})

    def one_range(frame: pd.DataFrame) -> pd.DataFrame:
        import resource

        r = int(frame["range"].iloc[0])
        by: dict[str, list[pd.DataFrame]] = {}
        for blob in frame["piece"]:
            s, df = pickle.loads(blob)
            by.setdefault(s, []).append(df)
        del frame
        part = predict_range(split_, by, spec, candidate)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        blob = pickle.dumps((part.batches, part.outputs, {**part.info, "peak_rss": peak},
                             part.byte_facts), protocol=5)
        return pd.DataFrame({"range": [r], "part": [blob]})

    pieces = _files_frame(spark, files, lambda s, i: bool(fplan.rows[s][i])).mapInPandas(
        cut_files, schema="range int, piece binary")
    done = (pieces.repartition(count, "range").groupBy("range")
            .applyInPandas(one_range, schema="range int, part binary").collect())
    parts = _parts(done, candidate)
    peaks = [int(p.info.pop("peak_rss", 0)) for p in parts]
    out = with_byte_estimates(combine(parts, split_, spec, candidate), spec, candidate, files,
                              fplan, found)  # type: ignore[arg-type]
    out.info["master"] = spark.conf.get("spark.master", None) if not _connect(spark) \
        else "spark connect"
    out.info["key_ranges"]["read_by"] = "executors"
    out.info["key_ranges"]["task_peak_rss_bytes"] = max(peaks, default=0)
    return out, fplan


def plan_run_id(spec: BacktestSpec, candidate: str, fplan: FilePlan) -> str:
    """``jobs.results.run_id`` of the schedule ``fplan`` stands for, without it: the row ids
    and ticks of every row, source by source in (tick, row id) order, made file by file."""
    h = hashlib.sha256()
    h.update(spec.model_dump_json(exclude={"path", "sweep"}, exclude_defaults=True).encode())
    h.update(candidate.encode())
    sched = fplan.schedule
    summary = {"ticks": len(sched.ticks), "data_ticks": len(sched.data_ticks),
               "rows": {s: int(n.sum()) for s, n in fplan.rows.items()}, "pace": sched.pace}
    h.update(json.dumps(summary, sort_keys=True).encode())
    for s, n in fplan.rows.items():
        h.update(s.encode())
        first, tick = fplan.first_id[s], fplan.tick[s]
        for i in np.lexsort((first, tick)):
            if n[i]:
                ids = np.arange(first[i], first[i] + n[i], dtype=np.int64)
                frame = pd.DataFrame({"row_id": ids, "tick": np.full(n[i], tick[i])})
                h.update(pd.util.hash_pandas_object(frame, index=False).values.tobytes())
    return h.hexdigest()[:16]


def _connect(spark: SparkSession) -> bool:
    from jobs.spark import is_connect

    return is_connect(spark)
