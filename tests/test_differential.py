"""Prediction == real Spark, on randomized out-of-order streams and candidate configs.

CI runs a bounded, derandomized set of examples per query kind, pace and policy; ``--soak`` runs
many more with random seeds. Every batch-report column except bytes must be equal and the emitted
rows equal row for row.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.differential import (
    commits,
    delays,
    explain_failure,
    join_spec,
    replays,
    run_both,
    single_spec,
    valid_or_none,
)
from tests.soak import SOAK

pytestmark = pytest.mark.spark


def examples(n: int):
    return settings(max_examples=n * 25 if SOAK else n, deadline=None, derandomize=not SOAK,
                    suppress_health_check=list(HealthCheck), database=None)


def strings(data: list[list[dict]], col: str, on: bool) -> list[list[dict]]:
    """``data`` with ``col`` as strings when ``on`` (string keys take numbered key ids,
    keys.with_codes; integer keys packed ones)."""
    return [[{**r, col: f"key-{r[col]}"} for r in c] for c in data] if on else data


def check(spec, tmp, spark) -> None:
    diffs = run_both(spec, "c", tmp, spark)
    if diffs:
        pytest.fail(explain_failure(spec, "c", diffs, tmp, spark))


keys = {"k": st.integers(1, 2), "v": st.integers(0, 9)}
windows = st.sampled_from([{"duration": "5 seconds"}, {"duration": "10 seconds"},
                           {"duration": "10 seconds", "slide": "5 seconds"},
                           {"duration": "10 seconds", "slide": "4 seconds"},
                           {"duration": "10 seconds", "start_time": "3 seconds"}])


sliding = st.sampled_from([{"duration": "10 seconds", "slide": "5 seconds"},
                           {"duration": "10 seconds", "slide": "4 seconds"},
                           {"duration": "3 seconds", "slide": "1 second"},
                           {"duration": "10 seconds", "slide": "4 seconds",
                            "start_time": "-1500 milliseconds"}])
modes = st.sampled_from(["append", "append", "update", "complete"])


def check_aggregation(spark, tmp, pace, data, window, replay, delay, mode, aggregates) -> None:
    spec = single_spec(tmp, "diffagg", {
        "kind": "aggregation", "keys": ["k"], "window": window, "output_mode": mode,
        "aggregates": aggregates}, {**replay, "pace": pace}, delay, data)
    check(spec, tmp, spark)


@pytest.mark.parametrize("pace", ["backlog", "live"])
@examples(4)
@given(data=commits(keys), window=windows, replay=replays, delay=delays, mode=modes)
def test_aggregation(spark, tmp_path_factory, pace, data, window, replay, delay, mode) -> None:
    # without explain, tumbling windows in append and update mode compute every batch at
    # once (whole_run/tumbling.py), sliding windows too, whatever the rows per batch, with
    # path="whole_run" (whole_run/aggregation.py; tests/differential.run_both checks it)
    check_aggregation(spark, tmp_path_factory.mktemp("agg"), pace, data, window, replay,
                      delay, mode,
                      {"n": "count(*)", "s": "sum(v)", "lo": "min(v)", "avg_v": "avg(v)"})


@pytest.mark.parametrize("pace", ["backlog", "live"])
@examples(4)
@given(data=commits({**keys, "x": st.one_of(st.floats(-100, 100, allow_nan=False),
                                             st.just(float("nan")))}),
       window=sliding, replay=replays, delay=delays, mode=modes, text=st.booleans())
def test_sliding_window_sums(spark, tmp_path_factory, pace, data, window, replay, delay,
                             mode, text) -> None:
    # sums, minima and maxima of sliding windows skip grouping the (row, window) pairs
    # (operators/sliding.py; floats pair by pair in row order); with string keys, min(k) (an
    # object min) keeps the pair path. x holds NaN values: counted, summed to NaN, above every
    # other value in max (docs/semantics.md §6)
    data = strings(data, "k", text)
    aggregates = {"n": "count(*)", "s": "sum(v)", "avg_v": "avg(v)", "fs": "sum(x)",
                  "fa": "avg(x)", "hi": "max(x)", "lo": "min(v)", "fc": "count(x)"}
    # path="whole_run" (run_both): append mode without explain computes every batch at once
    # (float sums and maxima folded batch by batch, as the state merges them)
    if text:
        aggregates["first_k"] = "min(k)"
    check_aggregation(spark, tmp_path_factory.mktemp("sliding"), pace, data, window, replay,
                      delay, mode, aggregates)


@pytest.mark.parametrize("pace", ["backlog", "live"])
@examples(4)
@given(data=commits({"id": st.integers(1, 4)}), replay=replays, delay=delays,
       variant=st.sampled_from(["id", "id_ts", "within"]), text=st.booleans())
def test_deduplication(spark, tmp_path_factory, pace, data, replay, delay, variant,
                       text) -> None:
    tmp = tmp_path_factory.mktemp("dedup")
    data = strings(data, "id", text)
    query = {"kind": "deduplication", "keys": ["id", "ts"] if variant == "id_ts" else ["id"],
             "within_watermark": variant == "within"}
    spec = single_spec(tmp, "diffdedup", query, {**replay, "pace": pace}, delay, data)
    check(spec, tmp, spark)


@pytest.mark.parametrize("pace", ["backlog", "live"])
@examples(4)
@given(data=commits(keys), replay=replays, delay=delays,
       gap=st.sampled_from(["3 seconds", "5 seconds"]),
       mode=st.sampled_from(["append", "append", "complete"]), text=st.booleans(),
       runs=st.booleans())
def test_session(spark, tmp_path_factory, pace, data, replay, delay, gap, mode,
                 text, runs) -> None:
    # runs: the predictor's store kept as sorted runs from the first batch (what large stores
    # do; operators/session.py), else rewritten whole (what these small ones do)
    from semantics.operators import session

    tmp = tmp_path_factory.mktemp("session")
    data = strings(data, "k", text)
    spec = single_spec(tmp, "diffsession", {
        "kind": "session", "keys": ["k"], "gap": gap, "output_mode": mode,
        "aggregates": {"n": "count(*)", "s": "sum(v)"}}, {**replay, "pace": pace}, delay, data)
    with pytest.MonkeyPatch.context() as mp:
        if runs:
            mp.setattr(session, "WHOLE", 0)
        check(spec, tmp, spark)


@pytest.mark.parametrize("pace,policy", [("backlog", "min"), ("live", "min"),
                                         ("backlog", "max"), ("live", "max")])
@examples(3)
@given(left=commits({"k": st.integers(1, 2)}, max_commits=3),
       right=commits({"k": st.integers(1, 2)}, max_commits=3),
       order=st.lists(st.booleans(), min_size=6, max_size=6),
       jtype=st.sampled_from(["inner", "left_outer", "right_outer", "full_outer", "left_semi"]),
       lower=st.sampled_from([None, "-5 seconds", "-10 seconds", "0 seconds"]),
       upper=st.sampled_from([None, "0 seconds", "5 seconds"]),
       incl=st.tuples(st.booleans(), st.booleans()),
       ldelay=st.sampled_from([None, "0 seconds", "3 seconds", "10 seconds"]),
       rdelay=st.sampled_from([None, "0 seconds", "3 seconds", "10 seconds"]),
       replay=replays, runs=st.booleans())
def test_join(spark, tmp_path_factory, pace, policy, left, right, order, jtype, lower, upper,
              incl, ldelay, rdelay, replay, runs) -> None:
    # runs: the predictor keeps each side as sorted runs from the first batch (what large
    # states do; operators/join_store.py), else as one run rewritten every batch
    from semantics.operators import join

    assume(lower is not None or upper is not None)
    tmp = tmp_path_factory.mktemp("join")
    tr = {k: v for k, v in (("lower", lower), ("upper", upper)) if v is not None}
    tr.update(lower_inclusive=incl[0], upper_inclusive=incl[1])
    spec = valid_or_none(lambda: join_spec(
        tmp, {"type": jtype, "time_range": tr}, {**replay, "pace": pace}, ldelay, rdelay,
        policy, left, right, order))
    assume(spec is not None)
    with pytest.MonkeyPatch.context() as mp:
        if runs:
            mp.setattr(join, "WHOLE", 0)
        check(spec, tmp, spark)


filtered_replays = st.fixed_dictionaries({
    "batch_by": st.sampled_from([{"commits": 1}, {"commits": 2}, {"rows": 2}, {"files": 1}]),
})


@pytest.mark.parametrize("pace", ["backlog", "live"])
@examples(3)
@given(data=commits({**keys, "f": st.integers(0, 1)}), replay=filtered_replays, delay=delays,
       kind=st.sampled_from(["window", "dedup", "session"]))
def test_a_filter_that_empties_commits(spark, tmp_path_factory, pace, data, replay, delay,
                                       kind) -> None:
    # rule: a commit whose rows the source filter all removes is still read, and Spark runs a
    # batch on it (an empty data tick, tests/test_replay_filter.py); about half of the rows
    # fail ``f = 1`` here, so commits of one or two rows are often emptied
    tmp = tmp_path_factory.mktemp("filtered")
    query = {"window": {"kind": "aggregation", "keys": ["k"],
                        "window": {"duration": "5 seconds"}, "aggregates": {"n": "count(*)"}},
             "dedup": {"kind": "deduplication", "keys": ["k"]},
             "session": {"kind": "session", "keys": ["k"], "gap": "3 seconds",
                         "aggregates": {"n": "count(*)"}}}[kind]
    assume(any(r["f"] == 1 for c in data for r in c))  # (a source must keep a row)
    spec = single_spec(tmp, "difffilter", query, {**replay, "pace": pace}, delay, data,
                       filter="f = 1")
    check(spec, tmp, spark)


@pytest.mark.parametrize("pace", ["backlog", "live"])
@examples(3)
@given(left=commits({"k": st.integers(1, 2), "f": st.integers(0, 1)}, max_commits=3),
       right=commits({"k": st.integers(1, 2), "f": st.integers(0, 1)}, max_commits=3),
       order=st.lists(st.booleans(), min_size=6, max_size=6),
       jtype=st.sampled_from(["inner", "left_outer", "full_outer"]),
       replay=filtered_replays)
def test_a_filter_that_empties_commits_of_a_join(spark, tmp_path_factory, pace, left, right,
                                                 order, jtype, replay) -> None:
    # rule: as above, for commits of either side of a join (time range -5 s .. 0 s)
    assume(any(r["f"] == 1 for c in left for r in c)
           and any(r["f"] == 1 for c in right for r in c))
    tmp = tmp_path_factory.mktemp("filteredjoin")
    spec = join_spec(tmp, {"type": jtype, "time_range": {"lower": "-5 seconds",
                                                        "upper": "0 seconds"}},
                     {**replay, "pace": pace}, "2 seconds", "2 seconds", "min", left, right,
                     order, filter="f = 1")
    check(spec, tmp, spark)
