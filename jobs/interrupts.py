"""Ctrl-C and SIGTERM during a replay: raised where the driver waits, never inside a py4j call.

PySpark's own SIGINT handler cancels every Spark job (the running batch then fails with pages
of py4j and Java errors) and raises KeyboardInterrupt wherever the main thread is, often in the
middle of a py4j call, which leaves that thread's py4j connection out of step (its answer
arrives later, as the answer to the next call). During a replay both signals are handled here
instead: the long, blocking calls (``awaitTermination``, ``processAllAvailable``) run in a
helper thread while the main thread waits for it, and a signal raises KeyboardInterrupt only in
that wait, or at the next :meth:`Interrupts.check` (SIGTERM as ``jobs.exits.Terminated``, the
KeyboardInterrupt the CLI tells apart: exit 143, not 130). The JVM does not see Ctrl-C
(PySpark starts it with SIGINT ignored), so the replay can stop the query itself.

Only the main thread can handle signals; elsewhere (e.g. a Dagster worker thread) nothing is
installed and the waits are plain.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from jobs.exits import Terminated

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """A context manager installing the handlers; restores the previous ones on exit."""

    def __init__(self) -> None:
        self.pending = 0  # the signal that came (0: none)
        self._waiting = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for s in _SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.pending = signum
        if self._waiting:
            self.check()

    def check(self) -> None:
        """Raise KeyboardInterrupt (:class:`Terminated` for SIGTERM) if a signal came since the
        replay started."""
        if self.pending == signal.SIGTERM:
            raise Terminated
        if self.pending:
            raise KeyboardInterrupt

    def wait(self, call: Callable[[], object]) -> None:
        """Run ``call`` in a helper thread and wait for it; its exception is raised here."""
        self.check()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                call()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                failure.append(exc)

        helper = threading.Thread(target=run, name="wmbt-replay-wait", daemon=True)
        helper.start()
        self._waiting = True
        try:
            self.check()
            while helper.is_alive():
                helper.join(0.5)
        finally:
            self._waiting = False
        if failure:
            raise failure[0]
