"""One backtest run: plan, predict, replay in Spark, validate, store. Shared by CLI and Dagster.

>>> result = run_backtest(load_spec("backtests/clicks.yaml"), actual=True)   # doctest: +SKIP
>>> result.success                                                         # doctest: +SKIP
True
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.results import ResultsStore, run_id
from semantics.compare import Difference, compare_outputs, compare_reports, row_counts
from semantics.history import plan
from semantics.pyspark_spec import PySparkQuery
from semantics.report import RunResult
from semantics.sample import Sample
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec

if TYPE_CHECKING:  # (pyspark is imported by a replay only)
    from pyspark.sql import SparkSession

    from semantics.file_ranges import FilePlan
    from semantics.predict import Prediction

Progress = Callable[[str], None]


@dataclass
class CandidateResult:
    name: str
    run_id: str
    schedule: Schedule
    predicted: RunResult | None = None
    actual: RunResult | None = None
    differences: list[Difference] = field(default_factory=list)
    validation: dict[str, Any] | None = None

    @property
    def success(self) -> bool:
        return self.validation is None or bool(self.validation.get("success"))

    def to_json(self, records: bool = True) -> dict[str, Any]:
        """``records=False``: frames stay frames (``semantics.report.dumps`` writes them)."""
        out: dict[str, Any] = {"name": self.name, "run_id": self.run_id}
        if self.predicted is not None:
            out["predicted"] = self.predicted.to_json(records)
        if self.actual is not None:
            out["actual"] = self.actual.to_json(records)
        if self.validation is not None:
            out["validation"] = self.validation
        return out


@dataclass
class BacktestResult:
    spec: BacktestSpec
    candidates: list[CandidateResult]
    report: str | None = None

    @property
    def success(self) -> bool:
        return all(c.success for c in self.candidates)

    def to_json(self, records: bool = True) -> dict[str, Any]:
        """SPEC.md §4's document; ``records=False``: for ``semantics.report.dumps``."""
        return {"backtest": self.spec.name,
                "candidates": [c.to_json(records) for c in self.candidates],
                "report": self.report}


def candidates_of(spec: BacktestSpec, candidate: str | None) -> list[str]:
    if candidate is None:
        return list(spec.candidates)
    if candidate not in spec.candidates:
        from semantics.errors import SpecError

        raise SpecError(spec.path, "candidates", f"a candidate named {candidate!r} (have: "
                        f"{', '.join(spec.candidates)})")
    return [candidate]


def default_results_dir() -> Path:
    import os

    return Path(os.environ.get("WMBT_RESULTS", "results"))


def run_backtest(spec: BacktestSpec, candidate: str | None = None, *, predict: bool = True,
                 actual: bool = True, results: Path | None = None, master: str | None = None,
                 progress: Progress = lambda _m: None, spark: SparkSession | None = None,
                 explain: bool = True, fresh: bool = False,
                 notice: Progress | None = None,
                 planned: Callable[[Schedule], None] | None = None,
                 sample: float | None = None, stream: bool = False,
                 bounded_from: int | None = None) -> BacktestResult:
    """Predict and/or replay every candidate (or one), compare, and store the results.
    ``explain=False``: predictions without the fate of every row (``--explain`` and the late
    rows' list need them; the tables do not), so the predictor takes its whole-run paths,
    and counts the input rows dropped as late on its own. An interrupted replay is resumed
    (``fresh``: never); ``notice`` gets the line saying so, or why it starts afresh (default:
    stderr, even where progress is quiet: it explains a run's time). ``planned`` sees each
    schedule before anything is predicted, replayed or stored (e.g. to refuse a row id the
    schedule does not have: it raises, and nothing is written). ``sample``: predict and
    replay only that fraction of the keys plus carrier rows (``jobs.sample_replay``); the
    candidates' figures are then the sampled keys'. A prediction alone with a ``master``
    runs per key range on that cluster (``jobs.predict_cluster``), without fates. ``stream``:
    a prediction on this machine (one operator) builds its emitted rows a range of batches at
    a time as they are stored and printed (``semantics.output_chunks``): its
    ``predicted.outputs`` then holds the columns only, ``predicted.streamed`` the rows; from
    ``bounded_from`` rows of history (default ``tuning.BOUNDED_FROM_ROWS``) such a prediction
    of a query §15.1 plans from the files runs range by range in bounded memory
    (``semantics.bounded``, docs/semantics.md §15.3)."""
    notice = notice or _to_stderr
    store = ResultsStore(results or default_results_dir())
    # a bad results folder refused before any prediction or replay (nothing written yet)
    store.check_writable(create=False)
    if sample is not None:  # (a query that cannot be sampled: refused before any reading)
        from semantics.sample import check_rate, sample_keys

        check_rate(spec, sample)
        sample_keys(spec)
    on_cluster = predict and not actual and master is not None and sample is None \
        and not isinstance(spec.query, PySparkQuery)
    if on_cluster:  # (ranges of keys on the executors: refused before any reading)
        from semantics.key_ranges import check_splittable

        check_splittable(spec)
    lowered = None
    if isinstance(spec.query, PySparkQuery):  # the job's own code: planned by Spark first
        from jobs.pyspark_query import lower
        from jobs.spark import get_spark

        spark = spark or get_spark(master)
        lowered = lower(spec, spark)
        spec = lowered.spec
    out: list[CandidateResult] = []
    schedules: dict[str, Schedule] = {}
    samples: dict[str, Sample] = {}  # (by batch_by, planned from the files)
    if predict and actual:  # predicted for the Spark the replay runs on (SPEC.md §1.4)
        from jobs.spark import get_spark

        spark = spark or get_spark(master)
        # (only the prediction reads it: the replay's own spec, its resume fingerprint, stays)
        pspec = replay_version(spec, spark.version, master)
    else:
        pspec = spec
    for name in candidates_of(spec, candidate):
        if stream and not on_cluster and sample is None and lowered is None \
                and planned is None and _bounded_route(spec, name, bounded_from):
            out.append(_bounded(spec, pspec, name, store, progress))
            continue
        if on_cluster and lowered is None and _from_files(spec, name):
            # (docs/semantics.md §15.1: no history on this machine: the executors read the files)
            out.append(_on_executors(spec, pspec, name, store, master, spark, progress))
            continue
        bb = spec.batch_by(name).model_dump_json()
        drawn = carrier = None
        if sample is not None and lowered is None and planned is None \
                and _from_files(spec, name):  # (docs/semantics.md §11.1: the sample
            if bb not in samples:  # in memory, never the history)
                samples[bb] = _draw_from_files(spec, name, sample, progress)
            drawn = samples[bb]
            sched = drawn.schedule
        else:
            if bb not in schedules:
                t0 = time.perf_counter()
                schedules[bb] = plan(spec if lowered is None else lowered.schedule_spec, name)
                s = schedules[bb]
                progress(f"planned {len(s.ticks)} ticks, {s.total_rows} rows "
                         f"({time.perf_counter() - t0:.1f}s)")
                if planned is not None:
                    planned(s)
            sched = schedules[bb]
        if sample is not None:
            from jobs.sample_replay import carrier_prediction
            from semantics.sample import draw

            if drawn is None:
                drawn = draw(sched, spec, sample)
                sched = drawn.schedule
            carrier = carrier_prediction(drawn, spec, name)
            progress(f"[{name}] sample {sample:g}: {drawn.sampled_rows} of "
                     f"{drawn.total_rows} rows, {drawn.carrier_rows} carrier rows")
        cr = CandidateResult(name, run_id(spec, name, sched), sched)
        if predict:
            from semantics.predict import predict as run_predict

            t0 = time.perf_counter()
            if lowered is not None:
                from dataclasses import replace

                from jobs.pyspark_query import predict as predict_lowered
                from jobs.spark import get_spark

                cr.predicted = predict_lowered(replace(lowered, spec=pspec), sched, name,
                                               spark or get_spark(master), explain=explain,
                                               count_late=not explain)
            elif on_cluster:  # (docs/semantics.md §15: the same answer, range by range)
                from jobs.predict_cluster import predict_on_cluster
                from jobs.spark import get_spark

                cr.predicted = predict_on_cluster(sched, pspec, name, spark or get_spark(master))
            elif drawn is not None and carrier is not None:
                from jobs.sample_replay import predict_sample

                cr.predicted = predict_sample(drawn, pspec, name, carrier, explain=explain)
            else:
                cr.predicted = run_predict(sched, pspec, name, explain=explain,
                                           count_late=not explain, stream=stream)
            cr.predicted.info["elapsed_s"] = time.perf_counter() - t0
            progress(f"[{name}] predicted {cr.predicted.batches['batch_id'].nunique()} batches in "
                     f"{cr.predicted.info['elapsed_s']:.2f}s")
            store.write(spec, name, cr.run_id, "predicted", cr.predicted)
        if actual:
            from jobs.replay import replay
            from jobs.spark import get_spark

            session = spark or get_spark(master)
            progress(f"[{name}] replaying {len(sched.data_ticks)} data ticks in Spark "
                     f"({len(sched.ticks) - len(sched.data_ticks)} idle) ...")
            workdir = store.root / "_work" / spec.name / name
            if drawn is not None and carrier is not None:
                from jobs.sample_replay import replay_sample, sample_workdir

                cr.actual = replay_sample(drawn, spec, name, carrier,
                                          sample_workdir(store.root, spec, drawn.rate),
                                          session, fresh=fresh,
                                          notify=lambda m, name=name: notice(f"{name}: {m}"))
            else:
                cr.actual = replay(spec, name, sched, workdir, session, fresh=fresh,
                                   notify=lambda m, name=name: notice(f"{name}: {m}"))
            progress(f"[{name}] Spark ran {cr.actual.batches['batch_id'].nunique()} batches in "
                     f"{float(cr.actual.info.get('elapsed_s', 0)):.1f}s")
        if predict and actual:
            assert cr.predicted is not None and cr.actual is not None
            cr.validation = validate(spec, cr, store.root / "gx")
            if drawn is not None:  # (the figures validated are the sample's)
                cr.validation["sample"] = drawn.info()
            progress(f"[{name}] validation {'passed' if cr.success else 'FAILED'}")
        if actual:
            assert cr.actual is not None
            store.write(spec, name, cr.run_id, "actual", cr.actual, cr.success,
                        cr.validation)
        out.append(cr)
    return BacktestResult(spec, out)


def _on_executors(spec: BacktestSpec, pspec: BacktestSpec, name: str, store: ResultsStore,
                  master: str | None, spark: SparkSession | None, progress: Progress
                  ) -> CandidateResult:
    """``name`` predicted on the cluster, the executors reading the Delta files
    (``jobs.predict_cluster.predict_files_on_cluster``), and stored. Its schedule is the
    carrier rows on the full ticks: no machine holds the history's rows."""
    from jobs.predict_cluster import predict_files_on_cluster
    from jobs.spark import get_spark

    return _planned_from_files(
        spec, name, store, progress, "on the executors",
        lambda: predict_files_on_cluster(pspec, name, spark or get_spark(master)))


def _bounded_route(spec: BacktestSpec, name: str, from_rows: int | None) -> bool:
    from semantics.bounded import takes_bounded
    from semantics.tuning import BOUNDED_FROM_ROWS

    return takes_bounded(spec, name, BOUNDED_FROM_ROWS if from_rows is None else from_rows)


def _bounded(spec: BacktestSpec, pspec: BacktestSpec, name: str, store: ResultsStore,
             progress: Progress) -> CandidateResult:
    """``name`` predicted range after range from the files, its spills in the results'
    ``_work`` folder (``semantics.bounded``), and stored. Its schedule is the carrier rows on
    the full ticks, as on a cluster; its run id the whole schedule's, planned from the files."""
    from semantics.bounded import predict_bounded

    return _planned_from_files(
        spec, name, store, progress, "in {ranges} key ranges",
        lambda: predict_bounded(pspec, name, store.root / "_work", progress=progress))


def _planned_from_files(spec: BacktestSpec, name: str, store: ResultsStore, progress: Progress,
                        where: str, run: Callable[[], tuple[Prediction, FilePlan]]
                        ) -> CandidateResult:
    """``run`` (a prediction planned from the files, §15.1) timed, as ``name``'s result with
    the plan's run id (the whole schedule's) and schedule (the carrier rows on the full
    ticks), said (``where``: how it ran; ``{ranges}``: its key ranges) and stored."""
    from jobs.predict_cluster import plan_run_id

    t0 = time.perf_counter()
    predicted, fplan = run()
    predicted.info["elapsed_s"] = time.perf_counter() - t0
    cr = CandidateResult(name, plan_run_id(spec, name, fplan), fplan.schedule, predicted)
    how = where.format_map(predicted.info.get("key_ranges") or {})  # type: ignore[arg-type]
    progress(f"[{name}] predicted {fplan.total_rows} rows {how} in "
             f"{predicted.info['elapsed_s']:.2f}s")
    store.write(spec, name, cr.run_id, "predicted", predicted)
    return cr


def _from_files(spec: BacktestSpec, name: str) -> bool:
    """Whether ``name`` can be planned from the Delta log and the files one at a time (a
    cluster prediction, ``semantics.file_ranges``; a sample, ``semantics.sample_files``)
    rather than from the whole history."""
    from semantics.file_ranges import not_from_files

    return not_from_files(spec, name) is None


def _draw_from_files(spec: BacktestSpec, name: str, rate: float, progress: Progress
                     ) -> Sample:
    from semantics.sample_files import draw_from_files

    t0 = time.perf_counter()
    drawn = draw_from_files(spec, name, rate, progress=progress)
    progress(f"planned {len(drawn.schedule.ticks)} ticks from the files, {drawn.total_rows} "
             f"rows ({time.perf_counter() - t0:.1f}s)")
    return drawn


def replay_version(spec: BacktestSpec, version: str, master: str | None) -> BacktestSpec:
    """``spec`` predicted for Spark ``version`` (the session's, e.g. a cluster's) where it
    pins no ``spark_version`` itself; a release without a profile is an error (exit 2)."""
    from semantics.errors import SpecError
    from semantics.profiles import profile_name

    if spec.spark_version is not None:
        return spec
    try:
        profile_name(version)
    except ValueError as exc:
        raise SpecError(spec.path, "spark_version",
                        f"set (the Spark at {master or 'the local master'} is {version}, "
                        f"which the predictor has no profile for): {exc}") from None
    return spec.model_copy(update={"spark_version": version})


def _to_stderr(msg: str) -> None:
    import sys

    print(f"wmbt: {msg}", file=sys.stderr, flush=True)


def validate(spec: BacktestSpec, cr: CandidateResult, gx_root: Path) -> dict[str, Any]:
    """Prediction vs actual with Great Expectations (batch by batch, emitted rows row for row,
    the spec's thresholds); the plain comparison is kept on ``cr.differences``."""
    from jobs.validation import validate as gx_validate

    assert cr.predicted is not None and cr.actual is not None
    p, a = cr.predicted.outputs, cr.actual.outputs
    counts = row_counts(p, a)  # once, for both (a million rows take seconds)
    cr.differences = compare_reports(cr.predicted.batches, cr.actual.batches)
    cr.differences += compare_outputs(p, a, counts=counts)
    return gx_validate(spec, cr, gx_root, counts)
