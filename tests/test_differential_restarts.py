"""Restarts on random streams against real Spark (SPEC.md §1.3, docs/semantics.md §2.7, §13.8).

Each case is drawn from its seed (``random.Random(seed)``, so a failing case is named by its
kind and seed): out-of-order event streams with late rows and exact duplicates, a random pace
and trigger rate, random delays, 1-3 restarts at random ticks (idle ones at ``live`` pace) and
a random switch at the first one (``after_restart``: other delays, sometimes
``noDataMicroBatches.enabled`` or ``allowMultiple`` turned off, and for two sources sometimes
the other ``policy``, which Spark ignores as the checkpoint holds it). Kinds: every single
operator (window aggregation tumbling and sliding in a random output mode, ``dropDuplicates``
with and without the event time in its keys, ``dropDuplicatesWithinWatermark`` (its delay
kept: a switched one is refused, ``restarts.check_predictable``), session windows, inner and
outer band joins) and pipelines (dedup -> aggregation, aggregation -> aggregation over
``window_time``, a union under ``min`` and under ``max`` -> dedup -> aggregation, join ->
aggregation).

A case is drawn again (from the same generator) until its restarts change the prediction, so
each one compares what a restart does with Spark. Spark replays it once, stopping and starting
the query from its checkpoint; every route of the prediction (``tests.differential.
restart_diffs``: stepping with fates, ``wmbt predict``'s, the whole run where it applies and,
for one operator, the reference loop) must equal it batch by batch and operator by operator
(watermarks, late rows, state rows total/updated/removed, output rows, input rows) and its
emitted rows row for row. CI runs one seed per kind; ``pytest --soak`` runs ``SOAK_SEEDS``
seeds per kind (``WMBT_SEEDS=a..b`` picks others).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from semantics.history import plan
from semantics.predict import predict
from semantics.spec import BacktestSpec, parse_spec
from tests.deltas import write_commits, write_interleaved
from tests.differential import restart_diffs
from tests.soak import SOAK

pytestmark = pytest.mark.spark

SOAK_SEEDS = 20
DELAYS = ["0 seconds", "1500 milliseconds", "2 seconds", "5 seconds", "10 seconds"]
NO_DATA = "spark.sql.streaming.noDataMicroBatches.enabled"
MULTIPLE = "spark.sql.streaming.statefulOperator.allowMultiple"
Rows = list[list[dict]]


def stream(rng: random.Random, columns: Callable[[random.Random], dict],
           commits: tuple[int, int] = (3, 7)) -> Rows:
    """Commits of 1-4 rows along a clock moving 1-8 s a commit: rows near it (±2 s,
    sometimes with ms), a third of them late (3-25 s behind it), some exact duplicates of an
    earlier row (the same key and event time: what a dedup drops)."""
    clock, out, seen = rng.randint(0, 5), [], []
    for _ in range(rng.randint(*commits)):
        clock += rng.randint(1, 8)
        rows = []
        for _ in range(rng.randint(1, 4)):
            if seen and rng.random() < 0.15:
                rows.append(dict(rng.choice(seen)))
                continue
            behind = rng.randint(3, 25) if rng.random() < 0.33 else rng.randint(-2, 2)
            row = {**columns(rng), "ts": max(0, clock - behind) + rng.choice([0, 0, 0.5, 0.999])}
            rows.append(row)
            seen.append(row)
        out.append(rows)
    return out


def keyed(rng: random.Random) -> dict:
    return {"k": rng.randint(1, 2), "v": rng.randint(0, 3), "id": rng.randint(1, 4)}


def window(rng: random.Random, sliding: bool) -> dict:
    if sliding:
        return rng.choice([{"duration": "10 seconds", "slide": "5 seconds"},
                           {"duration": "10 seconds", "slide": "4 seconds"}])
    return {"duration": rng.choice(["5 seconds", "10 seconds"])}


def band(rng: random.Random) -> dict:
    lower, upper = rng.choice([(-5, 0), (-10, 5), (0, 10), (-3, 3)])
    return {"lower": f"{lower} seconds", "upper": f"{upper} seconds",
            "lower_inclusive": rng.random() < 0.5, "upper_inclusive": rng.random() < 0.5}


AGG = {"n": "count(*)", "s": "sum(v)"}


def single_query(kind: str, rng: random.Random) -> dict:
    if kind in ("agg_tumbling", "agg_sliding"):
        return {"kind": "aggregation", "keys": ["k"], "window": window(rng, kind == "agg_sliding"),
                "aggregates": AGG, "output_mode": rng.choice(["append", "update", "complete"])}
    if kind == "dedup":
        return {"kind": "deduplication", "keys": rng.choice([["k", "ts"], ["id", "ts"], ["id"]])}
    if kind == "dedup_within":
        return {"kind": "deduplication", "keys": rng.choice([["k"], ["id"]]),
                "within_watermark": True}
    if kind == "session":
        return {"kind": "session", "keys": ["k"], "gap": rng.choice(["3 seconds", "5 seconds"]),
                "aggregates": AGG, "output_mode": rng.choice(["append", "complete"])}
    jtype = "inner" if kind == "join_inner" else rng.choice(["left_outer", "right_outer",
                                                             "full_outer"])
    return {"kind": "join", "type": jtype, "left": "left", "right": "right", "keys": ["k"],
            "time_range": band(rng)}


def pipeline(kind: str, rng: random.Random) -> list[dict]:
    dedup = {"deduplicate": {"keys": ["k", "ts"]}}
    agg = {"aggregate": {"window": window(rng, rng.random() < 0.3), "keys": ["k"],
                         "aggregates": AGG}}
    if kind == "dedup_agg":
        return [dedup, agg]
    if kind == "agg_agg":
        return [{"aggregate": {"window": {"duration": "5 seconds"}, "keys": ["k"],
                               "aggregates": {"n": "count(*)"}}},
                {"aggregate": {"window": {"duration": rng.choice(["10 seconds", "20 seconds"]),
                                          "time": "window_time"},
                               "aggregates": {"total": "sum(n)", "m": "max(n)"}}}]
    if kind in ("union_min", "union_max"):
        return [{"union": ["left", "right"]}, dedup, agg]
    assert kind == "join_agg"
    return [{"join": {"type": rng.choice(["inner", "left_outer"]), "left": "left",
                      "right": "right", "keys": ["k"], "time_range": band(rng)}},
            {"aggregate": {"window": {"duration": "10 seconds"},
                           "aggregates": {"n": "count(*)"}}}]


SINGLE = ["agg_tumbling", "agg_sliding", "dedup", "dedup_within", "session", "join_inner",
          "join_outer"]
PIPELINES = ["dedup_agg", "agg_agg", "union_min", "union_max", "join_agg"]
TWO_SOURCES = {"join_inner", "join_outer", "union_min", "union_max", "join_agg"}


def draw(kind: str, rng: random.Random, tmp: Path) -> tuple[dict, BacktestSpec]:
    """One case of ``kind``: its spec document without restarts (data written under
    ``tmp``) and the spec with them."""
    two = kind in TWO_SOURCES
    if two:
        left, right = stream(rng, keyed, (2, 5)), stream(rng, keyed, (2, 5))
        write_interleaved(tmp, left, right, [rng.random() < 0.5 for _ in range(10)])
        sources = ["left", "right"]
    else:
        write_commits(tmp / "events", stream(rng, keyed))
        sources = ["events"]
    query = {"pipeline": pipeline(kind, rng)} if kind in PIPELINES else \
        {**single_query(kind, rng), **({} if two else {"source": "events"})}
    pace = rng.choice(["backlog", "live"])
    before = {s: rng.choice(DELAYS) for s in sources}
    cand: dict = {"watermark": before}
    if two:
        cand["policy"] = {"union_min": "min", "union_max": "max"}.get(
            kind, rng.choice(["min", "max"]))
    doc = {"name": f"restart-{kind}",
           "sources": {s: {"table": str(tmp / s), "event_time": "ts"} for s in sources},
           "query": query,
           "replay": {"pace": pace, "batch_by": rng.choice([{"commits": 1}, {"commits": 1},
                                                            {"commits": 2}, {"rows": 3}])},
           "candidates": {"c": cand}}
    spec = parse_spec(doc, str(tmp / "spec.yaml"))
    ticks = [t.index for t in plan(spec, "c").ticks if pace == "backlog" or t.idle]
    restarts = sorted(rng.sample(ticks, min(len(ticks), rng.randint(1, 3))))
    # the switch: other delays (a within-watermark dedup keeps its own: not modelled), and
    # sometimes a setting the restarted query reads from its session, or the policy Spark
    # keeps from the checkpoint (info.switch.ignored)
    after: dict = {"watermark": before if kind == "dedup_within" else
                   {s: rng.choice(DELAYS) for s in sources}}
    conf = rng.random()
    if conf < 0.2:
        after["spark_conf"] = {NO_DATA: False}
    elif conf < 0.35 and kind != "join_agg":  # (refused with a join in a pipeline)
        after["spark_conf"] = {MULTIPLE: False}
    if two and rng.random() < 0.3:
        after["policy"] = "min" if cand["policy"] == "max" else "max"
    doc = {**doc, "replay": {**doc["replay"], "restarts": restarts},
           "candidates": {"c": {**cand, "after_restart": after}}}
    return doc, parse_spec(doc, str(tmp / "spec.yaml"))


def engaged(doc: dict, spec: BacktestSpec) -> bool:
    """Do the restarts (and the switch) change the prediction?"""
    plain = parse_spec({**doc, "replay": {k: v for k, v in doc["replay"].items()
                                          if k != "restarts"},
                        "candidates": {"c": {k: v for k, v in doc["candidates"]["c"].items()
                                             if k != "after_restart"}}}, spec.path)
    a = predict(plan(spec, "c"), spec, "c", path="step")
    b = predict(plan(plain, "c"), plain, "c", path="step")
    cols = [c for c in a.batches.columns if "bytes" not in c]
    return not (a.batches[cols].equals(b.batches[cols]) and a.outputs.equals(b.outputs))


def case(kind: str, seed: int, tmp: Path) -> tuple[dict, BacktestSpec]:
    """The first draw of ``seed``'s generator whose restarts change the prediction."""
    rng = random.Random(f"{kind}-{seed}")
    for attempt in range(40):
        doc, spec = draw(kind, rng, tmp / f"draw{attempt}")
        if engaged(doc, spec):
            return doc, spec
    raise AssertionError(f"{kind} seed {seed}: no draw whose restarts change the prediction")


def seeds() -> list[int]:
    given = os.environ.get("WMBT_SEEDS")
    if given:
        a, b = given.split("..")
        return list(range(int(a), int(b)))
    return list(range(SOAK_SEEDS)) if SOAK else [0]


@pytest.mark.parametrize("seed", seeds())
@pytest.mark.parametrize("kind", SINGLE + PIPELINES)
def test_random_restarts_equal_spark(spark, tmp_path: Path, kind: str, seed: int) -> None:
    doc, spec = case(kind, seed, tmp_path)
    diffs, actual = restart_diffs(spec, "c", tmp_path / "work", spark)
    cols = [c for c in ["batch_id", "tick", "operator_index", "input_rows", "watermark_ms",
                        "late_watermark_ms", "eviction_watermark_ms", "dropped_by_watermark",
                        "state_rows", "state_rows_updated", "state_rows_removed",
                        "output_rows"] if c in actual.batches.columns]
    assert not diffs, "\n".join([f"{kind} seed {seed}: prediction != Spark", *diffs[:20],
                                 f"spec: {doc}", "actual:", actual.batches[cols].to_string(),
                                 "predicted (step):",
                                 predict(plan(spec, "c"), spec, "c", path="step")
                                 .batches[cols].to_string()])
