"""``replay.restarts`` and ``after_restart`` (SPEC.md §1.3): bad ones are clear exit-2 errors
naming the field; the predictor's plan across a restart (docs/semantics.md §2.7), without
Spark (tests/test_restarts.py compares it with Spark)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from semantics.errors import SpecError
from semantics.history import plan
from semantics.predict import predict
from semantics.restarts import switched
from semantics.spec import parse_spec
from tests.deltas import write_commits

WMBT = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "wmbt"


def spec_dict(tmp: Path, replay: dict | None = None, **candidate: object) -> dict:
    if not (tmp / "events").exists():
        write_commits(tmp / "events", [[{"k": 1, "ts": 10}], [{"k": 1, "ts": 30}],
                                       [{"k": 1, "ts": 35}]])
    return {
        "name": "r",
        "sources": {"events": {"table": str(tmp / "events"), "event_time": "ts"}},
        "query": {"kind": "aggregation", "source": "events",
                  "window": {"duration": "5 seconds"}},
        "replay": {"batch_by": {"commits": 1}, **(replay or {})},
        "candidates": {"c": {"watermark": {"events": "10 seconds"}, **candidate}},
    }


@pytest.mark.parametrize(("replay", "candidate", "field", "words"), [
    ({"restarts": [-1]}, {}, "replay.restarts", "tick numbers >= 0"),
    ({"restarts": [2, 1]}, {}, "replay.restarts", "increasing order"),
    ({"restarts": [1, 1]}, {}, "replay.restarts", "distinct"),
    ({"restarts": "1"}, {}, "replay.restarts", "tuple"),
    ({}, {"after_restart": {"watermark": {"events": "1 second"}}},
     "candidates.c.after_restart", "replay.restarts"),
    ({"restarts": [0]}, {"after_restart": {"watermark": {}}},
     "candidates.c.after_restart.watermark", "same sources"),
    ({"restarts": [0]}, {"after_restart": {"watermark": {"events": "1 second"},
                                           "batch_by": {"rows": 2}}},
     "candidates.c.after_restart.batch_by", "cut once"),
    ({"restarts": [0]}, {"after_restart": {"watermark": {"events": "1 second"},
                                           "after_restart": {}}},
     "candidates.c.after_restart.after_restart", "once"),
    ({"restarts": [0]}, {"after_restart": {"watermark": {"events": "1 second"},
                                           "spark_conf": {"spark.sql.streaming.foo": 1}}},
     "candidates.c.after_restart.spark_conf.spark.sql.streaming.foo", "models"),
    ({"restarts": [0]}, {"after_restart": {"delay": "1 second"}},
     "candidates.c.after_restart.delay", "unknown field"),
])
def test_bad_restarts_are_spec_errors(tmp_path: Path, replay: dict, candidate: dict,
                                      field: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(spec_dict(tmp_path, replay, **candidate), "spec.yaml")
    assert err.value.field == field and words in str(err.value), str(err.value)


@pytest.mark.parametrize(("pace", "restarts", "words"), [
    ("backlog", [4], "0 .. 3"),  # 3 data ticks and the trailing idle one
    ("live", [2], "idle ticks at pace live"),
])
def test_restart_ticks_must_fit_the_schedule(tmp_path: Path, pace: str, restarts: list[int],
                                             words: str) -> None:
    spec = parse_spec(spec_dict(tmp_path, {"pace": pace, "restarts": restarts}), "spec.yaml")
    with pytest.raises(SpecError) as err:
        plan(spec, "c")
    assert err.value.field == "replay.restarts" and words in str(err.value), str(err.value)


def test_cli_exits_2_naming_the_field(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec_dict(tmp_path, {"restarts": [9]})))
    proc = subprocess.run([str(WMBT), "predict", "spec.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "replay.restarts" in proc.stderr and "Traceback" not in proc.stderr


def test_plan_across_a_restart(tmp_path: Path) -> None:
    """Backlog, restart after tick 0 switching 10 s -> 2 s: batch 1 runs with the restored
    watermark (0), the new delay counts from its rows on (30 - 2 = 28 for batch 2), and the
    restart after the last data tick leaves the trailing idle tick without its no-data batch."""
    d = spec_dict(tmp_path, {"restarts": [0, 2]},
                  after_restart={"watermark": {"events": "2 seconds"}})
    spec = parse_spec(d, "spec.yaml")
    p = predict(plan(spec, "c"), spec, "c")
    assert p.batches["watermark_ms"].tolist() == [0, 0, 28000]
    assert p.batches["tick"].tolist() == [0, 1, 2]  # (tick 3: no batch after the restart)
    assert p.info["restarts"] == [{"after_tick": 0, "first_batch": 1},
                                  {"after_tick": 2, "first_batch": None}]
    once = parse_spec({**d, "replay": {"batch_by": {"commits": 1}, "restarts": [0]}},
                      "spec.yaml")  # (35 - 2 = 33 > 28: the trailing no-data batch runs)
    assert predict(plan(once, "c"), once, "c").batches["watermark_ms"].tolist() == \
        [0, 0, 28000, 33000]


def test_settings_the_checkpoint_holds_stay(tmp_path: Path) -> None:
    d = spec_dict(tmp_path, {"restarts": [0]}, spark_conf={"spark.sql.shuffle.partitions": 3},
                  after_restart={"watermark": {"events": "10 seconds"}, "policy": "max",
                                 "spark_conf": {"spark.sql.shuffle.partitions": 7,
                                                "spark.sql.streaming.noDataMicroBatches."
                                                "enabled": False}})
    spec = parse_spec(d, "spec.yaml")
    conf = switched(spec, "c").conf("c")
    assert conf["spark.sql.shuffle.partitions"] == "3"
    assert conf["spark.sql.streaming.multipleWatermarkPolicy"] == "min"
    assert conf["spark.sql.streaming.noDataMicroBatches.enabled"] == "false"
    ignored = predict(plan(spec, "c"), spec, "c").info["switch"]["ignored"]
    assert len(ignored) == 2 and all("checkpoint" in w for w in ignored)


def test_within_watermark_dedup_delay_switch_is_refused(tmp_path: Path) -> None:
    d = spec_dict(tmp_path, {"restarts": [0]},
                  after_restart={"watermark": {"events": "2 seconds"}})
    d["query"] = {"kind": "deduplication", "source": "events", "keys": ["k"],
                  "within_watermark": True}
    spec = parse_spec(d, "spec.yaml")
    with pytest.raises(SpecError) as err:
        predict(plan(spec, "c"), spec, "c")
    assert err.value.field == "candidates.c.after_restart.watermark"
