"""Spark version profiles against real Spark on each release line (semantics/profiles.py).

For each pyspark release below, its own environment is made (``jobs.spark_envs``: cached in
``.venvs/``, from the package registry on first use), a set of join scenarios
(``tests/profile_scenarios.py``) is replayed there in a subprocess, and the predictor under that
release's profile must reproduce every batch-report figure and every emitted row exactly
(explained and whole-run paths). Where the release's rules differ from Spark 4.0's, some
scenario must also *differ* from the ``4.0`` profile's prediction: the profile's switch is what
makes it pass.

``test_spark_suite_scenarios`` does the same with Spark's own StreamingJoinSuite scenarios
(``tests/profile_scenarios.py`` SPARK_SUITE) on 4.0.5 and 4.3.0: CI replays on 4.3.0 the three
left semi scenarios, one inner and one of each outer type (:data:`SUITE_CI`); ``--soak`` every
scenario in every join type, on 4.0.5 and 4.1.4 too.

CI replays a few scenarios on 3.5.3 (profile ``3.5.0``) here and Spark's suite scenarios on
4.3.0 (profile ``4.2``) below: one test on each line whose rules differ (the default 4.0.5 runs
the whole differential suite in-process); ``--soak`` replays every join type of six seeds on
those two and on the newest 3.5.x and 4.1.x.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from jobs import spark_envs
from semantics.compare import compare_outputs, compare_reports
from semantics.history import plan
from semantics.predict import predict
from semantics.profiles import profile_name
from semantics.spec import load_spec
from tests.profile_scenarios import JOIN_TYPES, SPARK_SUITE, load, make_set, spark_suite, write
from tests.soak import SOAK

pytestmark = pytest.mark.spark

# release -> the scenarios replayed in CI ((join type, seed); chosen where the release's rules
# show: tests/profile_scenarios.py draws them) and whether its rules differ from 4.0's
CI = {
    # before SPARK-49829: an outer row at or behind its state watermark loses its null row
    # (full outer 0: right side, 2: left side), inner rows are not stored
    "3.5.3": ([("full_outer", 0), ("full_outer", 2), ("inner", 3)], True),
}
# release -> whether its rules differ from 4.0's. 4.3.0 (left semi: right side first, matched
# left rows removed at once; removals all counted): in CI by test_spark_suite_scenarios
SOAK_ONLY = {"4.3.0": True, "3.5": False, "4.1": False}


def _cases() -> list[pytest.param]:
    out = [pytest.param(v, id=v) for v in CI]
    out += [pytest.param(v, id=v, marks=pytest.mark.skipif(not SOAK, reason="--soak only"))
            for v in SOAK_ONLY]
    return out


def _differs(release: str) -> bool:
    return CI[release][1] if release in CI else SOAK_ONLY[release]


def _replay_under(version: str, folder: Path) -> str:
    """Replay every scenario of ``folder`` under pyspark ``version``; its exact version."""
    py = spark_envs.python_for(version)
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "PYSPARK_PYTHON": str(py)}
    done = subprocess.run([str(py), "-m", "tests.profile_scenarios", str(folder)], env=env,
                          cwd=root, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    versions = {(d / "spark.txt").read_text().strip() for d in folder.iterdir()}
    assert len(versions) == 1, versions
    return versions.pop()


def _diffs(d: Path, version: str, explain: bool) -> list[str]:
    spec = load_spec(d / "spec.yaml")
    spec = spec.model_copy(update={"spark_version": version})
    batches, outputs = load(d)
    p = predict(plan(spec, "c"), spec, "c", explain=explain)
    assert p.info["spark_profile"] == profile_name(version)
    return [x.message for x in compare_reports(p.batches, batches)
            + compare_outputs(p.outputs, outputs)]


@pytest.mark.parametrize("release", _cases())
def test_profile_predicts_the_release(tmp_path, release):
    differs = _differs(release)
    if SOAK or release not in CI:
        scenarios = make_set(tmp_path, range(6), JOIN_TYPES)
    else:
        picked = CI[release][0]
        scenarios = [d for t, s in picked for d in make_set(tmp_path, range(s, s + 1), (t,))]
        assert len(scenarios) == len(picked)
    ran = _replay_under(release, tmp_path)
    assert spark_envs._line(ran) == spark_envs._line(release if release.count(".") == 2
                                                      else release + ".0")
    failures, apart = [], 0
    for d in scenarios:
        for explain in (True, False):
            diffs = _diffs(d, ran, explain)
            if diffs:
                failures.append(f"{d.name} (explain={explain}): " + "; ".join(diffs[:6]))
        apart += bool(_diffs(d, "4.0", True))
    assert not failures, f"profile {profile_name(ran)} vs pyspark {ran}:\n" + "\n".join(failures)
    # the release's own rules are what match: Spark 4.0's would not
    assert (apart > 0) == differs, f"{apart} scenarios differ from the 4.0 profile"


# the left semi rows Spark's suite expects (key, seconds: the left time, or the window end)
SUITE_LEFT_SEMI = {"range": [(1, 5.0), (1, 7.0)],
                   "self": [(i, float(i)) for i in (2, 4, 6, 8, 10, 12, 14)],
                   "window": [(3, 10.0), (4, 10.0), (5, 10.0), (22, 30.0)]}


# (scenario, join type) replayed in CI: every left semi scenario (the suite's rows below) and,
# among the others, an inner join (the 4.0 profile matches it) and each outer type (it does not)
SUITE_CI = {(n, "left_semi") for n in SPARK_SUITE} | {
    ("range", "inner"), ("range", "left_outer"), ("self", "full_outer"),
    ("window", "right_outer")}


@pytest.mark.parametrize("release", [
    "4.3.0",  # (4.0.5: the default suite's rules; its replay here only under --soak)
    pytest.param("4.0.5", marks=pytest.mark.skipif(not SOAK, reason="--soak only")),
    pytest.param("4.1.4", marks=pytest.mark.skipif(not SOAK, reason="--soak only"))])
def test_spark_suite_scenarios(tmp_path, release):
    """Spark's own join scenarios (StreamingJoinSuite's left semi and outer suites, a range
    condition, a self join and a window key; tests/profile_scenarios.py SPARK_SUITE) in every
    join type: the release's profile
    predicts what that pyspark reports, batch by batch and row by row; the left semi rows are
    the suite's; on 4.3.0 the ``4.0`` profile misses every left semi and outer scenario (state
    rows, rows removed), on 4.0.5 none. CI: the pairs of :data:`SUITE_CI` only."""
    dirs = {(n, t): write(tmp_path / f"{n}-{t}", spark_suite(t, n)).parent
            for n in SPARK_SUITE for t in JOIN_TYPES if SOAK or (n, t) in SUITE_CI}
    ran = _replay_under(release, tmp_path)
    assert ran == release
    failures = [f"{n} {t} (explain={e}): " + "; ".join(diffs[:6])
                for (n, t), d in dirs.items() for e in (True, False)
                if (diffs := _diffs(d, ran, e))]
    assert not failures, f"profile {profile_name(ran)} vs pyspark {ran}:\n" + "\n".join(failures)
    for name in SPARK_SUITE:
        _, outputs = load(dirs[(name, "left_semi")])
        time = outputs["left_window_end" if name == "window" else "left_ts"]
        got = sorted((int(k), t.timestamp())
                     for k, t in zip(outputs["left_k"], time, strict=True))
        assert got == SUITE_LEFT_SEMI[name], name
    apart = {d.name for d in dirs.values() if _diffs(d, "4.0", True)}
    # 4.2: left semi state (SPARK-55973) and the outer joins' removal counts; inner: none
    want = ({d.name for (n, t), d in dirs.items() if t != "inner"}
            if profile_name(ran) == "4.2" else set())
    assert apart == want, apart
