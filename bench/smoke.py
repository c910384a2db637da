"""``WMBT_BENCH_SMOKE=1``: every bench script runs end to end on tiny inputs, in seconds.

tests/test_docs_commands.py runs each ``bench/...`` command of the docs so: the script, its
arguments and its table header are checked, its figures mean nothing. Each script shrinks its
own sizes after parsing its arguments (so a command line asking for 10 M events still runs
tiny) and leaves out the Spark replays that take minutes.
"""

from __future__ import annotations

import os

VARIABLE = "WMBT_BENCH_SMOKE"


def smoke() -> bool:
    """Whether this run is a smoke run (``WMBT_BENCH_SMOKE=1``)."""
    return os.environ.get(VARIABLE, "") == "1"


def tiny(n: int, cap: int) -> int:
    """``n``, or at most ``cap`` in a smoke run."""
    return min(n, cap) if smoke() else n
