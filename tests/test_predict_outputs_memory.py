"""The emitted rows own their memory: every prediction's output columns are writable arrays of
their own, sharing memory with no other column and with none of the schedule's input columns.
Outputs are built for speed from views, read-only stride-0 buffers (``aggfuncs.ones``) and
frames that do not copy their arrays (``copy=False``); a user who edits ``outputs`` (writes a
NULL, fixes a value in a notebook) must change that one cell only, and a sweep reusing the
schedule for the next candidate must see the rows as they were."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from semantics.predict import predict
from semantics.schedule import ARRIVAL_MS, VERSION, cut
from semantics.spec import BatchBy, parse_spec

AGGS = {"n": "count(*)", "c": "count(v)", "cn": "count(ni)", "s": "sum(v)", "sn": "sum(ni)",
        "lo": "min(v)", "hi": "max(f)", "av": "avg(v)", "last": "max(ts)", "word": "min(w)"}
QUERIES = [
    *({"kind": "aggregation", "keys": ["k"], "window": {"duration": "1 minute"},
       "aggregates": AGGS, "output_mode": m} for m in ("append", "update", "complete")),
    {"kind": "aggregation", "keys": ["k", "w"], "aggregates": AGGS, "output_mode": "update",
     "window": {"duration": "1 minute", "slide": "20 seconds"}},
    {"kind": "session", "keys": ["id"], "gap": "30 seconds", "aggregates": AGGS},
    {"kind": "session", "keys": ["w", "k"], "gap": "30 seconds", "aggregates": AGGS,
     "output_mode": "complete"},
    {"kind": "deduplication", "keys": ["id", "ts"]},
    {"kind": "deduplication", "keys": ["id"], "within_watermark": True},
    {"kind": "join", "type": "left_outer", "left": "a", "right": "b", "keys": ["k"],
     "time_range": {"lower": "-30 seconds", "upper": "10 seconds"}},
    {"kind": "join", "type": "full_outer", "left": "a", "right": "b", "keys": ["w"],
     "time_range": {"lower": "-10 seconds", "upper": "10 seconds"}},
]


def _rows(n: int, seed: int) -> pd.DataFrame:
    r = np.random.default_rng(seed)
    ts = 1_700_000_000_000_000 + np.arange(n) * 100_000 - r.integers(0, 60_000_000, n)
    return pd.DataFrame({
        "row_id": np.arange(n, dtype=np.int64) * 2 + seed,
        ARRIVAL_MS: np.arange(n, dtype=np.int64) * 100,
        VERSION: np.arange(n, dtype=np.int64) // 200,
        "id": r.integers(0, n // 2, n), "k": r.integers(0, 40, n), "v": r.integers(0, 9, n),
        "ni": pd.array(np.where(r.random(n) < 0.1, None, r.integers(0, 9, n)), dtype="Int64"),
        "f": r.random(n),
        "w": np.array(["a", "b", None, "dd"], dtype=object)[r.integers(0, 4, n)],
        "ts": pd.to_datetime(ts, unit="us", utc=True).astype("datetime64[us, UTC]"),
    })


def _buffers(values: object) -> list[np.ndarray]:
    if isinstance(values, pd.arrays.DatetimeArray):
        return [values._ndarray]
    if isinstance(values, pd.arrays.IntegerArray | pd.arrays.FloatingArray
                  | pd.arrays.BooleanArray):
        return [values._data, values._mask]
    return [values] if isinstance(values, np.ndarray) else []


@pytest.mark.parametrize("explain", [False, True])
@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q["kind"] + "-" + str(
    q.get("output_mode", q.get("type", q.get("within_watermark", "")))))
def test_output_columns_own_their_memory(query: dict, explain: bool) -> None:
    sources = ["a", "b"] if query["kind"] == "join" else ["a"]
    spec = parse_spec({
        "name": "own", "sources": {s: {"table": s, "event_time": "ts"} for s in sources},
        "query": query if query["kind"] == "join" else {"source": "a", **query},
        "replay": {"batch_by": {"rows": 200}, "pace": "backlog"},
        "candidates": {"c": {"watermark": {s: "20 seconds" for s in sources}}},
    })
    sched = cut("own", {s: _rows(3000, i) for i, s in enumerate(sources)},
                {s: "ts" for s in sources}, BatchBy(rows=200), "backlog")
    inputs = [b for df in sched.rows.values() for c in df.columns for b in _buffers(
        df[c]._values)]
    out = predict(sched, spec, "c", explain=explain).outputs
    assert len(out) > 100
    held = [(c, b) for c in out.columns for b in _buffers(out[c]._values)]
    assert len(held) >= len(out.columns) - sum(out[c].dtype == object for c in out.columns)
    for i, (c, b) in enumerate(held):
        assert b.flags.writeable, f"{c} is read-only"
        assert not any(np.shares_memory(b, other) for _, other in held[i + 1:]), c
        assert not any(np.shares_memory(b, x) for x in inputs), f"{c} is the schedule's"
