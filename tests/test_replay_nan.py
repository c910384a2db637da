"""A float NaN and a SQL NULL, on real Spark: the Delta table holds both, the schedule and the
replay keep them apart (Spark reads what a production job reads from the table), and the
predictor follows Spark 4.0's rules for NaN. Every test checks Spark's rows against the rule
by hand, then the prediction against Spark (report and emitted rows).

Rules (checked on Spark 4.0.5; ``NormalizeFloatingNumbers``, ``SQLOrderingUtil.compareDoubles``):
* grouping keys (windows, sessions) and join keys are normalized: every NaN is one value
  (emitted as NaN), distinct from NULL; ``-0.0`` is ``0.0``;
* deduplication keys are not normalized: the state compares the key's bytes, so two NaN of
  other bit patterns are two keys, and so are ``-0.0`` and ``0.0``;
* ``count(col)`` counts a NaN; ``sum``/``avg`` of a group holding a NaN are NaN; NaN orders above
  every other value: ``max`` is NaN once a group holds one, ``min`` only when all values are;
* a stream-stream join matches NaN with NaN; a NULL key matches a NULL key on a side where the
  optimizer infers no ``isnotnull`` (full outer: both sides), else it never joins;
* the source filter: NaN is larger than any other number.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from semantics.compare import compare_outputs
from semantics.history import plan
from semantics.predict import predict
from semantics.report import RunResult
from semantics.spec import parse_spec
from tests.deltas import ts
from tests.predict_kit import NEG_NAN, cell
from tests.replay_support import make_spec, run, table, write_sources

pytestmark = pytest.mark.spark

NAN = float("nan")


def both(spark, spec, workdir) -> tuple[RunResult, RunResult]:
    """Spark's run and the prediction of ``spec``; the prediction must match Spark's report and
    emitted rows (NaN == NaN, NULL == NULL, NaN != NULL)."""
    r = run(spark, spec, workdir)
    p = predict(plan(spec, "c"), spec, "c")
    assert table(p) == table(r)
    assert [d.message for d in compare_outputs(p.outputs, r.outputs)] == []
    return r, p


def cells(result: RunResult, cols: list[str]) -> list[tuple]:
    """Emitted rows (``cols``) as sorted tuples: a NaN as ``"NaN"``, a NULL as None, timestamps
    as seconds."""
    out = []
    for rec in result.outputs[cols].itertuples(index=False):
        row = []
        for v in rec:
            row.append((v - ts(0)).total_seconds() if isinstance(v, pd.Timestamp) else cell(v))
        out.append(tuple(row))
    return sorted(out, key=repr)


KEYED = [("e", [{"ts": 1, "k": NEG_NAN}, {"ts": 2, "k": NAN}, {"ts": 3, "k": None},
                {"ts": 4, "k": None}, {"ts": 5, "k": 1.5}, {"ts": 6, "k": NAN},
                {"ts": 7, "k": -0.0}, {"ts": 8, "k": 0.0}]),
         ("e", [{"ts": 40, "k": 1.5}])]


def test_a_nan_key_is_one_group_apart_from_null_in_windows(spark, tmp_path):
    # rule: grouping keys are normalized (NormalizeFloatingNumbers): every NaN is one group,
    # emitted as NaN; NULL is another group; -0.0 groups with 0.0
    query = {"kind": "aggregation", "source": "e", "keys": ["k"],
             "window": {"duration": "10 seconds"},
             "aggregates": {"n": "count(*)", "c": "count(k)"}}
    r, p = both(spark, make_spec(tmp_path / "src", KEYED, query, {"e": "5 seconds"}),
                tmp_path / "work")
    assert cells(r, ["window_start", "k", "n", "c"]) == sorted([
        (0.0, 0.0, 2, 2), (0.0, 1.5, 1, 1), (0.0, None, 2, 0), (0.0, "NaN", 3, 3)], key=repr)
    for result in (r, p):  # the group's key is normalized: Spark's NaN, +0.0 (first: -NaN)
        k = result.outputs["k"].to_numpy(dtype=np.float64, na_value=1.0)
        assert {hex(b) for b in k[(k == 0) | np.isnan(k)].view(np.uint64)} == {
            "0x0", "0x7ff8000000000000"}


def test_a_nan_key_is_one_group_apart_from_null_in_sessions(spark, tmp_path):
    # rule: session keys are grouping keys: every NaN one session key, NULL another
    query = {"kind": "session", "source": "e", "keys": ["k"], "gap": "5 seconds",
             "aggregates": {"n": "count(*)"}}
    r, _ = both(spark, make_spec(tmp_path / "src", KEYED, query, {"e": "5 seconds"}),
                tmp_path / "work")
    assert cells(r, ["k", "session_start", "session_end", "n"]) == sorted([
        (0.0, 7.0, 13.0, 2), (1.5, 5.0, 10.0, 1), (None, 3.0, 9.0, 2), ("NaN", 1.0, 11.0, 3)],
        key=repr)


@pytest.mark.parametrize("within", [False, True])
def test_deduplication_keys_are_the_float_bits(spark, tmp_path, within):
    # rule: dropDuplicates(WithinWatermark) keys are not normalized (the state compares the
    # key's UnsafeRow bytes): NaN and -NaN (0.0 / 0.0 on x86) are two keys, so are -0.0 and 0.0;
    # a NULL key is one key; the rows come out as read (-0.0 stays -0.0)
    query = {"kind": "deduplication", "source": "e", "keys": ["k"], "within_watermark": within}
    r, _ = both(spark, make_spec(tmp_path / "src", KEYED, query, {"e": "50 seconds"}),
                tmp_path / "work")
    got = r.outputs.sort_values("row_id")
    assert got["row_id"].tolist() == [0, 1, 2, 4, 6, 7]  # row 3: NULL again, 5: NaN again
    bits = got["k"].to_numpy(dtype=np.float64, na_value=0.0).view(np.uint64)
    assert got["k"].isna().tolist() == [False, False, True, False, False, False]
    assert [hex(b) for b in bits[[0, 1, 4]]] == ["0xfff8000000000000", "0x7ff8000000000000",
                                                 "0x8000000000000000"]


@pytest.mark.parametrize("jtype", ["full_outer", "left_outer"])
def test_a_join_matches_nan_with_nan_and_null_as_spark_does(spark, tmp_path, jtype):
    # rule: join keys are normalized: NaN (any bit pattern) matches NaN, -0.0 matches 0.0;
    # NULL never equals NULL in SQL, but where the optimizer infers no isnotnull(key) (full
    # outer: neither side) the stream-stream join's state keys match NULL with NULL; a left
    # outer join filters the right side's NULL keys (isnotnull) and pads the left NULL row
    # when it is evicted
    commits = [("l", [{"ts": 1, "k": NAN}, {"ts": 2, "k": None}, {"ts": 3, "k": -0.0},
                      {"ts": 4, "k": 2.0}, {"ts": 5, "k": NEG_NAN}]),
               ("r", [{"ts": 1, "k": NEG_NAN}, {"ts": 2, "k": None}, {"ts": 3, "k": 0.0},
                      {"ts": 4, "k": 3.0}]),
               ("l", [{"ts": 60, "k": 9.0}]), ("r", [{"ts": 60, "k": 8.0}])]
    query = {"kind": "join", "type": jtype, "left": "l", "right": "r", "keys": ["k"],
             "time_range": {"lower": "-10 seconds", "upper": "10 seconds"}}
    spec = make_spec(tmp_path / "src", commits, query, {"l": "5 seconds", "r": "5 seconds"})
    r, _ = both(spark, spec, tmp_path / "work")
    pairs = cells(r, ["l_ts", "l_k", "r_ts", "r_k"])
    matched = [(1.0, "NaN", 1.0, "NaN"), (3.0, -0.0, 3.0, 0.0), (5.0, "NaN", 1.0, "NaN")]
    padded_l = [(4.0, 2.0, None, None)]
    if jtype == "full_outer":
        want = [*matched, (2.0, None, 2.0, None), *padded_l, (None, None, 4.0, 3.0)]
    else:
        want = [*matched, (2.0, None, None, None), *padded_l]
    assert pairs == sorted(want, key=repr)


AGGREGATES = {"n": "count(*)", "c": "count(x)", "s": "sum(x)", "a": "avg(x)", "lo": "min(x)",
              "hi": "max(x)"}
VALUES = [("e", [{"ts": 1, "g": 1, "x": NAN}, {"ts": 2, "g": 1, "x": 3.0},
                 {"ts": 3, "g": 1, "x": None},                          # NaN, 3, NULL
                 {"ts": 1, "g": 2, "x": None}, {"ts": 2, "g": 2, "x": None},   # NULLs only
                 {"ts": 1, "g": 3, "x": NAN}, {"ts": 2, "g": 3, "x": NEG_NAN},  # NaN only
                 {"ts": 1, "g": 4, "x": NAN}, {"ts": 2, "g": 4, "x": None},     # NaN, NULL
                 {"ts": 1, "g": 5, "x": -1.0}, {"ts": 2, "g": 5, "x": float("inf")},
                 {"ts": 3, "g": 5, "x": NAN},                                   # -1, inf, NaN
                 {"ts": 1, "g": 6, "x": 1.0}, {"ts": 2, "g": 6, "x": 2.0},     # numbers
                 {"ts": 1, "g": 7, "x": NAN}, {"ts": 1, "g": 8, "x": 2.0},
                 {"ts": 1, "g": 10, "x": None}]),                               # NULL only
          ("e", [{"ts": 4, "g": 1, "x": 0.5}, {"ts": 2, "g": 7, "x": 2.0},  # merged with state
                 {"ts": 2, "g": 8, "x": NAN}, {"ts": 3, "g": 2, "x": 4.0}]),
          ("e", [{"ts": 30, "g": 9, "x": 1.0}])]


def test_aggregates_of_nan_and_null_values(spark, tmp_path):
    # rule: count(x) counts NaN and not NULL; sum/avg of a group with a NaN are NaN (of NULLs
    # only: NULL); NaN is above every other value: max is NaN once a group holds one, min
    # skips it unless every value is NaN; the same when a batch's group merges with the state
    query = {"kind": "aggregation", "source": "e", "keys": ["g"], "output_mode": "update",
             "window": {"duration": "10 seconds"}, "aggregates": AGGREGATES}
    r, _ = both(spark, make_spec(tmp_path / "src", VALUES, query, {"e": "5 seconds"}),
                tmp_path / "work")
    assert cells(r, ["batch_id", "g", *AGGREGATES]) == sorted([
        # batch, g, count(*), count(x), sum, avg, min, max
        (0, 1, 3, 2, "NaN", "NaN", 3.0, "NaN"), (0, 2, 2, 0, None, None, None, None),
        (0, 3, 2, 2, "NaN", "NaN", "NaN", "NaN"), (0, 4, 2, 1, "NaN", "NaN", "NaN", "NaN"),
        (0, 5, 3, 3, "NaN", "NaN", -1.0, "NaN"), (0, 6, 2, 2, 3.0, 1.5, 1.0, 2.0),
        (0, 7, 1, 1, "NaN", "NaN", "NaN", "NaN"), (0, 8, 1, 1, 2.0, 2.0, 2.0, 2.0),
        (0, 10, 1, 0, None, None, None, None),
        # batch 1 updates: g1 + 0.5, g7 NaN + 2.0, g8 2.0 + NaN, g2 NULLs + 4.0
        (1, 1, 4, 3, "NaN", "NaN", 0.5, "NaN"), (1, 7, 2, 2, "NaN", "NaN", 2.0, "NaN"),
        (1, 8, 2, 2, "NaN", "NaN", 2.0, "NaN"), (1, 2, 3, 1, 4.0, 4.0, 4.0, 4.0),
        (2, 9, 1, 1, 1.0, 1.0, 1.0, 1.0)], key=repr)


@pytest.mark.parametrize("kind", ["sliding", "session"])
def test_aggregates_of_nan_and_null_values_in_sliding_windows_and_sessions(spark, tmp_path,
                                                                          kind):
    # rule: the same rules where a row counts in several windows (the sliding-window grid,
    # values pair by pair) and where sessions merge: Spark's rows must hold NaN and NULL
    # results, and the prediction must match them
    query = {"kind": "aggregation", "source": "e", "keys": ["g"],
             "window": {"duration": "10 seconds", "slide": "2 seconds"},
             "aggregates": AGGREGATES} if kind == "sliding" else \
        {"kind": "session", "source": "e", "keys": ["g"], "gap": "3 seconds",
         "aggregates": AGGREGATES}
    r, _ = both(spark, make_spec(tmp_path / "src", VALUES, query, {"e": "5 seconds"}),
                tmp_path / "work")
    for c in ("s", "a", "lo", "hi"):
        values = r.outputs[c]
        assert values.isna().any() and (values.notna() & np.isnan(
            values.to_numpy(dtype=np.float64, na_value=0.0))).any(), c  # a NULL and a NaN
    g3 = r.outputs.loc[r.outputs["g"] == 3, "lo"].to_numpy(dtype=np.float64, na_value=0.0)
    assert np.isnan(g3).all() and len(g3)  # every value NaN: the minimum too


def test_a_filter_keeps_nan_above_every_number(spark, tmp_path):
    # rule: the source filter compares as Spark SQL does: NaN = NaN and NaN is larger than any
    # other number, so `x > 1` keeps the NaN rows (and drops the NULL one); they reach Spark as
    # NaN, not NULL
    commits = [("e", [{"ts": 1, "x": NAN}, {"ts": 2, "x": None}, {"ts": 3, "x": 5.0},
                      {"ts": 4, "x": 0.5}, {"ts": 5, "x": NEG_NAN}]),
               ("e", [{"ts": 40, "x": 2.0}])]
    query = {"kind": "aggregation", "source": "e", "window": {"duration": "10 seconds"},
             "aggregates": {"n": "count(*)", "c": "count(x)", "hi": "max(x)", "lo": "min(x)"}}
    paths = write_sources(tmp_path / "src", commits)
    spec = parse_spec({
        "name": "t", "query": query, "replay": {"batch_by": {"commits": 1}},
        "sources": {"e": {"table": str(paths["e"]), "event_time": "ts", "filter": "x > 1"}},
        "candidates": {"c": {"watermark": {"e": "5 seconds"}}}})
    r, _ = both(spark, spec, tmp_path / "work")
    assert cells(r, ["window_start", "n", "c", "hi", "lo"]) == [(0.0, 3, 3, "NaN", 5.0)]
