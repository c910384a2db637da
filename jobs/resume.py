"""Resuming an interrupted replay: the candidate work folder's manifest and what to keep of it.

A replay (``jobs.replay``) works in ``<workdir>/<candidate>``: ``input`` (the tick files),
``checkpoint`` (Spark's), ``outputs`` (the sink's files, ``jobs.sink``), ``progress`` (one
``<batch_id>.json`` per executed batch, ``jobs.progress``) and ``manifest.json``, written when
the replay starts and marked complete when it ends: the fingerprint of everything that decides
Spark's batches (spec, candidate, schedule with every row's values, Spark settings, pyspark
version) and the replay's state (``running``, ``complete`` or ``failed``).

A replay that finds a ``running`` manifest (its process was interrupted: Ctrl-C, SIGTERM or
SIGKILL) with the same fingerprint continues from the checkpoint. Otherwise it wipes the folder
and starts afresh, saying why, unless the previous replay had ended (a rerun, as always).

Why a resumed replay reports exactly what an uninterrupted one does:

* every committed batch but the last has its progress saved: the sink of batch ``b`` saves the
  progress of batch ``b - 1`` before Spark commits ``b`` (``jobs.sink``); the last one's may be
  lost (a kill between Spark's commit and the next batch's sink);
* the checkpoint is reopened at the last committed batch ``n`` but one (``jobs.checkpoint.
  reopen``): Spark runs ``n - 1`` again from its offsets (its input, its watermark), on the
  state it read, then plans ``n`` and the rest anew, by the same rules, from the same files
  (those it had not read before ``n`` are fed again, at the replay's pace). Why not ``n``
  alone: its progress may be lost, and the first batch after a restart reports another
  ``memoryUsedBytes`` (the state store's cache then holds a version read from files, not the
  one the previous batch built), so that batch's progress must be one saved before: ``n - 1``'s
  is, and a batch's first saved progress is kept (``jobs.progress.save``). Batch ``n`` then runs
  on the cache an uninterrupted run has, and a no-data batch due after ``n - 1`` or ``n`` is
  run by Spark's rule on the previous execution, as without the kill (a restart right after a
  commit would skip it). The sink's files of ``n - 1`` and later are written again (each
  batch's file replaced atomically, by batch id);
* Spark restores the global watermark from the offset log but forgets the per-input watermarks
  on a restart (docs/replay.md); with one watermarked input the next watermark is the same
  (the global one already holds that input's maximum), with several it may differ, so such a
  query starts afresh instead.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import pyspark

from jobs import checkpoint as ckpt
from jobs import feed, progress, sink
from semantics.errors import WmbtError
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec

MANIFEST = "manifest.json"
FORMAT = 1


@dataclass(frozen=True)
class Fingerprint:
    """Hashes of what decides a replay's batches; equal fingerprints, equal replays."""

    spec: str
    data: str
    spark_conf: str
    pyspark: str


_CHANGED = {"spec": "the spec changed", "data": "the data changed",
            "spark_conf": "the Spark settings changed"}


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()[:32]


def fingerprint(spec: BacktestSpec, candidate: str, schedule: Schedule,
                conf: dict[str, str]) -> Fingerprint:
    """Other candidates and ``expect`` are left out: they change nothing in this replay."""
    own = spec.model_dump_json(exclude={"path", "candidates", "expect"})
    if spec._pyspark is not None:  # (the job's own code: its text is part of the query)
        own += spec._pyspark.digest
    cand = spec.candidates[candidate].model_dump_json()
    data = [json.dumps(schedule.summary(), sort_keys=True, default=str).encode()]
    for s, df in sorted(schedule.rows.items()):
        data.append(s.encode())
        data.append(json.dumps([[c, str(t)] for c, t in df.dtypes.items()]).encode())
        data.append(pd.util.hash_pandas_object(df, index=False).values.tobytes())
    return Fingerprint(spec=_sha(own.encode(), candidate.encode(), cand.encode()),
                       data=_sha(*data),
                       spark_conf=_sha(json.dumps(conf, sort_keys=True).encode()),
                       pyspark=pyspark.__version__)


@dataclass(frozen=True)
class Start:
    """How a replay starts: ``rerun`` is the batch Spark runs again first (None: afresh);
    ``reason`` says why an interrupted replay was not resumed (None: nothing was lost)."""

    rerun: int | None
    reason: str | None


@contextmanager
def exclusive(cdir: Path) -> Iterator[None]:
    """Hold the work folder for one replay at a time (a lock the OS drops with its process,
    however that ends); a second replay of the candidate there is refused, changing nothing."""
    cdir.parent.mkdir(parents=True, exist_ok=True)
    with open(cdir.parent / f".{cdir.name}.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WmbtError(f"{cdir}: another wmbt process is replaying this candidate there; "
                            "wait for it, or give another --results folder") from None
        yield


def _read_manifest(cdir: Path) -> dict | None:
    try:
        doc = json.loads((cdir / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("format") == FORMAT else None


def write_manifest(cdir: Path, fp: Fingerprint, state: str) -> None:
    """Atomically (temp file + rename): a kill leaves the old manifest or the new one."""
    cdir.mkdir(parents=True, exist_ok=True)
    tmp = cdir / f".{MANIFEST}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"format": FORMAT, "state": state, "fingerprint": asdict(fp)},
                              indent=1))
    os.replace(tmp, cdir / MANIFEST)


def _why_not(cdir: Path, fp: Fingerprint, exact: bool, fresh: bool,
             restarts: bool = False) -> str | None:
    """Why the interrupted replay in ``cdir`` cannot be resumed (None: it can)."""
    if fresh:
        return "a fresh start was asked for (--fresh)"
    if restarts:  # (which run it was in, and with which settings, is not kept)
        return "the replay restarts the query (replay.restarts): an interrupted one starts " \
               "afresh"
    doc = _read_manifest(cdir)
    if doc is None:
        return "the interrupted replay left no manifest (an older wmbt wrote it)"
    old = doc.get("fingerprint") or {}
    for key, what in _CHANGED.items():
        if old.get(key) != getattr(fp, key):
            return f"{what} since the interrupted replay"
    if old.get("pyspark") != fp.pyspark:
        return f"pyspark changed since the interrupted replay ({old.get('pyspark')} -> " \
               f"{fp.pyspark})"
    if not exact:
        return ("the query has several watermarked inputs, whose watermarks Spark forgets "
                "on a restart (a resumed replay could differ)")
    return None


def prepare(cdir: Path, fp: Fingerprint, *, exact: bool, fresh: bool = False,
            restarts: bool = False) -> Start:
    """Make ``cdir`` ready for a replay with fingerprint ``fp``: keep an interrupted replay's
    checkpoint when it can be resumed exactly (``exact``: the query has at most one
    watermarked input; ``restarts``: the replay restarts the query, never resumed), else wipe
    the folder; then mark the manifest ``running``."""
    doc = _read_manifest(cdir) if cdir.exists() else None
    interrupted = cdir.exists() and (doc is None or doc.get("state") == "running") \
        and (cdir / "checkpoint").exists()
    start = Start(None, None)
    if interrupted:
        reason = _why_not(cdir, fp, exact, fresh, restarts)
        if reason is None:
            start = _roll_back(cdir)
        else:
            start = Start(None, reason)
    if start.rerun is None and cdir.exists():
        shutil.rmtree(cdir)
    write_manifest(cdir, fp, "running")
    return start


def _roll_back(cdir: Path) -> Start:
    """Reopen the checkpoint at the last committed batch but one (see the module docstring) and
    drop what later batches left: their sink files, their saved progress and the input files
    Spark had not read before (they are fed again, at the replay's pace)."""
    cp = cdir / "checkpoint"
    try:
        executed = ckpt.executed_batches(cp)
    except (OSError, ValueError, KeyError) as exc:
        return Start(None, f"the interrupted replay's checkpoint cannot be read ({exc})")
    if not executed:
        return Start(None, "the interrupted replay had completed no batch")
    first = max(executed[-1].batch_id - 1, 0)
    saved = progress.saved_batches(cdir / "progress")
    needed = [b.batch_id for b in executed if b.batch_id < first or 0 < b.batch_id == first]
    missing = [b for b in needed if b not in saved]
    if missing:  # (Spark Connect: the sink cannot save progress while the query runs)
        return Start(None, f"the interrupted replay saved no progress of batch {missing[0]}")
    if ckpt.compacted(cp):
        return Start(None, "the file source's log of the interrupted replay was compacted")
    read = {feed.tick_of_file(f) for b in executed if b.batch_id <= first for f in b.files}
    ckpt.reopen(cp, first)
    sink.drop_batches(cdir / "outputs", first)
    progress.drop_saved(cdir / "progress", first + 1)
    for f in (cdir / "input").glob("tick-*.parquet"):
        if feed.tick_of_file(f.name) not in read:
            f.unlink()
    return Start(first, None)
