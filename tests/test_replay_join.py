"""Spark replay of stream-stream joins: hand-computed reports and emitted rows.

Join: imp.ts BETWEEN clk.ts - 5 s AND clk.ts (a click up to 5 s after the impression), key ad,
both sides watermarked 2 s, global policy min, live pace (data tick, idle tick, ...).
State watermarks (docs/semantics.md §4.4, inclusive bounds subtract 1 ms): left (imp) = W - 5001,
right (clk) = W - 1.

  t0: imp r0 (ad1,10) r1 (ad2,11)     t2: clk r2 (ad1,12)
  t4: clk r3 (ad3,30)                  t6: imp r4 (ad9,40)          (odd ticks idle)

b0 (t0): W=0: both imp rows stored (state 2). After: imp 11-2 = 9000, clk none -> min 0.
t1: W still 0 -> no batch.
b1 (t2): late = evict = 0: r2 matches r0 (10 in [7,12]) -> 1 joined row; r2 stored (state 3).
    After: clk 12-2 = 10000 -> min(9000, 10000) = 9000.
b2 (t3, no data): late 0, evict 9000: left state wm 3999, right 8999: nothing evicted.
b3 (t4): late = evict = 9000: r3 stored (state 4). After: clk 28000, min stays 9000.
t5: no batch (9000 not > 9000).
b4 (t6): r4 stored (state 5). After: imp 38000 -> min(38000, 28000) = 28000.
b5 (t7, no data): late 9000, evict 28000: left state wm 22999 evicts r0 (matched) and r1
    (unmatched -> null row for outer-left types); right state wm 27999 evicts r2. State 2 (r3, r4).
"""

from __future__ import annotations

import pytest

from tests.replay_support import make_spec, rows, run, table

pytestmark = pytest.mark.spark

COMMITS = [
    ("imp", [{"ad": 1, "ts": 10}, {"ad": 2, "ts": 11}]),
    ("clk", [{"ad": 1, "ts": 12}]),
    ("clk", [{"ad": 3, "ts": 30}]),
    ("imp", [{"ad": 9, "ts": 40}]),
]
MATCH = (1, 0, 1, 10.0, 2, 1, 12.0)  # batch 1: imp r0 joined with clk r2
NULL_R1 = (5, 1, 2, 11.0, None, None, None)  # batch 5: imp r1 null-padded

# join type -> (emitted rows, numRowsRemoved in b5: inner/semi both sides, left outer = right
# side only, right outer = left side only, full outer = 0 (docs/semantics.md §4.4))
EXPECTED = {
    "inner": ([MATCH], 3),
    "left_outer": ([MATCH, NULL_R1], 1),
    "right_outer": ([MATCH], 2),
    "full_outer": ([MATCH, NULL_R1], 0),
}


def _spec(tmp_path, type_, **time_range):
    tr = {"lower": "-5 seconds", "upper": "0 seconds", **time_range}
    return make_spec(tmp_path / "src", COMMITS,
                     {"kind": "join", "type": type_, "left": "imp", "right": "clk",
                      "keys": ["ad"], "time_range": tr},
                     {"imp": "2 seconds", "clk": "2 seconds"}, pace="live")


@pytest.mark.parametrize("type_", sorted(EXPECTED))
def test_join_types_live(spark, tmp_path, type_):
    r = run(spark, _spec(tmp_path, type_), tmp_path / "work")
    assert set(r.batches["operator"]) == {"symmetricHashJoin"}
    want_rows, removed_b5 = EXPECTED[type_]
    n_null = len(want_rows) - 1
    # batch, tick, data, in, wm, late, evict, dropped, state, out
    assert table(r) == [
        (0, 0, True, 2, 0, 0, 0, 0, 2, 0),
        (1, 2, True, 1, 0, 0, 0, 0, 3, 1),
        (2, 3, False, 0, 9000, 0, 9000, 0, 3, 0),
        (3, 4, True, 1, 9000, 9000, 9000, 0, 4, 0),
        (4, 6, True, 1, 9000, 9000, 9000, 0, 5, 0),
        (5, 7, False, 0, 28000, 9000, 28000, 0, 2, n_null),
    ]
    assert list(r.batches["input_rows_imp"]) == [2, 0, 0, 0, 1, 0]
    assert list(r.batches["input_rows_clk"]) == [0, 1, 0, 1, 0, 0]
    assert r.batches["state_rows_removed"].iloc[-1] == removed_b5
    cols = ["imp_row_id", "imp_ad", "imp_ts", "clk_row_id", "clk_ad", "clk_ts"]
    assert list(r.outputs.columns) == ["batch_id", *cols]
    assert rows(r, cols) == want_rows


def test_left_semi_emits_left_rows_once(spark, tmp_path):
    # Same data: only imp r0 ever matches; it is emitted once, in b1, with left columns only.
    r = run(spark, _spec(tmp_path, "left_semi"), tmp_path / "work")
    assert list(r.outputs.columns) == ["batch_id", "imp_row_id", "imp_ad", "imp_ts"]
    assert rows(r, ["imp_row_id", "imp_ad", "imp_ts"]) == [(1, 0, 1, 10.0)]
    assert list(r.batches["tick"]) == [0, 2, 3, 4, 6, 7]
    assert list(r.batches["watermark_ms"]) == [0, 0, 9000, 9000, 9000, 28000]


def test_strict_one_sided_range_backlog(spark, tmp_path):
    # inner join, imp.ts < clk.ts + 0 (strict upper, no lower bound), backlog: one batch per
    # commit, then the trailing idle tick. Matches: r2 (ad1,12) vs r0 (ad1,10): 10 < 12 -> yes.
    # Watermarks: b0 W=0; after b0 imp 9000, clk none -> 0; after b1 min(9000,10000) = 9000;
    # after b2 min(9000, 28000) = 9000; after b3 min(38000, 28000) = 28000 -> trailing no-data
    # batch b4 (tick 4): only the right side has a state watermark (clk > imp: W + 0, strict,
    # no -1 ms): r2 (12 <= 28) is evicted, imp rows stay (no lower bound -> never evicted).
    spec = make_spec(tmp_path / "src", COMMITS,
                     {"kind": "join", "type": "inner", "left": "imp", "right": "clk",
                      "keys": ["ad"], "time_range": {"upper": "0 seconds",
                                                     "upper_inclusive": False}},
                     {"imp": "2 seconds", "clk": "2 seconds"})
    r = run(spark, spec, tmp_path / "work")
    assert table(r) == [
        (0, 0, True, 2, 0, 0, 0, 0, 2, 0),
        (1, 1, True, 1, 0, 0, 0, 0, 3, 1),
        (2, 2, True, 1, 9000, 0, 9000, 0, 4, 0),
        (3, 3, True, 1, 9000, 9000, 9000, 0, 5, 0),
        (4, 4, False, 0, 28000, 9000, 28000, 0, 4, 0),
    ]
    cols = ["imp_row_id", "clk_row_id"]
    assert rows(r, cols) == [(1, 0, 2)]


def test_both_sources_in_one_tick(spark, tmp_path):
    # batch_by commits: 2 puts both sources into one tick (one file, one row group per source;
    # numInputRows must still be the tick's row count, not once per join side).
    # t0 = imp r0 r1 + clk r2; t1 = clk r3 + imp r4; t2 idle (backlog end).
    # b0: W=0: r2 joins r0 -> 1 row; state 3. After: min(9000, 10000) = 9000.
    # b1: late 0, evict 9000: r3, r4 stored, nothing evicted (left wm 3999, right 8999):
    #     state 5. After: min(38000, 28000) = 28000.
    # b2 (no data): evict 28000: r0 r1 (left wm 22999) and r2 (right wm 27999) go: state 2.
    spec = make_spec(tmp_path / "src", COMMITS,
                     {"kind": "join", "type": "inner", "left": "imp", "right": "clk",
                      "keys": ["ad"], "time_range": {"lower": "-5 seconds",
                                                     "upper": "0 seconds"}},
                     {"imp": "2 seconds", "clk": "2 seconds"}, batch_by={"commits": 2})
    r = run(spark, spec, tmp_path / "work")
    assert table(r) == [
        (0, 0, True, 3, 0, 0, 0, 0, 3, 1),
        (1, 1, True, 2, 9000, 0, 9000, 0, 5, 0),
        (2, 2, False, 0, 28000, 9000, 28000, 0, 2, 0),
    ]
    assert list(r.batches["input_rows_imp"]) == [2, 1, 0]
    assert list(r.batches["input_rows_clk"]) == [1, 1, 0]
    assert list(r.batches["state_rows_removed"]) == [0, 0, 3]
    assert rows(r, ["imp_row_id", "clk_row_id"]) == [(0, 0, 2)]
