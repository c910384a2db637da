"""semantics.memory: freed arrays stay with the process for the next prediction."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# In a fresh interpreter (malloc's settings are process-wide): allocate a 20 MiB array and a
# 1.5 GiB one (past the largest mmap threshold glibc allows, and past the heap's free top;
# left untouched) and free each, and read glibc's mallinfo2 around that: whether the block was
# mmapped (hblks) and whether the heap kept the memory after the free (arena; up to
# memory.TOP_PAD, 1 GiB). Without M_MMAP_MAX = 0 the second block was mmapped.
SCRIPT = """
import ctypes, sys
import numpy as np
from semantics.memory import reuse_freed_memory

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks",
                                               "keepcost")]

info = ctypes.CDLL(None).mallinfo2
info.restype = Info
if sys.argv[1] == "reuse":
    assert reuse_freed_memory() and reuse_freed_memory()  # (idempotent)
for mib in (20, 1536):
    before = info()
    a = np.empty(mib << 17)
    during = info()
    del a
    after = info()
    print(during.hblks - before.hblks, after.arena >= min(mib, 1024) << 20)  # (TOP_PAD kept)
"""


def _has_mallinfo2() -> bool:
    try:
        return hasattr(ctypes.CDLL(None), "mallinfo2")
    except (OSError, TypeError):
        return False


@pytest.mark.skipif(not _has_mallinfo2(), reason="needs glibc >= 2.33 (mallinfo2)")
@pytest.mark.parametrize(("mode", "want"), [("reuse", "0 True\n0 True"),
                                                 ("default", "1 False\n1 False")])
def test_a_freed_large_array_stays_with_the_heap(mode: str, want: str) -> None:
    # reuse: each block comes from the heap (no new mmapped block) and its memory stays
    # after the free, for the next array; default (the control, which shows the reading can
    # tell): glibc mmaps it and gives it back.
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == want
