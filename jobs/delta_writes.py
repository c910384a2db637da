"""Delta table operations that several processes can run on one folder at the same moment.

A Delta commit on a local filesystem is a put-if-absent of the next ``_delta_log`` version
(delta-rs moves its temporary commit file there by a rename or hard link that never replaces,
delta-io/delta-rs#126 and #621; ``tests/test_results_concurrency.py`` checks it): of two
writers of one version exactly one wins. The loser gets a conflict, which delta-rs resolves
itself where it can (two appends) and raises where it cannot (``CommitFailedError``: a delete
beside a concurrent delete or append of rows it read, a first commit beside another). So:

* ``create_table`` makes an empty table with its schema and takes "someone else created it
  first" as success: no writer ever overwrites a table it found missing;
* ``committed`` runs one commit again, after a jittered and growing pause, while delta-rs
  reports a conflict, a bounded number of times, then raises a ``ResultsError``;
* ``guarded`` turns what deltalake or the OS raise on a bad folder (permissions, a file where a
  folder belongs, a Rust panic: ``pyo3_runtime.PanicException``, a ``BaseException``) into a
  ``ResultsError`` naming the folder.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError

from semantics.errors import WmbtError

T = TypeVar("T")

ATTEMPTS = 12  # pauses of up to 0.05 * 2**k s, capped at 2 s: at most ~15 s in all
_BASE_S, _CAP_S = 0.05, 2.0
# delta-rs' words for a concurrent commit it could not reconcile, matched on a plain DeltaError
# too, should a code path word a conflict so rather than raise CommitFailedError
_CONFLICT_WORDS = ("conflict", "concurrent", "version already exists", "transaction failed",
                   "already exists")


class ResultsError(WmbtError):
    """The results folder cannot be used (names the folder and what it should be). Nothing of
    the write that met it became visible to readers."""

    def __init__(self, where: Path | str, expected: str) -> None:
        self.where, self.expected = str(where), expected
        super().__init__(f"{where}: {expected}")


def is_conflict(exc: BaseException) -> bool:
    if isinstance(exc, CommitFailedError):
        return True
    text = str(exc).lower()
    return isinstance(exc, DeltaError) and any(w in text for w in _CONFLICT_WORDS)


def _is_panic(exc: BaseException) -> bool:
    # pyo3_runtime is made at run time: its PanicException can only be known by name
    return type(exc).__name__ == "PanicException"


@contextmanager
def guarded(where: Path, doing: str) -> Iterator[None]:
    """Errors of deltalake and the filesystem while ``doing`` in ``where`` as a ResultsError."""
    try:
        yield
    except ResultsError:
        raise
    except (DeltaError, OSError, pa.ArrowException) as exc:
        raise ResultsError(where, f"{doing} failed: expected a writable folder of Delta "
                                  f"tables ({_first_line(exc)})") from exc
    except BaseException as exc:
        if _is_panic(exc):
            raise ResultsError(where, f"{doing} failed: deltalake stopped on "
                                      f"{_first_line(exc)!r}; expected a writable folder of "
                                      f"Delta tables") from None
        raise


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def committed(path: Path, doing: str, commit: Callable[[], T],
              done: Callable[[], bool] = lambda: False) -> T | None:
    """``commit()``, again while it meets a concurrent commit it conflicts with.

    ``done()`` tells, before a retry, whether an attempt that raised did commit after all (an
    append found by its write id): a retry never writes the same rows twice. Returns
    ``commit()``'s value, or None when ``done()`` found the work already there."""
    last: BaseException | None = None
    for attempt in range(ATTEMPTS):
        try:
            with guarded(path, doing):
                if attempt and done():
                    return None
                return commit()
        except ResultsError as err:
            if err.__cause__ is None or not is_conflict(err.__cause__):
                raise
            last = err.__cause__
        time.sleep(random.uniform(0, min(_CAP_S, _BASE_S * 2 ** attempt)))  # full jitter
    raise ResultsError(path, f"{doing}: other processes kept committing to this table "
                             f"({ATTEMPTS} attempts); this write is not visible, run it "
                             f"again") from last


def create_table(path: Path, schema: pa.Schema) -> None:
    """An empty Delta table with ``schema`` at ``path``, unless one is there: safe when other
    processes create it at the same moment (one commit of version 0 wins, the others see it)."""
    if DeltaTable.is_deltatable(str(path)):
        return
    with guarded(path, "creating the Delta table"):
        path.mkdir(parents=True, exist_ok=True)
        try:
            DeltaTable.create(str(path), schema, mode="ignore")
        except DeltaError:
            if not DeltaTable.is_deltatable(str(path)):  # (not another creator's table)
                raise
