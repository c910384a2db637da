"""Join scenarios replayed on several pyspark releases (tests/test_profiles_spark.py).

Scenarios are drawn from a seeded generator (the same draws as ``tests/differential.py``'s
``test_join``: a few small out-of-order commits per side, every join type, time ranges with
either bound, watermarks on one or both sides, both paces), written as real Delta tables plus a
spec file each, so that another process, running under another pyspark
(``jobs.spark_envs``), can replay them:

    python -m tests.profile_scenarios DIR      # replays DIR/*/spec.yaml, writes reports there

Each scenario folder gets ``batches.parquet`` and ``outputs.parquet`` (Spark's batch report
and emitted rows) and ``spark.txt`` (the pyspark version that made them).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pandas as pd

from tests.deltas import write_commits, write_interleaved

JOIN_TYPES = ("inner", "left_outer", "right_outer", "full_outer", "left_semi")


def _commits(rng: random.Random, max_commits: int = 3, max_rows: int = 4) -> list[list[dict]]:
    return [[{"k": rng.randint(1, 2), "ts": rng.randint(0, 40) + rng.choice([0, 0, 0, 0.5])}
             for _ in range(rng.randint(1, max_rows))] for _ in range(rng.randint(1, max_commits))]


def draw(seed: int, jtype: str) -> dict:
    """One scenario (as plain data) of join type ``jtype``."""
    rng = random.Random(f"{seed}-{jtype}")
    while True:
        lower = rng.choice([None, "-5 seconds", "-10 seconds", "0 seconds"])
        upper = rng.choice([None, "0 seconds", "5 seconds"])
        if lower or upper:
            break
    tr = {k: v for k, v in (("lower", lower), ("upper", upper)) if v is not None}
    tr.update(lower_inclusive=rng.random() < 0.5, upper_inclusive=rng.random() < 0.5)
    delays = [None, "0 seconds", "3 seconds", "10 seconds"]
    # outer sides need a watermark; both sides watermarked is the common case
    wm = {"left": rng.choice(delays[1:]), "right": rng.choice(delays)}
    if jtype in ("right_outer", "full_outer") and wm["right"] is None:
        wm["right"] = "0 seconds"
    return {"type": jtype, "time_range": tr,
            "watermark": {k: v for k, v in wm.items() if v},
            "policy": rng.choice(["min", "max"]), "pace": rng.choice(["backlog", "live"]),
            "left": _commits(rng), "right": _commits(rng),
            "order": [rng.random() < 0.5 for _ in range(6)]}


# Spark's own StreamingJoinSuite scenarios (each AddData one commit, rows (key, seconds), each
# followed by an idle tick as CheckNewAnswer lets the no-data batch run; a commit that feeds both
# sides of a self join is two commits, left then right):
# - "range": "join with watermark range condition" (its left semi and left/right/full outer
#   suites; setupJoinWithRangeCondition): key = key AND leftTime BETWEEN rightTime - 5 seconds
#   AND rightTime + 5 seconds, a 10 seconds watermark on both sides. The left semi suite
#   expects the rows (1, 5) and (1, 7) and, from Spark 4.2 (SPARK-55973), fewer left state rows:
#   (1, 5) leaves the state when (1, 10) matches it, (1, 7) is emitted on arrival, never stored.
# - "self": the self joins (setupSelfJoin): one stream, the right side its even ids only,
#   leftId = rightId AND rightTime BETWEEN leftTime AND leftTime + 5 seconds, 5 seconds
#   watermarks; ids 1-15 at the second of their id in three commits of five.
# - "window": the windowed joins (setupWindowedJoin: key = value, time = value seconds, both
#   sides ``select(key, window(time, "10 seconds"), value)`` and joined on key + window, 10
#   seconds watermarks; no time range), with the commits of StreamingLeftSemiJoinSuite
#   "windowed left semi join" (StreamingOuterJoinSuite's "windowed left/right outer join" feed
#   its first four): each MultiAddData is two commits, left then right, and its StopStream /
#   StartStream is left out (it restores the same watermark). The left semi suite expects keys
#   3, 4, 5 (window end 10) and 22 (window end 30); 1 and 5 arrive late (their window ends at
#   10, the watermark is 11). Spark 4.2+ removes matched left rows at once here too.
_SELF = [[(i, i) for i in range(j, j + 5)] for j in (1, 6, 11)]
SPARK_SUITE = {
    "range": {"time_range": {"lower": "-5 seconds", "upper": "5 seconds"},
              "delay": "10 seconds", "right_filter": None,
              "commits": [("left", [(1, 5), (3, 5)]), ("right", [(1, 10), (2, 5)]),
                          ("right", [(1, 9)]), ("left", [(1, 7), (1, 30)]),
                          ("right", [(0, 30)])]},
    "self": {"time_range": {"lower": "-5 seconds", "upper": "0 seconds"},
             "delay": "5 seconds", "right_filter": "k IN (2, 4, 6, 8, 10, 12, 14)",
             "commits": [(side, rows) for rows in _SELF for side in ("left", "right")]},
    "window": {"window": "10 seconds", "delay": "10 seconds", "right_filter": None,
               "commits": [(side, [(v, v) for v in values]) for side, values in (
                   ("left", (1, 2, 3, 4, 5)), ("right", (3, 4, 5, 6, 7)), ("left", (21,)),
                   ("right", (22,)), ("left", (22,)), ("left", (1,)), ("right", (5,)))]},
}


def spark_suite(jtype: str, name: str = "range") -> dict:
    """Spark's join scenario ``name`` (:data:`SPARK_SUITE`) as join type ``jtype``."""
    sc = SPARK_SUITE[name]
    on = {"window": {"duration": sc["window"]}} if "window" in sc else {
        "time_range": {**sc["time_range"], "lower_inclusive": True, "upper_inclusive": True}}
    return {"type": jtype, **on,
            "watermark": {"left": sc["delay"], "right": sc["delay"]},
            "policy": "min", "pace": "live", "right_filter": sc["right_filter"],
            "commits": [(side, [{"k": k, "ts": t} for k, t in rows])
                        for side, rows in sc["commits"]]}


def write(root: Path, scenario: dict) -> Path | None:
    """Delta sources and ``spec.yaml`` (JSON text) of ``scenario`` under ``root``; None (and
    nothing left) when Spark would reject the query (the spec checker's rules)."""
    import shutil

    from semantics.errors import SpecError
    from semantics.spec import load_spec

    root.mkdir(parents=True, exist_ok=True)
    if "commits" in scenario:  # (a transcribed scenario: its commits in order)
        for side, rows in scenario["commits"]:
            write_commits(root / side, [rows])
    write_interleaved(root, scenario.get("left", []), scenario.get("right", []),
                      scenario.get("order", []))
    spec = {
        "name": "profile",
        "sources": {s: {"table": str(root / s), "event_time": "ts"} for s in ("left", "right")},
        "query": {"kind": "join", "type": scenario["type"], "left": "left", "right": "right",
                  "keys": ["k"], **{f: scenario[f] for f in ("time_range", "window")
                                    if f in scenario}},
        "replay": {"pace": scenario["pace"], "batch_by": {"commits": 1}},
        "candidates": {"c": {"watermark": scenario["watermark"],
                             "policy": scenario["policy"]}},
    }
    if scenario.get("right_filter"):
        spec["sources"]["right"]["filter"] = scenario["right_filter"]
    (root / "spec.yaml").write_text(json.dumps(spec, indent=1))
    (root / "scenario.json").write_text(json.dumps(scenario))
    try:
        load_spec(root / "spec.yaml")
    except SpecError:
        shutil.rmtree(root)
        return None
    return root / "spec.yaml"


def make_set(folder: Path, seeds: range, types: tuple[str, ...] = JOIN_TYPES) -> list[Path]:
    """The valid scenarios of ``seeds`` x ``types`` under ``folder`` (``<type>-<seed>/``)."""
    made = [write(folder / f"{t}-{s}", draw(s, t)) for s in seeds for t in types]
    return [m.parent for m in made if m is not None]


def replay_all(folder: Path) -> None:
    """Replay every ``folder/*/spec.yaml`` in this process's pyspark (one session)."""
    import pyspark

    from jobs.replay import replay
    from jobs.spark import get_spark
    from semantics.history import plan
    from semantics.spec import load_spec

    spark = get_spark()
    try:
        for spec_file in sorted(folder.glob("*/spec.yaml")):
            d = spec_file.parent
            if (d / "spark.txt").exists():  # (replayed already: a rerun continues)
                continue
            spec = load_spec(spec_file)
            r = replay(spec, "c", plan(spec, "c"), d / "work", spark, fresh=True)
            r.batches.to_parquet(d / "batches.parquet")
            r.outputs.to_parquet(d / "outputs.parquet")
            (d / "spark.txt").write_text(pyspark.__version__ + "\n")
    finally:
        spark.stop()


def load(d: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A replayed scenario's (batches, outputs)."""
    return pd.read_parquet(d / "batches.parquet"), pd.read_parquet(d / "outputs.parquet")


if __name__ == "__main__":
    replay_all(Path(sys.argv[1]))
