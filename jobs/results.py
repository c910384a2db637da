"""The results store: Delta tables ``runs``, ``batch_reports`` and ``outputs`` under one folder.

A slot is (backtest, candidate, side); the store keeps the newest run of each slot, whatever its
run id (a hash of the spec, the candidate and the schedule: a rerun after the spec or the data
changed replaces the run before it, and a rerun with the same id is idempotent). Every row also
holds the ``write_id`` of the write that made it: unique, ordered as the writes began.

Write protocol (several processes may write at once, and any may be killed at any moment):

1. the tables are created empty with their schemas if missing, tolerating a concurrent creator
   (``jobs.delta_writes``): no write ever overwrites a whole table;
2. the new run's ``batch_reports`` and ``outputs`` rows are appended (each append one Delta
   commit, retried on conflicts, never twice: a retry first looks for its write id);
3. its ``runs`` row is appended: the commit point;
4. the slot's rows of older write ids are deleted from the three tables.

Readers take the ``runs`` row of each slot with the greatest write id, and of the other tables
only the rows of that write id (``batches`` and ``outputs`` check the counts the ``runs`` row
holds and read again when a writer replaced the run between two reads). Hence:

* a process killed before step 3 leaves rows no ``runs`` row names: the previous run stays what
  readers see, and the next write of the slot deletes the leftovers in its step 4;
* killed in step 4: the new run is seen; what is left of older ones is deleted by the next write;
* two writers of one slot: the later-begun wins; the other's rows become leftovers (its step 4
  only deletes writes older than its own), never a mix;
* writers of different slots touch disjoint rows; Delta's put-if-absent commits serialize them.

Tables written before write ids (NULL ``write_id``) read as the oldest writes of their slots.

>>> store = ResultsStore("results")                     # doctest: +SKIP
>>> store.write(spec, "tight", rid, "predicted", result) # doctest: +SKIP
>>> store.batches("clicks_per_ad", "tight")              # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.json as pa_json
from deltalake import DeltaTable, write_deltalake

from jobs.delta_writes import ResultsError, committed, create_table, guarded
from semantics.operators.columns import nullable_floats
from semantics.output_chunks import batch_ordered
from semantics.report import REPORT_COLUMNS, RunResult, json_texts, nan_kept
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec

KEY = ("backtest", "candidate", "run_id", "side")
SLOT = ("backtest", "candidate", "side")  # the store holds one run of each
WRITE_ID = "write_id"
READ_ATTEMPTS = 20
_INT = pa.int64()
_IDS = [pa.field(k, pa.string()) for k in (*KEY, WRITE_ID)]
BATCH_SCHEMA = pa.schema(
    _IDS
    + [pa.field(c, {"has_data": pa.bool_(), "operator": pa.string()}.get(c, _INT))
       for c in REPORT_COLUMNS]
    + [pa.field("input_rows_by_source", pa.string()),
       # a pipeline's operator position in Spark's list (SPEC §3); null for one operator.
       # Last, and added to an older table by the writes' schema merge.
       pa.field("operator_index", _INT)]
)
# ``row``: Delta's string; large_string in arrow, so the rows are one array of any size
OUTPUT_SCHEMA = pa.schema(_IDS + [pa.field("batch_id", _INT),
                                  pa.field("row", pa.large_string())])
RUN_SCHEMA = pa.schema(_IDS + [
    pa.field("written_at_ms", _INT), pa.field("elapsed_s", pa.float64()),
    pa.field("batches", _INT), pa.field("output_rows", _INT),
    pa.field("success", pa.bool_()), pa.field("details", pa.string()),
    # the emitted-row columns holding timestamps (a JSON list; epoch ms in ``outputs``), by
    # their type when written. Last, and added to an older table by the writes' schema merge.
    pa.field("time_columns", pa.string()),
    # the outputs written a range of batches per record batch (a streamed prediction,
    # ``semantics.output_chunks``), which the Delta writer may interleave: read back in batch
    # order. Last, and added to an older table by the writes' schema merge (NULL: false).
    pa.field("batch_ordered", pa.bool_()),
])
# OUTPUT_SCHEMA as ``write`` hands rows to the Delta writer: the ids dictionary-encoded
# (``_constant``); the table stores them as plain strings
_OUTPUT_WRITTEN = pa.schema([pa.field(f.name, pa.dictionary(pa.int32(), f.type))
                             if f.type == pa.string() else f for f in OUTPUT_SCHEMA])
TABLES = {"batch_reports": BATCH_SCHEMA, "outputs": OUTPUT_SCHEMA, "runs": RUN_SCHEMA}


def run_id(spec: BacktestSpec, candidate: str, schedule: Schedule) -> str:
    """Deterministic id of (spec, candidate, schedule): same inputs, same id."""
    h = hashlib.sha256()
    # without defaults: a field added to the spec later (with a default) changes no id; the
    # sweep asset's settings (``sweep``) change no candidate's result
    h.update(spec.model_dump_json(exclude={"path", "sweep"}, exclude_defaults=True).encode())
    if spec._pyspark is not None:  # (the job's own code: its text is part of the query)
        h.update(spec._pyspark.digest.encode())
    h.update(candidate.encode())
    h.update(json.dumps(schedule.summary(), sort_keys=True).encode())
    for s, df in schedule.rows.items():
        h.update(s.encode())
        h.update(pd.util.hash_pandas_object(df[["row_id", "tick"]], index=False).values.tobytes())
    return h.hexdigest()[:16]


def _sql(v: str) -> str:
    return "'" + v.replace("'", "''") + "'"


class ResultsStore:
    """The three Delta tables under ``root``; see the module docstring for the write protocol.

    Invariant: for each slot (backtest, candidate, side) the readers see the rows of one write,
    the one its newest ``runs`` row names, whole or not at all (never a mix of two writes)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def check_writable(self, create: bool = True) -> None:
        """Refuse (``ResultsError``) a results folder that cannot take a write, before any work:
        a file, a folder that cannot be created or written, something other than a Delta table
        where a table belongs. Then, with ``create``, creates the missing tables (empty,
        race-free); without it nothing is written (a run that fails later leaves no trace)."""
        root = self.root
        check_folder(root, create)
        if not create and not root.exists():
            return
        for name in TABLES:  # all checked before any is created: nothing half-made
            path = root / name
            if path.exists() and not path.is_dir():
                raise ResultsError(path, "expected a Delta table (a folder), found a file")
            with guarded(path, "reading the Delta table"):
                table = DeltaTable.is_deltatable(str(path))
                if table:  # (its log must read: a broken one refused before any write)
                    DeltaTable(str(path))
            # (a folder holding only _delta_log: another process is creating the table)
            if path.is_dir() and not table and set(os.listdir(path)) - {"_delta_log"}:
                raise ResultsError(path, "expected a Delta table (a folder with _delta_log) "
                                         "or nothing, found other files")
        if not create:
            _probe(root)
            for name in TABLES:
                for folder in (root / name, root / name / "_delta_log"):
                    if folder.is_dir():
                        _probe(folder)
            return
        for name, schema in TABLES.items():
            create_table(root / name, schema)
            _probe(root / name)
            _probe(root / name / "_delta_log")

    def _append(self, table: str, data: pa.Table, wid: str) -> None:
        path = self.root / table
        committed(path, f"appending to {table}",
                  lambda: write_deltalake(str(path), data, mode="append", schema_mode="merge"),
                  done=lambda: _holds(path, wid))

    def _drop_superseded(self, slot: dict[str, str], wid: str) -> None:
        """Deletes the slot's rows of writes older than ``wid`` (and of the writes before write
        ids: NULL), in every table: none of them is the slot's newest ``runs`` row any more."""
        pred = " AND ".join(f"{k} = {_sql(v)}" for k, v in slot.items())
        pred += f" AND ({WRITE_ID} IS NULL OR {WRITE_ID} < {_sql(wid)})"
        for table in TABLES:
            path = self.root / table
            committed(path, f"deleting superseded rows of {table}",
                      lambda path=path: DeltaTable(str(path)).delete(pred))

    def write(self, spec: BacktestSpec, candidate: str, rid: str, side: str,
              result: RunResult, success: bool = True, details: object = None) -> None:
        """Store one candidate's result as the newest of its slot (backtest, candidate, side),
        replacing the slot's earlier run whatever its run id."""
        key = {"backtest": spec.name, "candidate": candidate, "run_id": rid, "side": side}
        wid = new_write_id()
        self.check_writable()
        b = result.batches.copy()
        src_cols = [c for c in b.columns if c.startswith("input_rows_")]
        b["input_rows_by_source"] = [json.dumps({c.removeprefix("input_rows_"): int(r[c])
                                                 for c in src_cols}) for _, r in b.iterrows()]
        for k, v in {**key, WRITE_ID: wid}.items():
            b[k] = v
        b = b.reindex(columns=BATCH_SCHEMA.names)
        for c in b.columns:
            if BATCH_SCHEMA.field(c).type == _INT:
                b[c] = pd.to_numeric(b[c], errors="coerce").astype("Int64")
        self._append("batch_reports",
                     pa.Table.from_pandas(b, BATCH_SCHEMA, preserve_index=False), wid)
        ids = {**key, WRITE_ID: wid}
        streamed = getattr(result, "streamed", None)  # (a Prediction's, built a range at a time)
        if streamed is None:
            outs = result.outputs
            n = len(outs)
            o = _output_rows(outs, ids)
            assert o.column("row").num_chunks == 1 and len(o.to_batches()) <= 1
            self._append("outputs", o, wid)
            times = _time_columns(outs)
        else:
            n, times = len(streamed), _time_columns(streamed.empty())
            seen: set[str] = set()

            def chunks() -> pa.RecordBatchReader:
                """One record batch per frame of whole batches (the writer keeps each one's
                rows in order, but may interleave them: ``_emitted`` puts them back)."""
                def frames() -> Iterator[pa.RecordBatch]:
                    for outs in streamed.frames():
                        seen.update(_time_columns(outs))
                        yield from _output_rows(outs, ids).combine_chunks().to_batches()
                return pa.RecordBatchReader.from_batches(_OUTPUT_WRITTEN, frames())

            path = self.root / "outputs"
            committed(path, "appending to outputs",
                      lambda: write_deltalake(str(path), chunks(), mode="append",
                                              schema_mode="merge"),
                      done=lambda: _holds(path, wid))
            times = [c for c in streamed.empty().columns if c in seen] if n else times
        run = pd.DataFrame([{
            **key,
            WRITE_ID: wid,
            "written_at_ms": int(time.time() * 1000),
            "elapsed_s": float(result.info.get("elapsed_s", 0.0) or 0.0),
            "batches": int(result.batches["batch_id"].nunique()) if len(result.batches) else 0,
            "output_rows": n,
            "success": bool(success),
            "details": json.dumps(details, default=str) if details is not None else None,
            "time_columns": json.dumps(times),
            "batch_ordered": streamed is not None,
        }])
        # the commit point: from here on readers see this write, and nothing of the slot's
        # earlier ones
        self._append("runs", pa.Table.from_pandas(run, RUN_SCHEMA, preserve_index=False), wid)
        self._drop_superseded({k: key[k] for k in SLOT}, wid)

    def _read(self, table: str, **where: str | None) -> pd.DataFrame:
        path = self.root / table
        with guarded(path, "reading the Delta table"):
            if not DeltaTable.is_deltatable(str(path)):
                return pd.DataFrame()
            df = DeltaTable(str(path)).to_pandas()
        for k, v in where.items():
            if v is not None:
                df = df[df[k] == v]
        if WRITE_ID not in df:  # (a table written before write ids)
            df[WRITE_ID] = None
        df[WRITE_ID] = df[WRITE_ID].fillna("")
        return df.reset_index(drop=True)

    def runs(self, backtest: str | None = None, candidate: str | None = None) -> pd.DataFrame:
        """The newest run of each slot (backtest, candidate, side): the one readers see."""
        df = self._read("runs", backtest=backtest, candidate=candidate)
        if df.empty:
            return df
        df = df.sort_values([WRITE_ID, "written_at_ms"]).drop_duplicates(list(SLOT), keep="last")
        return df.sort_values(list(SLOT)).reset_index(drop=True)

    def batches(self, backtest: str | None = None, candidate: str | None = None,
                run_id: str | None = None, side: str | None = None) -> pd.DataFrame:
        """Batch reports of the newest run of each slot, each run's whole (read again if a
        writer replaced a run between the two tables' reads)."""
        for _ in range(READ_ATTEMPTS):
            runs = self.runs(backtest, candidate)
            df = self._read("batch_reports", backtest=backtest, candidate=candidate,
                            run_id=run_id, side=side)
            if runs.empty:
                return df.iloc[0:0]
            for k, v in (("run_id", run_id), ("side", side)):
                if v is not None:
                    runs = runs[runs[k] == v]
            done = runs[[*KEY, WRITE_ID, "batches"]].rename(columns={"batches": "_batches"})
            got = df.merge(done, on=[*KEY, WRITE_ID]) if len(df) else df.iloc[0:0]
            seen = got.groupby(list(SLOT))["batch_id"].nunique() if len(got) else pd.Series()
            want = done.set_index(list(SLOT))["_batches"]
            if all(seen.get(s, 0) == n for s, n in want.items()):
                order = ["candidate", "side", "batch_id"] + \
                    (["operator_index"] if "operator_index" in got else [])
                return (got.drop(columns=["_batches", WRITE_ID])
                        .sort_values(order, kind="stable"))
            time.sleep(0.05)
        raise ResultsError(self.root, "batch_reports kept changing while read: a writer is "
                                      "replacing runs; read again")

    def run(self, backtest: str, candidate: str, run_id: str, side: str) -> StoredRun | None:
        """The slot's newest run if its run id is ``run_id`` (else None): its ``runs`` row, batch
        reports and outputs, all of one write (read again if a writer replaced the run between
        two reads). Only this write's rows are read (filters pushed down to the Delta scans)."""
        for _ in range(READ_ATTEMPTS):
            runs = self.runs(backtest, candidate)
            if runs.empty:
                return None
            row = runs[(runs["run_id"] == run_id) & (runs["side"] == side)]
            if row.empty:
                return None
            r = row.iloc[0]
            b = self._rows("batch_reports", r)
            o = self._rows("outputs", r)
            if len(pc.unique(b.column("batch_id"))) != r["batches"] \
                    or o.num_rows != r["output_rows"]:
                time.sleep(0.05)  # (replaced, and the older write's rows deleted, meanwhile)
                continue
            batches = b.drop_columns([WRITE_ID]).to_pandas()
            order = ["batch_id"] + (["operator_index"] if "operator_index" in batches else [])
            batches = batches.sort_values(order, kind="stable")
            chunked = r.get("batch_ordered")
            return StoredRun(r, batches.reset_index(drop=True),
                             _emitted(o, chunked is not None and not pd.isna(chunked)
                                      and bool(chunked)))
        raise ResultsError(self.root, f"{backtest}/{candidate}/{side}: replaced again at each "
                                      f"of {READ_ATTEMPTS} reads; read again")

    def _rows(self, table: str, run: pd.Series) -> pa.Table:
        """The rows of ``table`` that ``run`` (a ``runs`` row) wrote."""
        path = self.root / table
        where = ds.field("backtest") == run["backtest"]
        for k in KEY[1:]:
            where &= ds.field(k) == run[k]
        with guarded(path, "reading the Delta table"):
            dt = DeltaTable(str(path))
            if WRITE_ID in _columns(dt):
                where &= ds.field(WRITE_ID).is_null() if run[WRITE_ID] == "" \
                    else ds.field(WRITE_ID) == run[WRITE_ID]
            t = dt.to_pyarrow_dataset().to_table(filter=where)
        return t if WRITE_ID in t.column_names else t.append_column(
            WRITE_ID, pa.nulls(t.num_rows, pa.string()))

    def outputs(self, backtest: str, candidate: str, run_id: str, side: str) -> pd.DataFrame:
        """``batch_id`` and the emitted rows' columns, as stored (timestamps in epoch ms), in
        the order written, of the slot's newest run if its run id is ``run_id`` (else empty)."""
        run = self.run(backtest, candidate, run_id, side)
        return pd.DataFrame() if run is None else run.outputs


@dataclass(frozen=True)
class StoredRun:
    """One run as stored, all of one write: its ``runs`` row, batch reports (as written, in
    batch order) and emitted rows (``ResultsStore.outputs``' frame)."""

    row: pd.Series
    batches: pd.DataFrame
    outputs: pd.DataFrame


def _output_rows(outs: pd.DataFrame, ids: dict[str, str]) -> pa.Table:
    """Emitted rows as ``outputs`` stores them: the run's ids, ``batch_id`` and each row's
    JSON text, as one array (64-bit offsets: no 2 GB limit)."""
    n = len(outs)
    texts = json_texts(nan_kept(outs), [c for c in outs.columns if c != "batch_id"])
    return pa.table({  # (arrow arrays directly: no pandas object columns of the key per row)
        **{k: _constant(v, n) for k, v in ids.items()},
        "batch_id": outs["batch_id"].to_numpy(dtype=np.int64) if "batch_id" in outs
        else np.full(n, -1, dtype=np.int64),
        # one array: the Delta writer keeps the rows of a single record batch in order
        "row": pa.concat_arrays([c.cast(pa.large_string()) for c in texts.chunks])
        if texts.num_chunks else pa.array([], pa.large_string()),
    }, schema=_OUTPUT_WRITTEN)


def _time_columns(outs: pd.DataFrame) -> list[str]:
    """The emitted-row columns holding timestamps (``runs.time_columns``)."""
    return [c for c in outs.columns
            if c != "batch_id" and pd.api.types.is_datetime64_any_dtype(outs[c])]


def _emitted(t: pa.Table, chunked: bool = False) -> pd.DataFrame:
    """The stored rows in the order written; ``chunked`` (``runs.batch_ordered``): written in
    batch order, a range of batches per record batch (``semantics.output_chunks``), which the
    Delta writer may interleave but never reorders within: a stable sort by batch puts them
    back."""
    if not t.num_rows:
        return t.drop_columns([WRITE_ID]).to_pandas()
    order = batch_ordered(t.column("batch_id").to_numpy()) if chunked else None
    if order is not None:
        t = t.take(order)
    batch = pd.DataFrame({"batch_id": t.column("batch_id").to_numpy()})
    return pd.concat([batch, parsed_rows(t.column("row"))], axis=1)


def new_write_id() -> str:
    """Unique, and ordered as the writes began (fixed-width nanoseconds first)."""
    return f"{time.time_ns():020d}-{os.getpid():08d}-{secrets.token_hex(4)}"


def _holds(path: Path, wid: str) -> bool:
    """Whether the table at ``path`` holds rows of write ``wid`` (an append that did commit)."""
    table = DeltaTable(str(path))
    if WRITE_ID not in table.schema().to_arrow().names:
        return False
    return table.to_pyarrow_dataset().head(1, filter=ds.field(WRITE_ID) == wid).num_rows > 0


def _columns(table: DeltaTable) -> list[str]:
    return [f.name for f in table.schema().fields]


def check_folder(root: Path, create: bool = True) -> None:
    """Refuse (``ResultsError``) a results folder that is a file or cannot be created or
    written; create it if missing (without ``create``: check that the nearest folder that
    exists above it could hold it, and write nothing)."""
    if root.exists() and not root.is_dir():
        raise ResultsError(root, f"expected a folder for the results (Delta tables "
                                 f"{', '.join(TABLES)}), found a file")
    if not create and not root.exists():
        above = next(p for p in root.absolute().parents if p.exists())
        if not above.is_dir():
            raise ResultsError(root, "expected a folder for the results that can be created "
                                     "(Not a directory)")
        _probe(above)
        return
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsError(root, f"expected a folder for the results that can be created "
                                 f"({exc.strerror or exc})") from None
    _probe(root)


def _probe(folder: Path) -> None:
    """A file made and removed in ``folder``: permissions, read-only mounts and root alike."""
    try:
        fd, name = tempfile.mkstemp(prefix=".wmbt-probe-", dir=folder)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise ResultsError(folder, f"expected a writable folder ({exc.strerror or exc})") \
            from None


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


def _constant(value: str, n: int) -> pa.DictionaryArray:
    """``n`` times ``value`` as a string column to store: dictionary-encoded, 4 bytes a row
    where a plain string array repeats the text in every row (the ids of a million emitted
    rows took about 75 MB that way: bench/memory.py)."""
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)),
                                          pa.array([value], pa.string()))
