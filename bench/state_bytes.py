"""Calibration of the state-bytes estimate (``semantics/state_bytes.py``) against real Spark.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/state_bytes.py              # all shapes
    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/state_bytes.py --shapes dedup,session
    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/state_bytes.py --per-batch  # + every batch
    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/state_bytes.py --provider rocksdb

``--provider rocksdb``: the RocksDB state store with changelog checkpointing on (the
checkpoint table compares its changelog files; a last table shows Spark's
``memoryUsedBytes``, which the predictor does not estimate for RocksDB, against the state rows,
and the snapshot uploads — ``<v>.zip`` and SST files — that maintenance wrote, every
``MAINTENANCE`` instead of Spark's minute so that short runs have some).

Shapes marked ``fitted`` are the ones the model's constants were fitted on; the others check the
model out of sample (other data, keys or gaps).

For each query shape: synthetic events (as ``bench/predict.py``: ``parse_spec`` + ``cut``,
``batch_by: {rows: n}``, backlog pace), the Spark replay of that schedule (HDFS-backed state store,
``local[2]``, 2 shuffle partitions) and the predictor on the same schedule. Event time advances
at a rate that ramps up 4× over the run (``Shape.rate``, ``Shape.ramp``), out of order by up to
10 s; 1 % of the events are ten minutes late, 5 % repeat a recent event; watermark delays are
30 s, so state both grows and gets evicted within a run, over a spread of sizes.

First table, per shape, over the batches where Spark reports ``memoryUsedBytes`` > 0:

* ``est/act``: min / median / max of the predictor's estimate over Spark's ``memoryUsedBytes``
  (``state_bytes.predicted``: the retained-tables model of every kind);
* ``mdl@act``: median of the retained-tables model of every kind
  (``state_bytes.estimate_retained``, sessions included)
  applied to Spark's own row counts (separates the layout error
  from row-count prediction errors; ``rows≠`` counts batches whose predicted
  ``state_rows``/``state_rows_removed`` differ from Spark's);
* ``B/entry`` (the held-rows view, whatever the model): median of
  (actual − stores·P·MAP_BYTES) / held rows (``state_bytes.held_rows``
  of Spark's ``state_rows``/``state_rows_removed``: the new version's rows plus the removed rows
  the previous version held), against the model's bytes per entry (``state_bytes.entry_bytes``;
  joins and sessions: per entry, the distinct-key entries come on top).

Second table, per shape: the least-squares fit actual = a + b·(held rows) over its batches
(Spark's numbers), b against the model's per-entry bytes and a against
stores·P·MAP_BYTES, with the fit's R².
Because Spark's ``SizeEstimator`` samples large arrays (the hash table), consecutive batches with
the same row count differ by ±20 %; the free intercept is then poorly determined, so two fits with
the intercept held at the model's stores·P·MAP_BYTES follow: ``b@a`` (one slope) and
``b rows`` / ``b removed`` (separate slopes: does a removed row really count like a kept one?).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.smoke import smoke, tiny  # noqa: E402
from semantics import state_bytes as sb  # noqa: E402
from semantics.predict import predict  # noqa: E402
from semantics.schedule import ARRIVAL_MS, VERSION, Schedule, cut  # noqa: E402
from semantics.spec import BacktestSpec, BatchBy, parse_spec  # noqa: E402

T0_US = 1_700_000_000_000_000  # a whole minute (windows start on it)
JITTER_US = 10_000_000  # out of order by up to 10 s of event time
LATE_US = 600_000_000  # 1 % of the events are ten minutes late (beyond the 30 s delay)
DELAY = "30 seconds"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
MAINTENANCE = "5s"  # spark.sql.streaming.stateStore.maintenanceInterval under --provider rocksdb


@dataclass(frozen=True)
class Shape:
    """One query shape: the spec's query, the data it gets and the watermark delay."""

    name: str
    query: dict[str, Any]
    keys: int = 1000  # distinct values of ``k``
    strings: bool = False  # add ``s``: a 12-character string column
    rate: float = 100.0  # events per second of event time, per source (geometric mean)
    ramp: float = 4.0  # the rate grows geometrically by this factor over the run
    sources: tuple[str, ...] = ("a",)
    shares: tuple[float, ...] = ()  # per source, its share of the events (default: equal)
    delay: str = DELAY
    note: str = field(default="", compare=False)


AGG_QUERY = {"window": {"duration": "1 minute"}, "aggregates": {"n": "count(*)", "s": "sum(v)"}}
SHAPES: dict[str, Shape] = {s.name: s for s in [
    # 3 000 keys: a window's groups grow with the event rate (not all keys in every window)
    Shape("aggregation", {"kind": "aggregation", "source": "a", "keys": ["k"], **AGG_QUERY},
          keys=3000),
    Shape("dedup", {"kind": "deduplication", "source": "a", "keys": ["id", "ts"]}),
    # wide rows: a string and a long key, a double (avg) and a string (max) in the buffer
    Shape("aggregation_wide", {"kind": "aggregation", "source": "a", "keys": ["s", "k"],
                               "window": {"duration": "1 minute"},
                               "aggregates": {"n": "count(*)", "s_v": "sum(v)",
                                              "a_v": "avg(v)", "last": "max(s)"}},
          keys=3000, strings=True),
    # a larger state: 200 000 keys at 2 000 events/s (run with --batch-rows 50000)
    Shape("aggregation_large", {"kind": "aggregation", "source": "a", "keys": ["k"],
                                **AGG_QUERY}, keys=200_000, rate=2000.0),
    # a state of over 10^6 entries (issue 45): dedup of nearly unique [id, ts] at 1 000 events/s
    # ramping 4x, a 20-minute delay (run with --partitions 4 --batches 6 --batch-rows 250000)
    Shape("dedup_large", {"kind": "deduplication", "source": "a", "keys": ["id", "ts"]},
          rate=1000.0, delay="20 minutes"),
    Shape("dedup_within", {"kind": "deduplication", "source": "a", "keys": ["id"],
                           "within_watermark": True}),
    Shape("dedup_string", {"kind": "deduplication", "source": "a", "keys": ["s", "ts"]},
          strings=True),
    # 3 000 keys at 100 events/s: a key every 30 s on average, so with a 30 s gap about a third
    # of the sessions close after each event (sessions both merge and end): about one session
    # per key in the state
    Shape("session", {"kind": "session", "source": "a", "keys": ["k"], "gap": "30 seconds",
                      "aggregates": {"n": "count(*)", "s": "sum(v)"}}, keys=3000, note="fitted"),
    # other keys and gap: 300 keys, a 10 s gap (one or two sessions per key in the state)
    Shape("session_300", {"kind": "session", "source": "a", "keys": ["k"], "gap": "10 seconds",
                          "aggregates": {"n": "count(*)", "avg": "avg(v)"}}, keys=300,
          note="fitted"),
    # a 1 s gap: 100 keys with ~17 sessions each and 1 000 keys with ~4 each in the state (the
    # index's cost per key and per session apart)
    Shape("session_100", {"kind": "session", "source": "a", "keys": ["k"], "gap": "1 second",
                          "aggregates": {"n": "count(*)", "avg": "avg(v)"}}, keys=100,
          note="fitted"),
    Shape("session_1000", {"kind": "session", "source": "a", "keys": ["k"], "gap": "1 second",
                           "aggregates": {"n": "count(*)", "avg": "avg(v)"}}, keys=1000,
          note="fitted"),
    # out of sample for the session constants (fitted on the four shapes above): a string key
    # (~1 session per key, most keys seen once) and 1 500 long keys with a 5 s gap
    Shape("session_string", {"kind": "session", "source": "a", "keys": ["s"],
                             "gap": "20 seconds",
                             "aggregates": {"n": "count(*)", "m": "max(v)"}}, strings=True),
    Shape("session_5s", {"kind": "session", "source": "a", "keys": ["k"], "gap": "5 seconds",
                         "aggregates": {"n": "count(*)", "s": "sum(v)", "lo": "min(v)"}},
          keys=1500),
    # 50 events/s per side over 500 keys: each row has a few partners within 30 s
    Shape("join", {"kind": "join", "type": "left_outer", "left": "a", "right": "b",
                   "keys": ["k"], "time_range": {"lower": "-30 seconds", "upper": "0 seconds"}},
          keys=500, rate=50.0, sources=("a", "b")),
    # sides of unequal size and a level state, as trial nu18 (impressions and their clicks):
    # 10 left rows to 1 right row, 300 keys, a constant rate
    Shape("join_skewed", {"kind": "join", "type": "left_outer", "left": "a", "right": "b",
                          "keys": ["k"],
                          "time_range": {"lower": "-30 seconds", "upper": "0 seconds"}},
          keys=300, rate=50.0, ramp=1.0, sources=("a", "b"), shares=(10.0, 1.0)),
    # nearly unique keys (as the demo's impressions and clicks): a key entry per row
    Shape("join_unique", {"kind": "join", "type": "inner", "left": "a", "right": "b",
                          "keys": ["k"],
                          "time_range": {"lower": "-30 seconds", "upper": "0 seconds"}},
          keys=1_000_000, rate=50.0, sources=("a", "b")),
    # full outer, few keys (many rows per key: eviction moves values into holes), a string
    Shape("join_full", {"kind": "join", "type": "full_outer", "left": "a", "right": "b",
                        "keys": ["k"],
                        "time_range": {"lower": "-30 seconds", "upper": "0 seconds"}},
          keys=50, rate=50.0, sources=("a", "b"), strings=True),
]}


def events(n: int, seed: int, shape: Shape, rate: float | None = None) -> pd.DataFrame:
    """``n`` events of one source; 5 % repeat an event of the previous 50 (id, k, s, ts).

    The event-time rate ramps from ``rate / √ramp`` to ``rate · √ramp``, so the state held
    within the watermark delay grows over the run (a spread of sizes for the fit)."""
    rng = np.random.default_rng(seed)
    rate = (shape.rate if rate is None else rate) * shape.ramp ** (np.arange(n) / max(n - 1, 1)
                                                                   - 0.5)
    base = T0_US + np.cumsum(1e6 / rate).astype(np.int64)
    ts = base - rng.integers(0, JITTER_US, n) - np.where(rng.random(n) < 0.01, LATE_US, 0)
    ids = rng.integers(0, n // 2 + 1, n)
    ks = rng.integers(0, shape.keys, n)
    idx = np.arange(n)
    dup = (rng.random(n) < 0.05) & (idx >= 50)
    src = np.where(dup, idx - rng.integers(1, 50, n), idx)
    ids, ks, ts = ids[src], ks[src], ts[src]
    df = pd.DataFrame({"id": ids, "k": ks, "v": rng.integers(0, 100, n)})
    if shape.strings:
        df["s"] = [f"user-{i:07d}" for i in ids]  # 12 characters
    df["ts"] = pd.to_datetime(ts, unit="us", utc=True).astype("datetime64[us, UTC]")
    return df


def make(shape: Shape, batches: int, batch_rows: int, pace: str = "backlog",
         partitions: int = 2, provider: str = "hdfs") -> tuple[BacktestSpec, Schedule]:
    """Spec + schedule as in ``bench/predict.py`` (``rows`` batches; ``pace``: backlog, or
    live: every data batch followed by an idle tick, where Spark may run a no-data batch;
    ``provider``: ``hdfs`` or ``rocksdb``, with changelog checkpointing)."""
    sources = list(shape.sources)
    conf: dict[str, Any] = {"spark.sql.shuffle.partitions": partitions}
    if provider == "rocksdb":
        conf |= {"spark.sql.streaming.stateStore.providerClass": ROCKSDB,
                 "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": True}
    spec = parse_spec({
        "name": f"bench_state_bytes_{shape.name}",
        "sources": {s: {"table": f"/nonexistent/{s}", "event_time": "ts"} for s in sources},
        "query": shape.query,
        "replay": {"batch_by": {"rows": batch_rows}, "pace": pace},
        "candidates": {"c": {"watermark": {s: shape.delay for s in sources}}},
        "spark_conf": conf,
    })
    shares = shape.shares or (1.0,) * len(sources)
    arrivals = {}
    for i, s in enumerate(sources):
        share = shares[i] / sum(shares)  # of the events, and of the rate (same time span)
        per = int(batches * batch_rows * share)
        df = events(per, seed=i, shape=shape, rate=shape.rate * len(sources) * share)
        # arrival order = row id: the sources interleave in proportion to their shares
        at = np.arange(per, dtype=np.int64)
        if shape.shares:
            at = at * (batches * batch_rows) // per
        df.insert(0, "row_id", at * len(sources) + i)
        df.insert(1, ARRIVAL_MS, df["row_id"].to_numpy() // 1000)
        df.insert(2, VERSION, df["row_id"].to_numpy() // batch_rows)
        arrivals[s] = df
    sched = cut(spec.name, arrivals, {s: "ts" for s in sources}, BatchBy(rows=batch_rows), pace)
    return spec, sched


def run_spark(spec: BacktestSpec, sched: Schedule) -> tuple[pd.DataFrame, int]:
    """The replay's batches and the bytes of the snapshots its checkpoint holds
    (``jobs.checkpoint.snapshot_bytes``)."""
    from jobs.checkpoint import snapshot_bytes
    from jobs.replay import replay
    from jobs.spark import get_spark

    spark = get_spark()
    with tempfile.TemporaryDirectory() as tmp:
        batches = replay(spec, "c", sched, Path(tmp), spark).batches
        return batches, snapshot_bytes(Path(tmp) / "c" / "checkpoint")


COLS = ["batch_id", "state_rows", "state_rows_removed", "state_bytes"]
CKPT_COLS = ["batch_id", "state_rows_updated", "state_rows_removed", "checkpoint_bytes"]


def checkpoint(actual: pd.DataFrame, pred: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Predicted over actual ``checkpoint_bytes`` per batch (cumulated, as reported) and of
    the bytes each batch adds (``inc``); the actual is the replay's measure of the state files
    (``jobs.checkpoint.state_bytes_by_batch``)."""
    df = actual[CKPT_COLS].merge(pred[CKPT_COLS], on="batch_id", suffixes=("", "_pred"))
    df = df.apply(pd.to_numeric).astype("float64").sort_values("batch_id", ignore_index=True)
    df["ratio"] = df["checkpoint_bytes_pred"] / df["checkpoint_bytes"]
    inc = df["checkpoint_bytes"].diff().fillna(df["checkpoint_bytes"])
    inc_pred = df["checkpoint_bytes_pred"].diff().fillna(df["checkpoint_bytes_pred"])
    df["inc_ratio"] = inc_pred / inc
    err = (df["ratio"] - 1).abs()
    return df, {"ck_min": df["ratio"].min(), "ck_med": df["ratio"].median(),
                "ck_max": df["ratio"].max(), "ck_worst": err.max(),
                "ck_inc_med": df["inc_ratio"].median(),
                "ck_inc_worst": (df["inc_ratio"] - 1).abs().max(),
                "ck_final": df["checkpoint_bytes"].iloc[-1] if len(df) else float("nan"),
                "ck_updates_differ": int((df["state_rows_updated"]
                                          != df["state_rows_updated_pred"]).sum())}


def compare(shape: Shape, batches: int, batch_rows: int, pace: str = "backlog",
            partitions: int = 2, provider: str = "hdfs") -> tuple[pd.DataFrame, dict[str, Any]]:
    """Per-batch table (predicted vs actual) and the shape's summary."""
    spec, sched = make(shape, batches, batch_rows, pace, partitions, provider)
    t0 = time.perf_counter()
    actual_all, snapshots = run_spark(spec, sched)
    actual = actual_all[COLS]
    spark_s = time.perf_counter() - t0
    pred_full = predict(sched, spec, "c", explain=False).batches
    pred = pred_full[COLS]
    ck_df, ck = checkpoint(actual_all, pred_full)
    mem = pd.to_numeric(actual_all["state_bytes"]).astype("float64")
    rows_ = pd.to_numeric(actual_all["state_rows"]).astype("float64")
    ck |= {"snapshot_bytes": snapshots, "mem_min": mem.min(), "mem_med": mem.median(),
           "mem_max": mem.max(), "mem_rows_corr": mem.corr(rows_),
           "rows_max": rows_.max()}
    pred_all = engine_batches(spec, sched)
    df = actual.merge(pred, on="batch_id", how="outer", suffixes=("", "_pred"))
    df = df.apply(pd.to_numeric).astype("float64")
    stores, key, value = sb.layout(spec, sched)
    per_entry = sb.entry_bytes(spec, sched)[0]
    base = stores * sb.partitions(spec, "c") * sb.MAP_BYTES
    df = df.sort_values("batch_id", ignore_index=True)
    df["entries"] = sb.held_rows(df[["state_rows", "state_rows_removed"]]).astype("float64")
    keys = pred_all.set_index("batch_id")["state_keys"] if "state_keys" in pred_all else None
    updated = actual_all.set_index("batch_id")["state_rows_updated"]  # (rewritten values)
    at_actual = df[["batch_id", "state_rows", "state_rows_removed"]].assign(
        state_rows_updated=df["batch_id"].map(updated),
        state_keys=df["batch_id"].map(keys) if keys is not None else np.nan)
    df["model_at_actual"] = sb.estimate_retained(spec, "c", sched, at_actual).astype("float64")
    df["state_keys"] = at_actual["state_keys"].astype("float64")
    # bytes not explained by the entries themselves (the session index's share, for the fit)
    df["beyond_entries"] = df["state_bytes"] - base - df["entries"] * (sb.ENTRY_BYTES + key + value)
    df["ratio"] = df["state_bytes_pred"] / df["state_bytes"]
    df["ratio_at_actual"] = df["model_at_actual"] / df["state_bytes"]
    df["bytes_per_entry"] = (df["state_bytes"] - base) / df["entries"]
    ok = df[df["state_bytes"] > 0]
    mism = ((ok["state_rows"] != ok["state_rows_pred"])
            | (ok["state_rows_removed"] != ok["state_rows_removed_pred"])).sum()
    fit = ok[ok["entries"] > 0]
    a = b = r2 = float("nan")
    if len(fit) >= 2 and fit["entries"].nunique() > 1:
        x, y = fit["entries"].to_numpy(), fit["state_bytes"].to_numpy()
        b, a = np.polyfit(x, y, 1)
        resid = y - (a + b * x)
        spread = float(((y - y.mean()) ** 2).sum())  # (0: RocksDB's memory can stay level)
        r2 = 1 - float(resid @ resid) / spread if spread else float("nan")
    b_at_a = b_rows = b_removed = float("nan")
    if len(fit):
        x, y = fit["entries"].to_numpy(), fit["state_bytes"].to_numpy() - base
        b_at_a = float(x @ y) / float(x @ x)
        xs = fit[["state_rows", "state_rows_removed"]].fillna(0).to_numpy()
        if np.linalg.matrix_rank(xs) == 2:
            b_rows, b_removed = np.linalg.lstsq(xs, y, rcond=None)[0]
    summary = {
        "shape": shape.name, "note": shape.note, "batches": len(df), "used": len(ok),
        "rows_mismatch": int(mism),
        "ratio_min": ok["ratio"].min(), "ratio_med": ok["ratio"].median(),
        "ratio_max": ok["ratio"].max(), "ratio_at_actual_med": ok["ratio_at_actual"].median(),
        "max_entries": fit["entries"].max(), "max_bytes": ok["state_bytes"].max(),
        "bpe_med": fit["bytes_per_entry"].median(), "model_bpe": per_entry,
        "key": key, "value": value, "stores": stores, "model_a": base,
        "fit_a": a, "fit_b": b, "r2": r2, "spark_s": spark_s, "b_at_a": b_at_a,
        "b_rows": b_rows, "b_removed": b_removed, **ck,
    }
    df = df.merge(ck_df[["batch_id", "checkpoint_bytes", "checkpoint_bytes_pred", "ratio",
                         "inc_ratio"]].rename(columns={"ratio": "ck_ratio"}),
                  on="batch_id", how="left")
    return df, summary


def engine_batches(spec: BacktestSpec, sched: Schedule) -> pd.DataFrame:
    """The engine's per-batch records, which also hold ``state_keys`` (joins)."""
    from semantics import engine
    from semantics.operators import make_operator
    from semantics.report import output_columns

    op = make_operator(spec, "c", sched, explain=False)
    return engine.run(sched, spec, "c", op, output_columns(spec, dict(sched.data_columns))).batches


def session_index_fit(frames: list[pd.DataFrame]) -> str:
    """Least squares over the session shapes' batches: the bytes beyond the entries (Spark's
    numbers) = per session · held rows + per key · distinct group keys (the model's
    ``SESSION_INDEX_BYTES`` and ``SESSION_KEY_BYTES`` + the key's 16-byte row)."""
    df = pd.concat(frames)
    df = df[(df["state_bytes"] > 0) & df["state_keys"].notna()]
    x = df[["entries", "state_keys"]].to_numpy()
    (per_session, per_key), *_ = np.linalg.lstsq(x, df["beyond_entries"].to_numpy(), rcond=None)
    return (f"session index over {len(df)} batches: {per_session:.1f} B per session (model "
            f"{sb.SESSION_INDEX_BYTES}), {per_key:.1f} B per key (model "
            f"{sb.SESSION_KEY_BYTES} + 16 for a long key)")


def print_tables(rows: list[dict[str, Any]]) -> None:
    print("\nestimate / actual memoryUsedBytes (batches with actual > 0)")
    print(f"{'shape':<13} {'batches':>7} {'used':>4} {'rows≠':>5} {'est/act min':>11} "
          f"{'median':>7} {'max':>6} {'mdl@act':>7} {'max entries':>11} {'max bytes':>10} "
          f"{'B/entry':>8} {'model':>6}  note")
    for r in rows:
        print(f"{r['shape']:<13} {r['batches']:>7} {r['used']:>4} {r['rows_mismatch']:>5} "
              f"{r['ratio_min']:>11.2f} {r['ratio_med']:>7.2f} {r['ratio_max']:>6.2f} "
              f"{r['ratio_at_actual_med']:>7.2f} {r['max_entries']:>11,.0f} "
              f"{r['max_bytes']:>10,.0f} {r['bpe_med']:>8.1f} {r['model_bpe']:>6}  {r['note']}")
    print("\nleast squares: actual = a + b·(held rows)  (Spark's numbers)")
    print(f"{'shape':<13} {'key':>4} {'value':>5} {'fit b':>7} {'model b':>7} {'b/model':>7} "
          f"{'fit a':>9} {'model a':>7} {'R²':>6} {'b@a':>6} {'b rows':>7} {'b removed':>9} "
          f"{'spark s':>7}")
    for r in rows:
        print(f"{r['shape']:<13} {r['key']:>4} {r['value']:>5} {r['fit_b']:>7.1f} "
              f"{r['model_bpe']:>7} {r['fit_b'] / r['model_bpe']:>7.2f} {r['fit_a']:>9,.0f} "
              f"{r['model_a']:>7} {r['r2']:>6.3f} {r['b_at_a']:>6.1f} {r['b_rows']:>7.1f} "
              f"{r['b_removed']:>9.1f} {r['spark_s']:>7.1f}")


def print_checkpoint(rows: list[dict[str, Any]]) -> None:
    print("\npredicted / actual checkpoint_bytes (state files, cumulated; inc: per batch)")
    print(f"{'shape':<13} {'P':>2} {'min':>5} {'median':>6} {'max':>5} {'worst':>5} "
          f"{'inc med':>7} {'inc worst':>9} {'final bytes':>11} {'upd≠':>4}")
    for r in rows:
        if "ck_med" not in r or pd.isna(r["ck_med"]):
            print(f"{r['shape']:<13} {r['partitions']:>2}  (not modelled)")
            continue
        print(f"{r['shape']:<13} {r['partitions']:>2} {r['ck_min']:>5.3f} {r['ck_med']:>6.3f} "
              f"{r['ck_max']:>5.3f} {r['ck_worst']:>5.3f} {r['ck_inc_med']:>7.3f} "
              f"{r['ck_inc_worst']:>9.3f} {r['ck_final']:>11,.0f} {r['ck_updates_differ']:>4}")


def print_rocksdb(rows: list[dict[str, Any]]) -> None:
    print("\nRocksDB: Spark's memoryUsedBytes (not estimated) and snapshot uploads")
    print(f"{'shape':<13} {'P':>2} {'mem min':>9} {'median':>9} {'max':>9} {'corr rows':>9} "
          f"{'max rows':>8} {'snapshots':>10} {'changelogs':>10}")
    for r in rows:
        print(f"{r['shape']:<13} {r['partitions']:>2} {r['mem_min']:>9,.0f} "
              f"{r['mem_med']:>9,.0f} {r['mem_max']:>9,.0f} {r['mem_rows_corr']:>9.2f} "
              f"{r['rows_max']:>8,.0f} {r['snapshot_bytes']:>10,} {r['ck_final']:>10,.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated, of: "
                    + ", ".join(SHAPES))
    ap.add_argument("--batches", type=int, default=20, help="data batches per shape")
    ap.add_argument("--batch-rows", type=int, default=2000)
    ap.add_argument("--pace", choices=["backlog", "live"], default="backlog")
    ap.add_argument("--per-batch", action="store_true", help="also print every batch")
    ap.add_argument("--provider", choices=["hdfs", "rocksdb"], default="hdfs",
                    help="state store (rocksdb: changelog checkpointing on)")
    ap.add_argument("--partitions", default="2",
                    help="spark.sql.shuffle.partitions, comma-separated (each a run)")
    args = ap.parse_args()
    if smoke():  # (bench/smoke.py) the first shape only, a few tiny batches: Spark still runs
        args.shapes = args.shapes.split(",")[0]
        args.batches, args.batch_rows = tiny(args.batches, 3), tiny(args.batch_rows, 100)
    started = time.perf_counter()
    if args.provider == "rocksdb":  # (the session's, not the spec's: no semantic effect)
        from jobs.spark import get_spark

        get_spark().conf.set("spark.sql.streaming.stateStore.maintenanceInterval", MAINTENANCE)
    rows = []
    sessions = []
    for name, parts in [(n, int(p)) for n in args.shapes.split(",")
                        for p in args.partitions.split(",")]:
        df, summary = compare(SHAPES[name], args.batches, args.batch_rows, args.pace, parts,
                              args.provider)
        summary["partitions"] = parts
        rows.append(summary)
        if SHAPES[name].query["kind"] == "session":
            sessions.append(df)
        print(f"{name}: {summary['batches']} batches, Spark {summary['spark_s']:.1f} s",
              flush=True)
        if args.per_batch:
            show = ["batch_id", "state_rows", "state_rows_pred", "state_rows_removed",
                    "state_rows_removed_pred", "state_bytes", "state_bytes_pred", "ratio",
                    "ratio_at_actual", "bytes_per_entry", "checkpoint_bytes",
                    "checkpoint_bytes_pred", "ck_ratio", "inc_ratio"]
            with pd.option_context("display.width", 200, "display.max_rows", 1000):
                print(df[show].round(2).to_string(index=False))
    if args.provider == "rocksdb":
        print_checkpoint(rows)
        print_rocksdb(rows)
        print(f"\ntotal {time.perf_counter() - started:.0f} s")
        return
    print_tables(rows)
    print_checkpoint(rows)
    if sessions:
        print("\n" + session_index_fit(sessions))
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
