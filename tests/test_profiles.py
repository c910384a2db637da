"""Spark version profiles without Spark: which release maps to which profile, the spec field,
its errors, and the rules each switch changes on scenarios whose figures real Spark gave
(tests/test_profiles_spark.py replays them on each release)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from jobs.cli import main
from semantics.errors import SpecError
from semantics.history import plan
from semantics.predict import predict
from semantics.profiles import PROFILES, installed_profile, profile_for, profile_name
from semantics.spec import load_spec, parse_spec
from tests.profile_scenarios import draw, spark_suite, write


@pytest.mark.parametrize("version,profile", [
    ("3.5.0", "3.5.0"), ("3.5.3", "3.5.0"), ("3.5.4", "3.5"), ("3.5.9", "3.5"), ("3.5", "3.5"),
    ("3.5.1-amzn-0", "3.5.0"), ("4.0", "4.0"), ("4.0.5", "4.0"), ("4.1.4", "4.0"),
    ("4.1", "4.0"), ("4.2.0", "4.2"), ("4.3.0", "4.2"), ("4.3", "4.2"),
])
def test_release_to_profile(version, profile):
    assert profile_name(version) == profile
    assert profile_for(version) is PROFILES[profile]


@pytest.mark.parametrize("version", ["3.4", "3.4.4", "2.4.8", "5.0", "4.4.0", "latest", "4"])
def test_unmodelled_release_is_refused(version):
    with pytest.raises(ValueError, match="a Spark release the predictor has a profile for"):
        profile_for(version)


def test_default_is_the_installed_pyspark():
    assert installed_profile() == "4.0"  # the pinned 4.0.5
    assert profile_for(None).name == "4.0"
    assert PROFILES["4.0"].reference_rules and PROFILES["3.5"].reference_rules
    assert not PROFILES["3.5.0"].reference_rules and not PROFILES["4.2"].reference_rules


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Path:
    """A full outer join whose left row (k 1, ts 28) arrives at or behind the left state
    watermark in batch 1: pyspark 3.5.3 neither stores it nor emits its null row there, 3.5.4+
    and 4.x do (tests/test_profiles_spark.py replays this scenario on each)."""
    spec = write(tmp_path_factory.mktemp("p") / "full_outer-2", draw(2, "full_outer"))
    assert spec is not None
    return spec


def _spec_dict(spec_file: Path) -> dict:
    return json.loads(spec_file.read_text())


def test_spark_version_top_level_and_per_candidate(scenario):
    d = _spec_dict(scenario)
    d["spark_version"] = 3.5  # a YAML number: the text written
    d["candidates"]["new"] = {**d["candidates"]["c"], "spark_version": "4.3.0"}
    spec = parse_spec(d, str(scenario))
    assert spec.spark_version_of("c") == "3.5" and spec.spark_version_of("new") == "4.3.0"


@pytest.mark.parametrize("where", ["top", "candidate"])
def test_unmodelled_spark_version_is_a_spec_error(scenario, where):
    d = _spec_dict(scenario)
    if where == "top":
        d["spark_version"] = "3.4.1"
    else:
        d["candidates"]["c"]["spark_version"] = "3.4.1"
    with pytest.raises(SpecError) as err:
        parse_spec(d, str(scenario))
    assert err.value.field == ("spark_version" if where == "top"
                               else "candidates.c.spark_version")
    assert "3.4.1" in err.value.expected and "3.5.x" in err.value.expected


def _predicted(spec_file: Path, version: str | None, explain: bool = True):
    spec = load_spec(spec_file)
    spec = spec.model_copy(update={"spark_version": version})
    return predict(plan(spec, "c"), spec, "c", explain=explain)


@pytest.mark.parametrize("explain", [True, False])
def test_before_spark_49829_evictable_inputs_are_not_stored(scenario, explain):
    # batch 1 as pyspark 4.0.5 and 3.5.3 reported it (tests/test_profiles_spark.py)
    new, old = _predicted(scenario, "4.0", explain), _predicted(scenario, "3.5.3", explain)
    cols = ["state_rows_updated", "output_rows"]
    assert new.batches.loc[1, cols].tolist() == [3, 4]
    assert old.batches.loc[1, cols].tolist() == [2, 3]
    assert new.info["spark_profile"] == "4.0" and old.info["spark_profile"] == "3.5.0"
    # the row lost: left (k 1, ts 28) with its null-padded right side
    lost = new.outputs.merge(old.outputs, how="left", indicator=True)
    lost = lost[lost["_merge"] == "left_only"]
    assert len(lost) == 1 and lost["right_row_id"].isna().all()
    if explain:
        note = old.fates.query("fate == 'not_stored'")
        assert note["detail"].str.contains("SPARK-49829").any()
    # 3.5.4 and later: Spark 4.0's rules (checkpoint bytes aside: a 3.5 profile's checkpoint
    # layout is not modelled, so they are left empty there)
    same = _predicted(scenario, "3.5.4", explain)
    assert same.batches["checkpoint_bytes"].isna().all()
    pd.testing.assert_frame_equal(same.batches.drop(columns="checkpoint_bytes"),
                                  new.batches.drop(columns="checkpoint_bytes"))
    pd.testing.assert_frame_equal(same.outputs, new.outputs)


def test_cli_reports_the_profile_and_refuses_unknown_ones(scenario, capsys, monkeypatch):
    monkeypatch.chdir(scenario.parent)
    assert main(["predict", str(scenario), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["candidates"][0]["predicted"]["info"]["spark_profile"] == "4.0"
    d = _spec_dict(scenario)
    d["spark_version"] = "3.3"
    bad = scenario.with_name("bad.yaml")
    bad.write_text(json.dumps(d))
    assert main(["predict", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml: spark_version: a Spark release the predictor has a profile for" in err
    assert "Traceback" not in err
    assert main(["replay", str(scenario), "--spark", "3.4"]) == 2
    err = capsys.readouterr().err
    assert "--spark:" in err and "3.4" in err and "Traceback" not in err


def test_backtest_predicts_for_the_session_spark(scenario):
    # `--master` on a cluster: its spark.version picks the profile unless the spec pins one
    from jobs.backtest import replay_version

    spec = load_spec(scenario)
    assert replay_version(spec, "3.5.2", "spark://h:7077").spark_version == "3.5.2"
    pinned = spec.model_copy(update={"spark_version": "4.3"})
    assert replay_version(pinned, "3.5.2", None) is pinned
    with pytest.raises(SpecError, match="spark://h:7077 is 3.3.0"):
        replay_version(spec, "3.3.0", "spark://h:7077")


def _figures(spec_file: Path, version: str, explain: bool) -> list[list[int]]:
    cols = ["batch_id", "state_rows", "state_rows_updated", "state_rows_removed", "output_rows"]
    return _predicted(spec_file, version, explain).batches[cols].to_numpy().tolist()


# (join type, seed of tests/profile_scenarios.draw) -> per batch (batch, state rows, updated,
# removed, output rows) as pyspark 4.0.5 and 4.3.0 reported them (tests/test_profiles_spark.py)
SPARK_4_2 = {
    # a left semi join's right rows match left rows stored earlier: emitted and removed at once
    ("left_semi", 1): ([[0, 1, 1, 0, 0], [1, 2, 1, 0, 0], [2, 2, 0, 0, 0], [3, 5, 3, 0, 1]],
                       [[0, 1, 1, 0, 0], [1, 2, 1, 0, 0], [2, 2, 0, 0, 0], [3, 4, 3, 1, 1]]),
    # full outer: 4.0 counts no removal, 4.2 every evicted row
    ("full_outer", 0): ([[0, 2, 2, 0, 0], [1, 2, 2, 0, 2], [2, 1, 1, 0, 2]],
                        [[0, 2, 2, 0, 0], [1, 2, 2, 2, 2], [2, 1, 1, 2, 2]]),
}


@pytest.mark.parametrize("case", sorted(SPARK_4_2))
@pytest.mark.parametrize("explain", [True, False])
def test_spark_4_2_left_semi_and_removal_counts(tmp_path, case, explain):
    spec_file = write(tmp_path / "s", draw(case[1], case[0]))
    assert spec_file is not None
    spark_4_0, spark_4_3 = SPARK_4_2[case]
    assert _figures(spec_file, "4.0.5", explain) == spark_4_0
    assert _figures(spec_file, "4.3.0", explain) == spark_4_3
    assert _figures(spec_file, "4.1", explain) == spark_4_0


def test_predict_over_versions_shows_what_an_upgrade_changes(tmp_path, capsys, monkeypatch):
    # `wmbt predict SPEC --spark-version 3.5.3,4.0,4.3`: one prediction per release's profile
    spec_file = write(tmp_path / "s", draw(0, "full_outer"))
    monkeypatch.chdir(tmp_path)
    assert main(["predict", str(spec_file), "--spark-version", "3.5.3,4.0,4.3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    got = {d["spark_version"]: d for d in doc["versions"]}
    assert [got[v]["spark_profile"] for v in ("3.5.3", "4.0", "4.3")] == ["3.5.0", "4.0", "4.2"]
    outputs = {v: sum(b["output_rows"] for b in got[v]["candidates"][0]["predicted"]["batches"])
               for v in got}
    assert outputs["3.5.3"] == outputs["4.0"] - 1  # the null row 3.5.3 never emits
    assert main(["predict", str(spec_file), "--spark-version", "3.5,4.0"]) == 0
    out = capsys.readouterr().out
    assert "[Spark 3.5: profile 3.5]" in out and "[Spark 4.0: profile 4.0]" in out
    assert main(["predict", str(spec_file), "--spark-version", "4.0,3.4"]) == 2
    assert "--spark-version: a Spark release the predictor has a profile for" in \
        capsys.readouterr().err


# Spark's own range-condition scenario (tests/profile_scenarios.py SPARK_SUITE["range"]) by join
# type -> per batch figures as above, as pyspark 4.0.5 and 4.3.0 reported them
SUITE_4_2 = {
    # the suite's left semi: (1, 5) leaves the state in batch 1 on 4.3, (1, 7) is never stored
    "left_semi": ([[0, 2, 2, 0, 0], [1, 4, 2, 0, 1], [2, 5, 1, 0, 0], [3, 6, 1, 0, 1],
                   [4, 7, 1, 0, 0], [5, 2, 0, 5, 0]],
                  [[0, 2, 2, 0, 0], [1, 3, 2, 1, 1], [2, 4, 1, 0, 0], [3, 5, 1, 0, 1],
                   [4, 6, 1, 0, 0], [5, 2, 0, 4, 0]]),
    "full_outer": ([[0, 2, 2, 0, 0], [1, 4, 2, 0, 1], [2, 5, 1, 0, 1], [3, 7, 2, 0, 2],
                    [4, 8, 1, 0, 0], [5, 2, 0, 0, 2]],
                   [[0, 2, 2, 0, 0], [1, 4, 2, 0, 1], [2, 5, 1, 0, 1], [3, 7, 2, 0, 2],
                    [4, 8, 1, 0, 0], [5, 2, 0, 6, 2]]),
}


@pytest.mark.parametrize("jtype", sorted(SUITE_4_2))
@pytest.mark.parametrize("explain", [True, False])
def test_spark_suite_range_condition_figures(tmp_path, jtype, explain):
    spec_file = write(tmp_path / "s", spark_suite(jtype, "range"))
    assert spec_file is not None
    spark_4_0, spark_4_3 = SUITE_4_2[jtype]
    assert _figures(spec_file, "4.0.5", explain) == spark_4_0
    assert _figures(spec_file, "4.3.0", explain) == spark_4_3
