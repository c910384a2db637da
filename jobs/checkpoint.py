"""Read what Spark actually executed from a streaming checkpoint (classic layout, Spark 4.0).

* ``commits/<b>``: batch ``b`` completed (only committed batches are reported);
* ``offsets/<b>``: line 1 ``v1``, line 2 the batch metadata (``batchWatermarkMs``, ...), then one
  JSON offset per source of the plan; the replay's file source offset is ``{"logOffset": L}``
  (a self-joined source may appear on several lines; they must agree);
* ``sources/0/<L>`` (and compacted ``<L>.compact``): JSON lines ``{"path", "timestamp",
  "batchId": L}`` — the files the file source added at log offset ``L``.

A batch is a *data* batch iff its log offset advanced over the previous batch's; its input files
are the log entries with ``batchId`` in ``(previous, current]``.
"""

from __future__ import annotations

import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

_VERSIONED = re.compile(r"^(\d+)\.(delta|snapshot|changelog|zip)$")


@dataclass(frozen=True)
class ExecutedBatch:
    batch_id: int
    watermark_ms: int
    has_data: bool
    files: tuple[str, ...]  # input files read by this batch, in log order


def _numbered(d: Path) -> list[int]:
    if not d.is_dir():
        return []
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit())


def committed_batches(checkpoint: Path) -> list[int]:
    return _numbered(checkpoint / "commits")


def _offset_lines(checkpoint: Path, batch_id: int) -> tuple[dict, list[dict | None]]:
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    meta = json.loads(lines[1]) if len(lines) > 1 else {}
    offs = [None if ln.strip() in ("", "-") else json.loads(ln) for ln in lines[2:]]
    return meta, offs


def _log_offset(offs: list[dict | None], batch_id: int) -> int | None:
    vals = {o.get("logOffset") for o in offs if o is not None}
    if len(vals) > 1:
        raise ValueError(f"offsets/{batch_id}: the file source appears with different offsets "
                         f"{sorted(vals)}")
    return vals.pop() if vals else None


def source_log(checkpoint: Path, source: int = 0) -> dict[int, list[str]]:
    """Files per log offset of file source ``source`` (compacted logs included)."""
    d = checkpoint / "sources" / str(source)
    out: dict[int, list[str]] = {}
    if not d.is_dir():
        return out
    for p in sorted(d.iterdir()):
        if p.name.startswith(".") or not re.fullmatch(r"\d+(\.compact)?", p.name):
            continue
        for line in p.read_text().splitlines()[1:]:
            if not line.strip():
                continue
            e = json.loads(line)
            files = out.setdefault(int(e["batchId"]), [])
            if e["path"] not in files:
                files.append(e["path"])
    return out


def executed_batches(checkpoint: Path) -> list[ExecutedBatch]:
    """Every committed batch with its watermark, data flag and input files."""
    log = source_log(checkpoint)
    out: list[ExecutedBatch] = []
    prev: int | None = None
    for b in committed_batches(checkpoint):
        meta, offs = _offset_lines(checkpoint, b)
        cur = _log_offset(offs, b)
        has_data = cur is not None and (prev is None or cur > prev)
        files: list[str] = []
        if has_data:
            lo = -1 if prev is None else prev
            for off in range(lo + 1, cur + 1):
                files.extend(log.get(off, []))
        out.append(ExecutedBatch(b, int(meta.get("batchWatermarkMs", 0)), has_data,
                                 tuple(files)))
        prev = cur if cur is not None else prev
    return out


def _remove(path: Path) -> None:
    """``path`` and its checksum file (``.<name>.crc``, written by Hadoop's local file system)."""
    path.unlink(missing_ok=True)
    (path.parent / f".{path.name}.crc").unlink(missing_ok=True)


def reopen(checkpoint: Path, first: int) -> None:
    """Make Spark run batch ``first`` again when the query restarts, and plan every later batch
    anew, as if the query had stopped before committing ``first``.

    Removes, latest first, the commits from ``first`` on and the offsets after it, then the
    file source's log entries after the offset of ``first`` (their files count as new again;
    Spark would otherwise put every file it had already logged into the next batch). Spark then
    re-runs ``first`` from ``offsets/<first>`` (its input, its watermark) on the state the
    batch read, as after a failure before its commit. Every step leaves a checkpoint Spark
    restarts from; a kill in between only leaves more to redo.
    """
    _, offs = _offset_lines(checkpoint, first)
    keep = _log_offset(offs, first)
    for b in sorted(set(_numbered(checkpoint / "offsets")) | set(committed_batches(checkpoint)),
                    reverse=True):
        if b >= first:
            _remove(checkpoint / "commits" / str(b))
        if b > first:
            _remove(checkpoint / "offsets" / str(b))
    log = checkpoint / "sources" / "0"
    for off in _numbered(log):
        if keep is None or off > keep:
            _remove(log / str(off))


def compacted(checkpoint: Path) -> bool:
    """Has the file source's log been compacted (entries of many offsets in one file)?"""
    d = checkpoint / "sources" / "0"
    return d.is_dir() and any(p.name.endswith(".compact") for p in d.iterdir())


def _sst_versions(store: Path) -> dict[str, int]:
    """RocksDB without changelogs: each SST file under ``store/SSTs`` with the first version
    whose ``<v>.zip`` lists it (its ``metadata`` entry: ``v1`` then JSON with ``sstFiles``)."""
    first: dict[str, int] = {}
    zips = sorted((int(m.group(1)), p) for p in store.glob("*.zip")
                  if (m := _VERSIONED.match(p.name)))
    for v, p in zips:
        try:
            with zipfile.ZipFile(p) as z:
                meta = z.read("metadata").decode().split("\n", 1)[1]
        except (KeyError, IndexError, zipfile.BadZipFile):
            continue
        for f in json.loads(meta).get("sstFiles", []):
            first.setdefault(f["dfsSstFileName"], v)
    return first


def _rocksdb_snapshot(p: Path) -> bool:
    """A RocksDB snapshot upload: ``<v>.zip`` or an SST file under ``SSTs/``."""
    return p.name.endswith(".zip") or p.parent.name == "SSTs"


def state_bytes_by_batch(checkpoint: Path, batch_ids: list[int]) -> dict[int, int]:
    """Approximate on-disk state size after each batch.

    Counts the files under ``state/`` whose state-store version is
    ``<= batch_id + 1`` (batch ``b`` commits version ``b + 1``), plus every unversioned file
    (metadata, schemas); hidden files (checksums, temporary files a killed replay left) are
    not counted, nor snapshots: copies of a version that background maintenance writes at
    times of its own (every minute by default), with which two runs of one replay would
    report different bytes (a resumed one must report what an uninterrupted one does:
    ``jobs.resume``) — the HDFS state store's ``<v>.snapshot`` files and, for RocksDB with
    changelog checkpointing (a store directory holding ``<v>.changelog`` files), its
    ``<v>.zip`` files and the SST files under ``SSTs/`` (:func:`snapshot_bytes` sums them).
    RocksDB without changelogs uploads a ``<v>.zip`` and the new SST files at every commit:
    each zip counts from its version, each SST from the first version whose zip lists it.
    Approximation: measured after the run, and files of old versions are only present
    because the replay keeps every version (``spark.sql.streaming.minBatchesToRetain`` is
    raised during the replay).
    """
    root = checkpoint / "state"
    versioned: list[tuple[int, int]] = []
    fixed = 0
    changelogs: dict[Path, bool] = {}
    ssts: dict[Path, dict[str, int]] = {}
    if root.is_dir():
        for p in root.rglob("*"):
            if not p.is_file() or p.name.startswith(".") or p.name.endswith(".crc"):
                continue
            m = _VERSIONED.match(p.name)
            if m and m.group(2) == "snapshot":
                continue
            size = p.stat().st_size
            if _rocksdb_snapshot(p):
                store = p.parent.parent if p.parent.name == "SSTs" else p.parent
                if store not in changelogs:
                    changelogs[store] = any(store.glob("*.changelog"))
                if changelogs[store]:
                    continue
                if p.parent.name == "SSTs":
                    if store not in ssts:
                        ssts[store] = _sst_versions(store)
                    v = ssts[store].get(p.name)
                    if v is not None:
                        versioned.append((v, size))
                        continue
            if m:
                versioned.append((int(m.group(1)), size))
            else:
                fixed += size
    return {b: fixed + sum(s for v, s in versioned if v <= b + 1) for b in batch_ids}


def snapshot_bytes(checkpoint: Path) -> int:
    """Bytes of the snapshots :func:`state_bytes_by_batch` leaves out where changelogs or delta
    files carry the versions: ``<v>.snapshot`` files, and RocksDB's ``<v>.zip`` and SST files
    in store directories that hold changelogs (the last maintenance's uploads, all kept)."""
    root = checkpoint / "state"
    total = 0
    if not root.is_dir():
        return 0
    for p in root.rglob("*"):
        if not p.is_file() or p.name.startswith(".") or p.name.endswith(".crc"):
            continue
        store = p.parent.parent if p.parent.name == "SSTs" else p.parent
        if p.name.endswith(".snapshot") or (_rocksdb_snapshot(p)
                                            and any(store.glob("*.changelog"))):
            total += p.stat().st_size
    return total
