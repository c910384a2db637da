"""The whole-run pipeline (``semantics.pipeline.fast``) equals the reference runner
(``semantics.pipeline.runner``, docs/semantics.md §13) on random streams and chains: every
figure of the batch report and every emitted row, in the same order.

Chains: dedup -> aggregate, union -> dedup -> aggregate, aggregate -> aggregate (over
``window_time``), aggregate -> dedup, dedup -> dedup, keyed aggregations on the event time,
sliding windows, stateless stages first; both policies, ``allowMultiple`` on and off, no-data
batches on and off, a source without a watermark; keys with NULL, NaN (two bit patterns) and
both zeros. ``pytest --soak`` (``WMBT_SOAK``) runs 3 000 seeds instead of 200."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from semantics.engine import WholeRunDeclined
from semantics.errors import SpecError
from semantics.pipeline import fast
from semantics.predict import predict
from semantics.schedule import ARRIVAL_MS, VERSION, Schedule, cut
from semantics.spec import BacktestSpec, parse_spec
from tests.predict_kit import NEG_NAN, floats
from tests.reference_kit import plain
from tests.soak import SOAK

SEEDS = 3000 if SOAK else 200
X = [1.5, -2.0, 0.0, -0.0, float("nan"), NEG_NAN, None, 3.25]
AGGS = {"n": "count(*)", "s": "sum(v)", "a": "avg(v)", "lo": "min(x)", "hi": "max(x)",
        "sx": "sum(x)", "nx": "count(x)", "last": "max(ts)"}


def _window(r: np.random.Generator) -> dict:
    d, s = [(5, 5), (10, 5), (6, 4), (3, 1), (4, 4)][int(r.integers(0, 5))]
    w: dict = {"duration": f"{d} seconds", "slide": f"{s} seconds"}
    if r.random() < 0.2:
        w["start_time"] = f"{-int(r.integers(0, s * 1000))} milliseconds"
    return w


def _agg(r: np.random.Generator, keys: list[str], aggs: dict | None = None) -> dict:
    return {"aggregate": {"window": _window(r), "keys": keys, "aggregates": aggs or AGGS}}


def chain(r: np.random.Generator, seed: int) -> list[dict]:
    """A random chain of stages (after the first ``source``/``union`` one)."""
    dedup_keys = [["id", "ts"], ["id"], ["k"], ["x"], ["k", "ts"], ["x", "ts"]]
    dk = dedup_keys[int(r.integers(0, len(dedup_keys)))]
    within = bool(r.random() < 0.4)
    dedup = {"deduplicate": {"keys": dk, "within_watermark": within}}
    kind = seed % 7
    if kind == 0:
        return [dedup, _agg(r, [["k"], [], ["x"]][int(r.integers(0, 3))])]
    if kind == 1:  # aggregate -> aggregate over window_time
        first = _agg(r, ["k"], {"n": "count(*)", "s": "sum(v)", "hx": "max(x)"})
        return [first, {"aggregate": {"window": {"duration": "20 seconds",
                                                 "time": "window_time"},
                                      "keys": [["k"], []][int(r.integers(0, 2))],
                                      "aggregates": {"total": "sum(n)", "m": "max(s)",
                                                     "c": "count(hx)", "h": "max(hx)"}}}]
    if kind == 2:  # aggregate -> dedup
        return [_agg(r, ["k"], {"n": "count(*)"}),
                {"deduplicate": {"keys": [["n"], ["k", "window_start"]][int(r.integers(0, 2))],
                                 "within_watermark": within}}]
    if kind == 3:  # dedup -> dedup
        return [dedup, {"deduplicate": {"keys": ["k"], "within_watermark": True}}]
    if kind == 4:  # keyed on the event time, no window
        return [dedup, {"aggregate": {"keys": ["k", "ts"], "aggregates": AGGS}}]
    if kind == 5:  # stateless stages first
        return [{"filter": "v > 1"}, {"select": {"id": "id", "k": "k", "ts": "ts", "v": "v",
                                                 "x": "x", "b": "v % 3"}},
                dedup, _agg(r, ["b"])]
    return [dedup]


def case(seed: int) -> tuple[Schedule, BacktestSpec] | None:
    r = np.random.default_rng(seed)
    union = r.random() < 0.4
    sources = ["a", "b"] if union else ["a"]
    recs: dict[str, list[dict]] = {s: [] for s in sources}
    rid = 0
    for i in range(int(r.integers(1, 11))):
        for s in sources:
            for _ in range(int(r.integers(0, 9))):
                t_ms = 2000 * i + int(r.integers(-8, 4)) * 1000 + int(r.choice([0, 0, 500]))
                recs[s].append({"row_id": rid, ARRIVAL_MS: 1000 * i, VERSION: i,
                                "id": int(r.integers(0, 4)),
                                "k": [None, "a", "b", "c"][int(r.integers(0, 4))],
                                "ts": max(t_ms, 0) * 1000, "v": int(r.integers(-3, 9)),
                                "x": X[int(r.integers(0, len(X)))]})
                rid += 1
    if not any(recs.values()):
        return None
    arrivals = {}
    for s, rows in recs.items():
        cols = ["row_id", ARRIVAL_MS, VERSION, "id", "k", "ts", "v"]
        df = pd.DataFrame(rows, columns=[*cols, "x"])[cols].astype(
            {"row_id": "int64", ARRIVAL_MS: "int64", VERSION: "int64", "id": "int64",
             "k": object, "ts": "int64", "v": "int64"})
        df["ts"] = pd.to_datetime(df["ts"], unit="us", utc=True).astype("datetime64[us, UTC]")
        df["x"] = floats(*(row["x"] for row in rows))
        arrivals[s] = df
    delays = [None, "0 seconds", "2 seconds", "5 seconds", "1500 milliseconds"]
    wm = {s: d for s in sources if (d := delays[int(r.integers(0, 5))]) is not None}
    conf = {}
    if r.random() < 0.2:
        conf["spark.sql.streaming.statefulOperator.allowMultiple"] = "false"
    if r.random() < 0.15:
        conf["spark.sql.streaming.noDataMicroBatches.enabled"] = "false"
    first = {"union": sources} if union else {"source": "a"}
    pace = str(r.choice(["backlog", "live"]))
    try:
        spec = parse_spec({
            "name": "fast", "sources": {s: {"table": s, "event_time": "ts"} for s in sources},
            "query": {"pipeline": [first, *chain(r, seed)]},
            "replay": {"batch_by": [{"commits": 1}, {"arrival_interval": "1 second"}][seed % 2],
                       "pace": pace},
            "candidates": {"c": {"watermark": wm, "policy": str(r.choice(["min", "max"])),
                                 "spark_conf": conf}}})
    except SpecError:
        return None
    return cut("fast", arrivals, {s: "ts" for s in sources}, spec.batch_by("c"), pace), spec


def rows(df: pd.DataFrame) -> list[tuple]:
    return [tuple(plain(v) for v in r) for r in df.astype(object).itertuples(index=False)]


def fast_equals_step(sched, spec, seed: int) -> bool:
    """Asserts the whole run equals the stepped reference (every batch figure and emitted
    row); False when Spark would reject the case (nothing compared)."""
    try:
        ref = predict(sched, spec, "c", path="step")
    except SpecError:
        return False
    got_fast = predict(sched, spec, "c", path="whole_run")
    assert rows(got_fast.batches) == rows(ref.batches), seed
    assert rows(got_fast.outputs) == rows(ref.outputs), seed
    return True


def test_fast_equals_the_reference_on_random_chains():
    compared = {"whole_run": 0, "refused": 0, "emitted": 0}
    for seed in range(SEEDS):
        got = case(seed)
        if got is None:
            continue
        sched, spec = got
        try:
            ref = predict(sched, spec, "c", path="step")
        except SpecError as e:  # (Spark rejects it: the fast path says the same)
            with pytest.raises(SpecError) as f:
                predict(sched, spec, "c", path="whole_run")
            assert (f.value.field, f.value.expected) == (e.field, e.expected), seed
            compared["refused"] += 1
            continue
        fast = predict(sched, spec, "c", path="whole_run")
        assert (ref.info["path"], fast.info["path"]) == ("step", "whole_run")
        assert list(fast.batches.columns) == list(ref.batches.columns), seed
        assert rows(fast.batches) == rows(ref.batches), seed
        assert list(fast.outputs.columns) == list(ref.outputs.columns), seed
        assert rows(fast.outputs) == rows(ref.outputs), seed
        compared["whole_run"] += 1
        compared["emitted"] += len(ref.outputs)
    # (the comparisons mean something: most cases run, and emit rows)
    assert compared["whole_run"] >= SEEDS // 2 and compared["emitted"] >= SEEDS, compared


def test_auto_runs_the_whole_run_and_a_join_steps_with_the_reason():
    sched, spec = case(0) or pytest.fail("case 0 is a valid spec")
    assert predict(sched, spec, "c").info["path"] == "whole_run"
    join = parse_spec({
        "name": "j", "sources": {s: {"table": s, "event_time": "ts"} for s in ("a", "b")},
        "query": {"pipeline": [
            {"join": {"left": "a", "right": "b", "keys": ["id"],
                      "time_range": {"lower": "-5 seconds", "upper": "5 seconds"}}},
            {"aggregate": {"window": {"duration": "10 seconds"}}}]},
        "replay": {"batch_by": {"commits": 1}, "pace": "backlog"},
        "candidates": {"c": {"watermark": {"a": "5 seconds", "b": "5 seconds"}}}})
    two = case(next(s for s in range(50) if (c := case(s)) and len(c[1].sources) == 2))
    assert two is not None
    info = predict(two[0], join, "c").info
    assert info["path"] == "step" and "join stage" in str(info["path_reason"])
    with pytest.raises(WholeRunDeclined, match="join stage"):
        predict(two[0], join, "c", path="whole_run")


@pytest.mark.parametrize("per_row", [0, 1 << 16])
def test_tables_and_hash_tables_give_the_same(monkeypatch, per_row):
    # PIPELINE_TABLE_PER_ROW at both extremes: every renumbering and count by hash tables
    # (0), or over tables of the codes' range nearly always (2**16 cells a row)
    monkeypatch.setattr(fast, "PIPELINE_TABLE_PER_ROW", per_row)
    for seed in range(0, SEEDS, 4):
        got = case(seed)
        if got is None:
            continue
        if not fast_equals_step(*got, seed):
            continue


def test_union_runs_and_places_are_the_stable_sort_by_batch():
    # a union's rows go to (batch, source, row) order by per-batch counts, no sort: as runs
    # of rows, or each row at its place, equal to a stable argsort of the sources' batches
    # one after the other
    r = np.random.default_rng(7)
    for _ in range(200):
        n_b = int(r.integers(1, 6))
        batches = [np.sort(r.integers(0, n_b, int(r.integers(0, 12)))) for _ in range(3)]
        edges = fast._batch_edges(batches, n_b)
        assert edges is not None
        whole = np.concatenate(batches)
        want = np.argsort(whole, kind="stable")
        at = np.r_[0, np.cumsum([len(b) for b in batches])]
        runs = [np.arange(at[s] + lo, at[s] + hi) for s, lo, hi in fast._union_pieces(edges)]
        assert np.array_equal(np.concatenate([[], *runs]), want)
        place = np.concatenate([[], *fast._union_places(edges, batches)])
        assert np.array_equal(place, np.argsort(want, kind="stable"))
    # a source out of batch order (or a row without a batch): the caller sorts instead
    assert fast._batch_edges([np.array([1, 0])], 2) is None
    assert fast._batch_edges([np.array([-1, 0])], 2) is None


@pytest.mark.parametrize("piece_rows", [0, 1 << 40])
def test_union_runs_and_places_give_the_same(monkeypatch, piece_rows):
    # UNION_PIECE_ROWS at both extremes: a union's rows always copied as runs (0), or always
    # put row by row (the random cases' batches are small: they mostly take that one)
    monkeypatch.setattr(fast, "UNION_PIECE_ROWS", piece_rows)
    unions = 0
    for seed in range(0, SEEDS, 2):
        got = case(seed)
        if got is None or len(got[1].query_sources) < 2:
            continue
        if not fast_equals_step(*got, seed):
            continue
        unions += 1
    assert unions >= SEEDS // 10, unions
