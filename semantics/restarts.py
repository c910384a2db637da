"""Restarts from the checkpoint and a candidate's switch of configuration at the first one
(SPEC.md §1.3; the rules, each checked on Spark 4.0.5, in docs/semantics.md §2.7).

``replay.restarts: [t, ...]`` stops the query once tick ``t`` is fully processed and starts it
again from the same checkpoint before tick ``t + 1``. What Spark does on such a restart
(``MicroBatchExecution.populateStartOffsets``):

* the global watermark is restored (the last commit's ``nextBatchWatermarkMs``: the one the
  next batch would have run with anyway), the per-input watermarks are forgotten: an input
  that has had no row since the restart counts as 0 again, so under the ``min`` policy the
  global watermark stays where it was until every input has had rows since;
* no no-data batch runs until a data batch has run (there is no last execution to ask);
* batch ids, state and the late watermark (the previous batch's) carry on;
* the settings of the offset log's metadata (:data:`CHECKPOINT_CONF`) are the checkpoint's:
  a candidate's ``after_restart`` that changes one is ignored, as Spark ignores it (with a
  warning, :func:`ignored`); the others (delays, ``allowMultiple``, ``noDataMicroBatches``)
  apply from the first batch after the restart.

A candidate's ``after_restart`` (the same fields as a candidate) applies from the first
restart on; later restarts keep it.
"""

from __future__ import annotations

import pandas as pd

from semantics.config import POLICY, PROVIDER, resolve
from semantics.errors import SpecError
from semantics.schedule import Schedule
from semantics.spec import (
    MODELED_CONF,
    PARTITIONS,
    SEMANTIC_PREFIXES,
    BacktestSpec,
    Candidate,
    DeduplicationQuery,
)

# Settings Spark stores in the offset log's metadata (``OffsetSeqMetadata.relevantSQLConfs``)
# and restores from it on a restart, overriding the session's: of those a spec may set (the
# others are internal format versions)
CHECKPOINT_CONF = (PARTITIONS, PROVIDER, POLICY)


def check_restarts(spec: BacktestSpec) -> None:
    """Each candidate's ``after_restart`` against the spec (no schedule needed): it needs a
    restart, switches the delays of the same watermarked sources (a restart cannot add or
    remove a ``withWatermark``), keeps the trigger rate (the schedule is cut once) and nests
    no other ``after_restart``."""
    f = spec.path
    for name, cand in spec.candidates.items():
        after = cand.after_restart
        if after is None:
            continue
        where = f"candidates.{name}.after_restart"
        if not spec.replay.restarts:
            raise SpecError(f, where, "replay.restarts with at least one tick: after_restart "
                            "applies from the first restart on")
        if after.after_restart is not None:
            raise SpecError(f, f"{where}.after_restart", "no after_restart inside "
                            "after_restart: the switch happens once, at the first restart")
        if after.batch_by is not None and after.batch_by != spec.batch_by(name):
            raise SpecError(f, f"{where}.batch_by", "the candidate's own batch_by (or none): "
                            "the schedule's batches are cut once for the whole run")
        if set(after.watermark) != set(cand.watermark):
            raise SpecError(f, f"{where}.watermark", "delays for the same sources as the "
                            f"candidate's watermark ({', '.join(sorted(cand.watermark)) or 'none'}"
                            "): a restart switches delays, it does not add or remove a "
                            "withWatermark")
        for key in after.spark_conf:
            if key.startswith(SEMANTIC_PREFIXES) and key not in MODELED_CONF:
                raise SpecError(f, f"{where}.spark_conf.{key}", "a Spark setting the "
                                "predictor models: " + ", ".join(sorted(MODELED_CONF)))


def check_schedule(spec: BacktestSpec, schedule: Schedule) -> None:
    """``replay.restarts`` against the schedule: ticks that exist, and at ``live`` pace idle
    ones (a data tick's no-data batch runs at once after it, in its idle tick: a query cannot
    be stopped between the two)."""
    n = len(schedule.ticks)
    for t in spec.replay.restarts:
        if t >= n:
            raise SpecError(spec.path, "replay.restarts", f"tick numbers of the schedule "
                            f"(0 .. {n - 1}), got {t}")
        if schedule.pace == "live" and not schedule.ticks[t].idle:
            raise SpecError(spec.path, "replay.restarts", f"idle ticks at pace live (odd "
                            f"numbers: data tick k is followed by its idle tick k + 1), got "
                            f"{t}: restart after {t + 1} instead")


def switched(spec: BacktestSpec, candidate: str) -> BacktestSpec:
    """``spec`` whose ``candidate`` is the configuration the query runs with after the first
    restart, as Spark runs it: the ``after_restart`` delays and settings, but the
    :data:`CHECKPOINT_CONF` settings and the policy the checkpoint holds. ``spec`` itself
    when the candidate switches nothing."""
    cand = spec.candidates[candidate]
    after = cand.after_restart
    if after is None:
        return spec
    conf = {**cand.spark_conf, **{k: v for k, v in after.spark_conf.items()
                                  if k not in CHECKPOINT_CONF}}
    now = Candidate(watermark=after.watermark, policy=cand.policy, spark_conf=conf,
                    batch_by=cand.batch_by)
    return spec.model_copy(update={"candidates": {**spec.candidates, candidate: now}})


def requested(spec: BacktestSpec, candidate: str) -> BacktestSpec:
    """``spec`` whose ``candidate`` is its ``after_restart`` as written (what the replay hands
    Spark at the restart, which then keeps the checkpoint's settings itself)."""
    cand = spec.candidates[candidate]
    after = cand.after_restart
    if after is None:
        return spec
    now = Candidate(watermark=after.watermark, policy=after.policy,
                    spark_conf={**cand.spark_conf, **after.spark_conf},
                    batch_by=cand.batch_by)
    return spec.model_copy(update={"candidates": {**spec.candidates, candidate: now}})


def ignored(spec: BacktestSpec, candidate: str) -> list[str]:
    """One warning per setting ``after_restart`` changes that the checkpoint fixes (Spark
    keeps the checkpoint's value; it logs the same)."""
    if spec.candidates[candidate].after_restart is None:
        return []
    was, asked = resolve(spec, candidate).conf, resolve(requested(spec, candidate), candidate).conf
    return [f"after_restart sets {k}={asked[k]}, but the checkpoint holds "
            f"{was.get(k, 'the session value it started with (unset in the spec)')}: "
            f"Spark keeps the checkpoint's value" for k in CHECKPOINT_CONF
            if k in asked and asked[k] != was.get(k)]


def check_predictable(spec: BacktestSpec, candidate: str) -> None:
    """What the predictor does not model about a switch: a within-watermark dedup stores each
    entry's expiry with the delay of the batch that stored it, so a switched delay gives old
    and new entries different delays."""
    after = spec.candidates[candidate].after_restart
    q = spec.query
    if (after is not None and isinstance(q, DeduplicationQuery) and q.within_watermark
            and after.watermark.get(q.source) != spec.candidates[candidate].watermark.get(
                q.source)):
        raise SpecError(spec.path, f"candidates.{candidate}.after_restart.watermark",
                        "the same delay for a within-watermark dedup (entries stored before "
                        "the switch keep the old delay's expiry: not modelled)")


def segment(spec: BacktestSpec, tick: int) -> int:
    """Which run of the query tick ``tick`` belongs to: 0 before the first restart, ``i``
    after the ``i``-th."""
    return sum(t < tick for t in spec.replay.restarts)


def describe(spec: BacktestSpec, candidate: str, schedule: Schedule, batches: pd.DataFrame
             ) -> dict[str, object]:
    """The restarts of a run for its report's ``info`` (nothing without restarts): after
    which tick each happened and the first batch after it (None: no batch ran after it), and
    the candidate's switch (its delays and settings from the first restart on, and what Spark
    ignores of them)."""
    if not schedule.restarts:
        return {}
    ticks = batches["tick"].to_numpy()
    ids = batches["batch_id"].to_numpy()
    first = [int(ids[ticks > t][0]) if (ticks > t).any() else None for t in schedule.restarts]
    out: dict[str, object] = {"restarts": [{"after_tick": t, "first_batch": b} for t, b
                                           in zip(schedule.restarts, first, strict=True)]}
    after = spec.candidates[candidate].after_restart
    if after is not None:
        out["switch"] = {"after_tick": schedule.restarts[0], "first_batch": first[0],
                         "watermark": {s: str(d) for s, d in after.watermark.items()},
                         "spark_conf": {k: str(v) for k, v in after.spark_conf.items()},
                         "ignored": ignored(spec, candidate)}
    return out
