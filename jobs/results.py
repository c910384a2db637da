"""The results store: Delta tables ``runs``, ``batch_reports`` and ``outputs`` under one folder.

Keys: backtest, candidate, run_id and side (``predicted`` | ``actual``). A run id is a hash of
the spec, the candidate and the schedule, so a rerun on the same data replaces its own rows
(idempotent) and a run on new data gets a new id. Every write is one Delta commit that replaces
exactly the rows of its key (``predicate`` overwrite), and ``runs`` is written last: readers
trust a run only once its ``runs`` row exists.

>>> store = ResultsStore("results")                     # doctest: +SKIP
>>> store.write(spec, "tight", rid, "predicted", result) # doctest: +SKIP
>>> store.batches("clicks_per_ad", "tight")              # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.json as pa_json
from deltalake import DeltaTable, write_deltalake

from semantics.operators.columns import nullable_floats
from semantics.report import REPORT_COLUMNS, RunResult, json_texts, nan_kept
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec

KEY = ("backtest", "candidate", "run_id", "side")
_INT = pa.int64()
BATCH_SCHEMA = pa.schema(
    [pa.field(k, pa.string()) for k in KEY]
    + [pa.field(c, {"has_data": pa.bool_(), "operator": pa.string()}.get(c, _INT))
       for c in REPORT_COLUMNS]
    + [pa.field("input_rows_by_source", pa.string())]
)
# ``row``: Delta's string; large_string in arrow, so the rows are one array of any size
OUTPUT_SCHEMA = pa.schema([pa.field(k, pa.string()) for k in KEY]
                          + [pa.field("batch_id", _INT), pa.field("row", pa.large_string())])
RUN_SCHEMA = pa.schema([pa.field(k, pa.string()) for k in KEY] + [
    pa.field("written_at_ms", _INT), pa.field("elapsed_s", pa.float64()),
    pa.field("batches", _INT), pa.field("output_rows", _INT),
    pa.field("success", pa.bool_()), pa.field("details", pa.string()),
])


def run_id(spec: BacktestSpec, candidate: str, schedule: Schedule) -> str:
    """Deterministic id of (spec, candidate, schedule): same inputs, same id."""
    h = hashlib.sha256()
    # without defaults: a field added to the spec later (with a default) changes no id
    h.update(spec.model_dump_json(exclude={"path"}, exclude_defaults=True).encode())
    h.update(candidate.encode())
    h.update(json.dumps(schedule.summary(), sort_keys=True).encode())
    for s, df in schedule.rows.items():
        h.update(s.encode())
        h.update(pd.util.hash_pandas_object(df[["row_id", "tick"]], index=False).values.tobytes())
    return h.hexdigest()[:16]


def _sql(v: str) -> str:
    return "'" + v.replace("'", "''") + "'"


class ResultsStore:
    """Typed thin wrapper over the three Delta tables under ``root``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _write(self, table: str, data: pa.Table, key: dict[str, str]) -> None:
        path = self.root / table
        pred = " AND ".join(f"{k} = {_sql(v)}" for k, v in key.items())
        if DeltaTable.is_deltatable(str(path)):
            write_deltalake(str(path), data, mode="overwrite", predicate=pred)
        else:
            path.mkdir(parents=True, exist_ok=True)
            write_deltalake(str(path), data, mode="overwrite")

    def write(self, spec: BacktestSpec, candidate: str, rid: str, side: str,
              result: RunResult, success: bool = True, details: object = None) -> None:
        """Store one candidate's result; replaces a previous write of the same key."""
        key = {"backtest": spec.name, "candidate": candidate, "run_id": rid, "side": side}
        b = result.batches.copy()
        src_cols = [c for c in b.columns if c.startswith("input_rows_")]
        b["input_rows_by_source"] = [json.dumps({c.removeprefix("input_rows_"): int(r[c])
                                                 for c in src_cols}) for _, r in b.iterrows()]
        for k, v in key.items():
            b[k] = v
        b = b.reindex(columns=BATCH_SCHEMA.names)
        for c in b.columns:
            if BATCH_SCHEMA.field(c).type == _INT:
                b[c] = pd.to_numeric(b[c], errors="coerce").astype("Int64")
        self._write("batch_reports", pa.Table.from_pandas(b, BATCH_SCHEMA, preserve_index=False),
                    key)
        outs = result.outputs
        n = len(outs)
        texts = json_texts(nan_kept(outs), [c for c in outs.columns if c != "batch_id"])
        o = pa.table({  # (arrow arrays directly: no pandas object columns of the key per row)
            **{k: pa.repeat(pa.scalar(v, pa.string()), n) for k, v in key.items()},
            "batch_id": outs["batch_id"].to_numpy(dtype=np.int64) if "batch_id" in outs
            else np.full(n, -1, dtype=np.int64),
            # one array (64-bit offsets: no 2 GB limit): the Delta writer keeps the rows of a
            # single record batch in order, and reorders several
            "row": pa.concat_arrays([c.cast(pa.large_string()) for c in texts.chunks])
            if texts.num_chunks else pa.array([], pa.large_string()),
        }, schema=OUTPUT_SCHEMA)
        assert o.column("row").num_chunks == 1 and len(o.to_batches()) <= 1
        self._write("outputs", o, key)
        run = pd.DataFrame([{
            **key,
            "written_at_ms": int(time.time() * 1000),
            "elapsed_s": float(result.info.get("elapsed_s", 0.0) or 0.0),
            "batches": int(result.batches["batch_id"].nunique()) if len(result.batches) else 0,
            "output_rows": len(result.outputs),
            "success": bool(success),
            "details": json.dumps(details, default=str) if details is not None else None,
        }])
        self._write("runs", pa.Table.from_pandas(run, RUN_SCHEMA, preserve_index=False), key)

    def _read(self, table: str, **where: str | None) -> pd.DataFrame:
        path = self.root / table
        if not DeltaTable.is_deltatable(str(path)):
            return pd.DataFrame()
        df = DeltaTable(str(path)).to_pandas()
        for k, v in where.items():
            if v is not None:
                df = df[df[k] == v]
        return df.reset_index(drop=True)

    def runs(self, backtest: str | None = None, candidate: str | None = None) -> pd.DataFrame:
        return self._read("runs", backtest=backtest, candidate=candidate)

    def batches(self, backtest: str | None = None, candidate: str | None = None,
                run_id: str | None = None, side: str | None = None) -> pd.DataFrame:
        """Batch reports of complete runs only (those with a ``runs`` row)."""
        df = self._read("batch_reports", backtest=backtest, candidate=candidate, run_id=run_id,
                        side=side)
        runs = self.runs(backtest, candidate)
        if df.empty or runs.empty:
            return df.iloc[0:0]
        done = runs[list(KEY)].drop_duplicates()
        return df.merge(done, on=list(KEY)).sort_values(["candidate", "side", "batch_id"])

    def outputs(self, backtest: str, candidate: str, run_id: str, side: str) -> pd.DataFrame:
        """``batch_id`` and the emitted rows' columns, as stored (timestamps in epoch ms), in
        the order written. Only this key's rows are read (the filter is pushed down to the
        Delta scan)."""
        path = self.root / "outputs"
        if not DeltaTable.is_deltatable(str(path)):
            return pd.DataFrame()
        key = {"backtest": backtest, "candidate": candidate, "run_id": run_id, "side": side}
        where = ds.field("backtest") == backtest
        for k in KEY[1:]:
            where &= ds.field(k) == key[k]
        t = DeltaTable(str(path)).to_pyarrow_dataset().to_table(filter=where)
        if not t.num_rows:
            return t.to_pandas()
        batch = pd.DataFrame({"batch_id": t.column("batch_id").to_numpy()})
        return pd.concat([batch, parsed_rows(t.column("row"))], axis=1)


def parsed_rows(rows: pa.ChunkedArray) -> pd.DataFrame:
    """The stored rows' JSON objects as a frame, as ``pd.DataFrame([json.loads(r) ...])``
    makes it (the same columns, dtypes and values), parsed by arrow's JSON reader in one block
    (so every row informs the inferred types); per row with ``json.loads`` when arrow cannot
    (``Infinity``, integers past int64). But a float column holding a null is a nullable
    ``Float64``, whose data keeps a ``NaN`` apart from the null (``operators.columns``).

    >>> parsed_rows(pa.chunked_array([['{"x": NaN}', '{"x": null}']]))["x"].tolist()
    [nan, <NA>]
    """
    text = rows.combine_chunks().cast(pa.large_string())
    whole = pa.LargeListArray.from_arrays(pa.array([0, len(text)], pa.int64()), text)
    buf = pc.binary_join(whole, pa.scalar("\n", pa.large_string()))[0].as_buffer()
    if buf.size < (1 << 31) - 1:  # (one block: arrow's block size is a 32-bit integer)
        try:
            table = pa_json.read_json(pa.BufferReader(buf),
                                      pa_json.ReadOptions(block_size=buf.size + 1))
            if table.num_rows == len(text):
                df = table.to_pandas()
                for f, col in zip(table.schema, table.columns, strict=True):
                    if pa.types.is_floating(f.type) and col.null_count:
                        df[f.name] = col.to_pandas(types_mapper={f.type: pd.Float64Dtype()}.get)
                return df
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    records = [json.loads(r) for r in text.to_pylist()]
    df = pd.DataFrame(records)
    for c in df.columns:  # (as arrow's reader: a column of floats, not of integers, and nulls)
        if isinstance(df[c].dtype, np.dtype) and df[c].dtype.kind == "f" and df[c].hasnans:
            got = [r.get(c) for r in records]
            null = np.array([v is None for v in got])
            if null.any() and any(isinstance(v, float) for v in got):
                df[c] = nullable_floats(df[c].to_numpy(), null)
    return df
