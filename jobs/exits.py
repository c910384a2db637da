"""How a ``wmbt`` command ends: its exit code and at most one line on stderr, whatever
happened (jobs/cli.py's docstring lists the codes), and a JSON document on stdout whole or
not at all."""

from __future__ import annotations

import logging
import os
import select
import signal
import sys
import threading
import traceback
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from semantics.errors import WmbtError

INTERNAL_ERROR = 3
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C ended
TERMINATED = 143  # 128 + SIGTERM
BROKEN_PIPE = 141  # 128 + SIGPIPE


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, as Ctrl-C raises KeyboardInterrupt: whatever
    cleans up after an interruption (a replay stopping its query) runs for both."""


def write_document(text: str | Iterable[str]) -> None:
    """Write ``text`` (a whole JSON document) to stdout and flush it, in one piece: SIGINT or
    SIGTERM arriving meanwhile takes effect once it is out, not halfway (a write to a pipe
    blocks while the reader is behind; an interruption there would leave half a document).
    ``text`` may come in pieces (a streamed prediction's rows: ``output_chunks``), each
    written as it comes."""
    pieces = [text] if isinstance(text, str) else _blocks(text)
    if threading.current_thread() is not threading.main_thread():
        for piece in pieces:
            _write_all(piece)
        return
    held: list[int] = []
    handlers = {sig: signal.signal(sig, lambda n, _f: held.append(n))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for piece in pieces:
            _write_all(piece)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        if held:
            signal.raise_signal(held[0])


def _blocks(pieces: Iterable[str], size: int = 1 << 20) -> Iterator[str]:
    """``pieces`` joined into blocks of at least ``size`` characters (the last one: what is
    left): a write per block, not per piece. Small writes each take a page of a pipe of their
    own, so a reader that stopped would see it blocked before it holds a pipe's worth.

    >>> list(_blocks(["ab", "c", "de", "f"], 3))
    ['abc', 'def']
    """
    held: list[str] = []
    n = 0
    for piece in pieces:
        held.append(piece)
        n += len(piece)
        if n >= size:
            yield "".join(held)
            held, n = [], 0
    if held:
        yield "".join(held)


def _write_all(text: str) -> None:
    """``text`` to stdout, flushed. A buffered write that a signal interrupts returns short
    (and the text layer above drops the rest), hence the bytes written until all are out."""
    out = sys.stdout
    binary = getattr(out, "buffer", None)
    if binary is None:  # (a text-only stream: a test's, say)
        out.write(text)
        out.flush()
        return
    out.flush()
    data = memoryview(text.encode(out.encoding or "utf-8", out.errors or "strict"))
    while data:
        data = data[binary.write(data):]
    binary.flush()


@contextmanager
def watch_signals(received: bytearray) -> Iterator[None]:
    """While the command runs (in the main thread): SIGTERM raises :class:`Terminated` unless
    the process set its handling already (main in another program), and ``received`` gets
    the SIGINT and SIGTERM the process got, whichever Python handler took them: pyspark's
    SparkContext puts its own on SIGINT, and a Ctrl-C there can surface as a Py4JError."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(_signum: int, _frame: object) -> None:
        raise Terminated

    ours = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    previous = signal.signal(signal.SIGTERM, terminate) if ours else None
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    try:
        yield
    finally:
        signal.set_wakeup_fd(wakeup)
        if ours:
            signal.signal(signal.SIGTERM, previous)
        try:
            received += os.read(read, 1 << 16)  # (one byte a signal)
        except BlockingIOError:
            pass
        os.close(read)
        os.close(write)


class _OneLine(logging.Formatter):
    """A log record as ``LEVEL:logger:message`` (logging's default), its traceback only for
    ``--debug``."""

    def __init__(self, debug: bool) -> None:
        super().__init__(logging.BASIC_FORMAT)
        self.debug = debug

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and not self.debug:
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None,
                                            "exc_text": None})
        return super().format(record)


def _not_interrupted(record: logging.LogRecord) -> bool:
    """Whether a record is more than an interruption noticed (py4j logs each KeyboardInterrupt
    that lands in one of its calls, with the traceback): ``failed`` says it once."""
    exc = record.exc_info[1] if record.exc_info else None
    return not isinstance(exc, KeyboardInterrupt)


@contextmanager
def quiet_logging(debug: bool) -> Iterator[None]:
    """Records logged to the root logger while the command runs (py4j logs there, through
    ``logging.exception``) in one line each, unless the process configured logging already."""
    root = logging.getLogger()
    if root.handlers:
        yield
        return
    handler = logging.StreamHandler()
    handler.setFormatter(_OneLine(debug))
    handler.addFilter(_not_interrupted)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


def _interruption(exc: BaseException, received: bytes) -> int | None:
    """The exit code of an interrupted command, or None: ``exc`` is, or was raised while
    handling, a KeyboardInterrupt (Ctrl-C) or :class:`Terminated` (SIGTERM), or ended a
    command during which the process got one of these signals."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return TERMINATED if isinstance(cause, Terminated) else INTERRUPTED
        seen.add(id(cause))
        cause = cause.__context__
    for sig in received:
        if sig in (signal.SIGINT, signal.SIGTERM):
            return TERMINATED if sig == signal.SIGTERM else INTERRUPTED
    return None


def _one_line(exc: BaseException) -> str:
    """``ExcType: the message's first line`` (a Spark or Rust error's message goes on for
    pages: its stack traces)."""
    lines = str(exc).strip().splitlines()
    first = lines[0].strip() if lines else ""
    if len(first) > 300:
        first = first[:300] + " ..."
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _stdout_gone() -> bool:
    """Whether stdout is a pipe nobody reads any more."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (OSError, ValueError, AttributeError):  # (no file descriptor: a test's stream)
        return False


def failed(exc: BaseException, received: bytes, debug: bool) -> int:
    """Say why the command failed in one line on stderr (after the traceback when
    ``debug``); return the exit code."""
    if isinstance(exc, BrokenPipeError) and _stdout_gone():
        # the reader of stdout went away: nothing more to tell it (and no complaint from
        # Python's exit flushing stdout again)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
    if debug:
        traceback.print_exception(exc)
    interrupted = _interruption(exc, received)
    if interrupted is not None:
        print("wmbt: interrupted", file=sys.stderr)
        return interrupted
    if isinstance(exc, WmbtError):
        print(f"wmbt: error: {exc}", file=sys.stderr)
        return exc.exit_code
    hint = "" if debug else " (run with --debug for the traceback)"
    print(f"wmbt: internal error: {_one_line(exc)}{hint}", file=sys.stderr)
    return INTERNAL_ERROR
