"""Load and run the job's own PySpark function (SPEC.md §1.1, docs/semantics.md §14).

The user's ``build(sources)`` is imported afresh from its file and called with
``withWatermark`` wrapped (a candidate's delay replaces the code's, by event-time column) and
``window`` / ``session_window`` recorded (their arguments are what the planner reads). Used by
the replay (``jobs.query``) and the planner (``jobs.pyspark_query``).

Invariants: the wrappers are in place only while the code loads and runs (one call at a time);
the output columns are the DataFrame's own, flattened and numbered by :func:`flat_columns`.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from semantics.errors import SpecError
from semantics.pyspark_spec import PySparkQuery, code_path
from semantics.spec import BacktestSpec

# -- the code's calls, recorded while it runs -------------------------------------------------

@dataclass(frozen=True)
class WindowCall:
    column: str
    duration: str
    slide: str | None
    start: str | None
    session: bool = False
    # a dynamic session gap (``duration == "<dynamic>"``): the Column as Spark prints it, for
    # messages; the planner reads the resolved expression from the plan (docs/semantics.md §14)
    gap_text: str | None = None


@dataclass
class Recorder:
    watermarks: list[tuple[str, str]] = field(default_factory=list)  # (column, delay as written)
    windows: list[WindowCall] = field(default_factory=list)
    delays: Mapping[str, str] = field(default_factory=dict)  # column -> candidate's delay


_LOCK = threading.Lock()
_ACTIVE: list[Recorder] = []


def _name(col: Column | str) -> str:
    return col if isinstance(col, str) else str(col._jc.toString()).strip("`'")


@contextmanager
def _recording(frame_class: type, delays: Mapping[str, str]) -> Iterator[Recorder]:
    """Wrap ``withWatermark`` (delays replaced by column) and ``window`` / ``session_window``
    (their arguments recorded) while the user's code is loaded and run."""
    import pyspark.sql.functions as funcs

    rec = Recorder(delays=delays)
    orig_wm = frame_class.withWatermark
    orig_window, orig_session = funcs.window, funcs.session_window

    def with_watermark(self: DataFrame, eventTime: str, delayThreshold: str) -> DataFrame:
        rec.watermarks.append((eventTime, delayThreshold))
        return orig_wm(self, eventTime, rec.delays.get(eventTime, delayThreshold))

    def window(timeColumn: Column | str, windowDuration: str, slideDuration: str | None = None,
               startTime: str | None = None) -> Column:
        if _ACTIVE:
            _ACTIVE[-1].windows.append(WindowCall(_name(timeColumn), windowDuration,
                                                  slideDuration, startTime))
        return orig_window(timeColumn, windowDuration, slideDuration, startTime)

    def session_window(timeColumn: Column | str, gapDuration: Column | str) -> Column:
        if _ACTIVE:
            gap = gapDuration if isinstance(gapDuration, str) else "<dynamic>"
            text = None if isinstance(gapDuration, str) else str(gapDuration._jc.toString())
            _ACTIVE[-1].windows.append(WindowCall(_name(timeColumn), gap, None, None, True,
                                                  text))
        return orig_session(timeColumn, gapDuration)

    with _LOCK:
        frame_class.withWatermark = with_watermark
        funcs.window, funcs.session_window = window, session_window
        _ACTIVE.append(rec)
        try:
            yield rec
        finally:
            _ACTIVE.pop()
            frame_class.withWatermark = orig_wm
            funcs.window, funcs.session_window = orig_window, orig_session


_COUNTER = itertools.count()


def _load(spec: BacktestSpec, query: PySparkQuery) -> Callable[..., DataFrame]:
    """The user's function, from a fresh import of its file (errors name ``query.pyspark``)."""
    path = code_path(spec.base_dir, query)
    name = f"wmbt_user_query_{next(_COUNTER)}"
    mspec = importlib.util.spec_from_file_location(name, path)
    if mspec is None or mspec.loader is None:
        raise SpecError(spec.path, "query.pyspark", f"an importable Python file ({path})")
    module: ModuleType = importlib.util.module_from_spec(mspec)
    sys.path.insert(0, str(path.parent))
    try:
        mspec.loader.exec_module(module)
    except Exception as exc:  # (the user's code: any error it raises is theirs)
        raise SpecError(spec.path, "query.pyspark", f"a Python file that imports ({path}: "
                        f"{type(exc).__name__}: {exc})") from None
    finally:
        sys.path.remove(str(path.parent))
    fn = getattr(module, query.function, None)
    if not callable(fn):
        raise SpecError(spec.path, "query.pyspark", f"a function {query.function!r} in {path}")
    return fn


def call_user(spec: BacktestSpec, query: PySparkQuery, frames: dict[str, DataFrame],
          delays: Mapping[str, str]) -> tuple[DataFrame, Recorder]:
    frame_class = type(next(iter(frames.values())))
    with _recording(frame_class, delays) as rec:
        fn = _load(spec, query)
        try:
            df = fn(frames)
        except Exception as exc:
            raise SpecError(spec.path, "query.pyspark", f"a function that builds the query "
                            f"({query.function} raised {type(exc).__name__}: {exc})") from None
    if not isinstance(df, DataFrame) or not df.isStreaming:
        raise SpecError(spec.path, "query.pyspark", f"{query.function}(sources) returning a "
                        "streaming DataFrame")
    return df, rec


# -- output columns -----------------------------------------------------------------------------

def flat_columns(df: DataFrame) -> tuple[list[Column], list[str]]:
    """The DataFrame's columns with a struct column flattened to ``<name>_<field>`` and a
    repeated name numbered ``name#2``, ``name#3`` (SPEC.md §3): the selection and its names."""
    cols: list[Column] = []
    names: list[str] = []
    seen: dict[str, int] = {}
    jcols = df._jdf.queryExecution().analyzed().output()
    for i in range(jcols.size()):
        attr = jcols.apply(i)
        # (quoted: a name such as `CAST(session_window.start AS BIGINT)` is one column)
        quoted = "`" + str(attr.name()).replace("`", "``") + "`"
        base = df[quoted] if hasattr(df, "__getitem__") else F.col(quoted)
        dt = df.schema.fields[i].dataType
        parts: list[tuple[Column, str]]
        if dt.typeName() == "struct":
            parts = [(base.getField(f.name), f"{attr.name()}_{f.name}")
                     for f in dt.fields]  # type: ignore[attr-defined]
        else:
            parts = [(base, str(attr.name()))]
        for c, n in parts:
            seen[n] = seen.get(n, 0) + 1
            out = n if seen[n] == 1 else f"{n}#{seen[n]}"
            cols.append(c.alias(out))
            names.append(out)
    return cols, names
