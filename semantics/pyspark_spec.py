"""``query: {pyspark: file.py:function}``: the job's own PySpark query (SPEC.md §1.1).

The model only names the code; nothing here imports or runs it (``semantics/`` stays free of
pyspark). :func:`check_pyspark_query` reads the file's syntax tree to refuse, before anything
runs, a missing file or a function the file does not define (docs/semantics.md §14).

Invariants: ``pyspark`` is ``<path>.py:<identifier>``; the path is relative to the spec file
(or absolute); a candidate's ``watermark`` keys are event-time *columns* of the code's
``withWatermark`` calls, checked against the plan by the jobs side (``jobs.pyspark_query``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from semantics.errors import SpecError

REF_RE = re.compile(r"^(?P<file>[^:]+\.py):(?P<function>[A-Za-z_][A-Za-z0-9_]*)$")


class PySparkQuery(BaseModel):
    """The job's own query: ``build(sources) -> DataFrame`` in a Python file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pyspark: str
    output_mode: Literal["append", "update", "complete"] = "append"

    @field_validator("pyspark")
    @classmethod
    def _ref(cls, ref: str) -> str:
        if not REF_RE.match(ref):
            raise ValueError(f"'file.py:function' (a Python file relative to the spec and a "
                             f"function in it), got {ref!r}")
        return ref

    @property
    def kind(self) -> str:
        return "pyspark"

    @property
    def file(self) -> str:
        return self.pyspark.rsplit(":", 1)[0]

    @property
    def function(self) -> str:
        return self.pyspark.rsplit(":", 1)[1]

    @property
    def keys(self) -> tuple[str, ...]:
        return ()


def code_path(base_dir: Path, query: PySparkQuery) -> Path:
    """The query's Python file (relative paths from the spec's folder)."""
    p = Path(query.file)
    return p if p.is_absolute() else base_dir / p


def check_pyspark_query(spec_path: str, base_dir: Path, query: PySparkQuery) -> None:
    """The file exists, is Python and defines ``function`` at its top level (read, not run)."""
    p = code_path(base_dir, query)
    if not p.is_file():
        raise SpecError(spec_path, "query.pyspark", f"an existing Python file ({p} not found)")
    try:
        tree = ast.parse(p.read_text(encoding="utf-8"), str(p))
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        raise SpecError(spec_path, "query.pyspark", f"a Python file that parses ({p}: {exc})"
                        ) from None
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    if query.function not in defined:
        raise SpecError(spec_path, "query.pyspark",
                        f"a function {query.function!r} defined at the top of {p} (defined: "
                        f"{', '.join(sorted(defined)) or 'none'})")


@dataclass(frozen=True)
class PySparkOrigin:
    """What a spec lowered from a pyspark query keeps of it (``jobs.pyspark_query.lower``): the
    query, and per source the event-time column its ``withWatermark`` names (the candidate's
    delay of the source replaces that call's delay in the replay)."""

    query: PySparkQuery
    watermark_columns: Mapping[str, str]
    digest: str = ""  # sha256 of the code file's text (a changed job is another run)
