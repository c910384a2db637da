"""Jobs, the nightly schedule and the sensors.

* ``backtest_candidates`` — plan, predict, replay and check one ``"<backtest>|<candidate>"``
  partition (run tag ``wmbt/spark=replay``: ``infra/dagster.yaml`` runs one at a time).
* ``compare_candidates`` — the sweep and the comparison of one backtest partition.
* ``nightly_backtests`` — every candidate of every spec, every night (02:00 UTC).
* ``spec_sensor`` — a new or changed spec file or candidate requests exactly the affected
  partitions (cursor: fingerprint per ``backtest|candidate``), adding dynamic partitions.
* ``compare_after_success`` / ``compare_after_failure`` (on by default) — when the last
  running candidate of a backtest finishes, refresh that backtest's comparison.
"""

import json

import dagster as dg

from orchestration.assets import actual_report, predicted_report, replay_schedule
from orchestration.comparison import candidate_comparison
from orchestration.partitions import BACKTESTS, CANDIDATES
from orchestration.resources import SpecsResource
from orchestration.specs import Discovery, split_key
from orchestration.sweep import delay_sweep

SPARK_TAG = "wmbt/spark"
BACKTEST_TAG = "wmbt/backtest"

backtest_candidates_job = dg.define_asset_job(
    "backtest_candidates",
    selection=dg.AssetSelection.assets(replay_schedule, predicted_report, actual_report),
    partitions_def=CANDIDATES,
    tags={SPARK_TAG: "replay"},
    description="Plan, predict, replay in Spark and validate one candidate.",
)
compare_candidates_job = dg.define_asset_job(
    "compare_candidates",
    selection=dg.AssetSelection.assets(delay_sweep, candidate_comparison),
    partitions_def=BACKTESTS,
    description="Sweep one backtest's delays (prediction only) and compare the stored "
                "results of all its candidates.",
)


def run_request(key: str) -> dg.RunRequest:
    return dg.RunRequest(partition_key=key, tags={BACKTEST_TAG: split_key(key)[0]})


def partition_requests(instance: dg.DagsterInstance, found: Discovery
                       ) -> list[dg.AddDynamicPartitionsRequest]:
    """Requests adding the candidate and backtest partitions ``found`` has that are missing."""
    out = []
    for pdef, keys in ((CANDIDATES, found.partition_keys), (BACKTESTS, sorted(found.specs))):
        assert pdef.name is not None
        have = set(instance.get_dynamic_partitions(pdef.name))
        new = [k for k in keys if k not in have]
        if new:
            out.append(pdef.build_add_request(new))
    return out


@dg.schedule(cron_schedule="0 2 * * *", job=backtest_candidates_job, execution_timezone="UTC",
             name="nightly_backtests", default_status=dg.DefaultScheduleStatus.STOPPED,
             description="Every candidate of every spec in the spec folder, nightly.")
def nightly_backtests(context: dg.ScheduleEvaluationContext,
                      specs: SpecsResource) -> list[dg.RunRequest] | dg.SkipReason:
    found = specs.discover()
    for path, msg in found.errors.items():
        context.log.warning(f"skipping {path}: {msg}")
    if not found.specs:
        return dg.SkipReason(f"no valid backtest specs in {specs.folder}")
    # A schedule cannot return partition requests: add missing partitions on the instance.
    for req in partition_requests(context.instance, found):
        context.instance.add_dynamic_partitions(req.partitions_def_name, req.partition_keys)
    return [run_request(k) for k in found.partition_keys]


def _load_cursor(cursor: str | None) -> dict[str, str]:
    try:
        data = json.loads(cursor) if cursor else {}
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def removed_keys(previous: dict[str, str], found: Discovery) -> list[str]:
    """Keys in the cursor whose candidate is gone from a valid spec, or whose spec is gone
    while every file in the folder parsed (a broken file might still hold it)."""
    now = found.fingerprints
    out = []
    for key in previous:
        if key in now:
            continue
        backtest, _ = split_key(key)
        if backtest in found.specs or not found.errors:
            out.append(key)
    return sorted(out)


@dg.sensor(job=backtest_candidates_job, name="spec_sensor", minimum_interval_seconds=30,
           default_status=dg.DefaultSensorStatus.STOPPED,
           description="New or changed spec files/candidates: run exactly those partitions.")
def spec_sensor(context: dg.SensorEvaluationContext, specs: SpecsResource
                ) -> dg.SensorResult | dg.SkipReason:
    previous = _load_cursor(context.cursor)
    found = specs.discover()
    for msg in found.errors.values():
        context.log.warning(f"spec not loaded, its partitions are left alone: {msg}")
    now = found.fingerprints
    changed = sorted(k for k, fp in now.items() if previous.get(k) != fp)
    gone = removed_keys(previous, found)
    if not changed and not gone:
        return dg.SkipReason(f"no new or changed candidates in {specs.folder}")
    cursor = {k: v for k, v in previous.items() if k not in gone}
    cursor.update(now)
    requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
    requests += partition_requests(context.instance, found)
    if gone:
        requests.append(CANDIDATES.build_delete_request(gone))
        dead = sorted({split_key(k)[0] for k in gone} - set(found.specs))
        if dead:
            requests.append(BACKTESTS.build_delete_request(dead))
    return dg.SensorResult(run_requests=[run_request(k) for k in changed],
                           dynamic_partitions_requests=requests,
                           cursor=json.dumps(cursor, sort_keys=True))


_ACTIVE = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED,
           dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]


def _compare_request(context: dg.RunStatusSensorContext) -> dg.RunRequest | dg.SkipReason:
    key = context.dagster_run.tags.get("dagster/partition")
    if not key:
        return dg.SkipReason("run without a partition")
    backtest, _ = split_key(key)
    active = context.instance.get_runs(dg.RunsFilter(job_name=backtest_candidates_job.name,
                                                     statuses=_ACTIVE))
    if any((r.tags.get("dagster/partition") or "").startswith(backtest + "|") for r in active):
        return dg.SkipReason(f"other candidates of {backtest} are still running")
    assert BACKTESTS.name is not None
    if not context.instance.has_dynamic_partition(BACKTESTS.name, backtest):
        context.instance.add_dynamic_partitions(BACKTESTS.name, [backtest])
    return dg.RunRequest(run_key=f"compare:{context.dagster_run.run_id}", partition_key=backtest,
                         tags={BACKTEST_TAG: backtest})


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.SUCCESS, name="compare_after_success",
                      minimum_interval_seconds=10,
                      monitored_jobs=[backtest_candidates_job],
                      request_job=compare_candidates_job,
                      default_status=dg.DefaultSensorStatus.RUNNING)
def compare_after_success(context: dg.RunStatusSensorContext
                          ) -> dg.RunRequest | dg.SkipReason:
    """Refresh a backtest's comparison once its last running candidate succeeded."""
    return _compare_request(context)


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.FAILURE, name="compare_after_failure",
                      minimum_interval_seconds=10,
                      monitored_jobs=[backtest_candidates_job],
                      request_job=compare_candidates_job,
                      default_status=dg.DefaultSensorStatus.RUNNING)
def compare_after_failure(context: dg.RunStatusSensorContext
                          ) -> dg.RunRequest | dg.SkipReason:
    """The same after a failed candidate (e.g. validation failed): the table shows it."""
    return _compare_request(context)
