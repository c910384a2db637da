"""The modules of jobs/ import each other without a circle, and none imports the command line
(``jobs.cli``: only the console entry point runs it). Imports are read from the source with
``ast``, at module level and inside functions (the CLI imports its heavy modules lazily, which
hides a circle from an import at start-up); imports under ``if TYPE_CHECKING:`` are left out:
they never run, and are the way to name a type whose import would be circular."""

from __future__ import annotations

import ast
from pathlib import Path

JOBS = Path(__file__).resolve().parents[1] / "jobs"


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the import nodes under an ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else \
                test.attr if isinstance(test, ast.Attribute) else None
            if name == "TYPE_CHECKING":
                out |= {id(n) for stmt in node.body for n in ast.walk(stmt)
                        if isinstance(n, ast.Import | ast.ImportFrom)}
    return out


def jobs_imports(source: str, modules: set[str], *, typing_too: bool = False) -> set[str]:
    """The modules of jobs/ (short names, from ``modules``) that ``source`` imports, anywhere
    in it: ``import jobs.x``, ``from jobs.x import y``, ``from jobs import x``, ``from .x import
    y``, ``from . import x``.

    >>> sorted(jobs_imports("import jobs.a\\ndef f():\\n    from jobs import b, c as d\\n"
    ...                     "from .e import g\\nfrom jobs.f.g import h", {"a", "b", "c", "e", "f"}))
    ['a', 'b', 'c', 'e', 'f']
    """
    tree = ast.parse(source)
    skip = set() if typing_too else _type_checking_only(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "jobs" and len(parts) > 1:
                    found.add(parts[1])
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module and node.module.split(".")[0] == "jobs":
                parts = node.module.split(".")
            elif node.level == 1:  # relative, within jobs/
                parts = ["jobs", *(node.module.split(".") if node.module else [])]
            else:
                continue
            if len(parts) > 1:
                found.add(parts[1])
            else:  # from jobs import x: x a module of jobs/ (or a name of its __init__)
                found |= {a.name for a in node.names}
    return found & modules


def import_graph(*, typing_too: bool = False) -> dict[str, set[str]]:
    """Each module of jobs/ -> the modules of jobs/ it imports."""
    files = {p.stem: p for p in sorted(JOBS.glob("*.py"))}
    return {name: jobs_imports(p.read_text(encoding="utf-8"), set(files), typing_too=typing_too)
            for name, p in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (``[a, b, ..., a]``) per group of modules that import each other round.

    >>> cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}})
    [['a', 'b', 'c', 'a'], ['e', 'e']]
    """
    found: list[list[str]] = []
    seen: set[str] = set()  # modules already placed in a circle found, or known to be on none
    for start in sorted(graph):
        if start in seen:
            continue
        # the shortest way back to ``start`` (breadth first), if there is one
        back: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in back:
            nxt = []
            for m in frontier:
                for n in sorted(graph.get(m, ())):
                    if n not in back:
                        back[n] = m
                        nxt.append(n)
            frontier = nxt
        if start not in back:
            seen.add(start)
            continue
        path = [start]
        while path[-1] != start or len(path) == 1:
            path.append(back[path[-1]])
        circle = path[::-1]
        seen |= set(circle)
        found.append(circle)
    return found


def test_no_import_circle_in_jobs() -> None:
    found = cycles(import_graph())
    assert not found, "import circles in jobs/: " + "; ".join(
        " -> ".join(f"jobs.{m}" for m in c) for c in found)


def test_nothing_in_jobs_imports_the_cli() -> None:
    # (type-only imports too: the command line is nobody's library)
    importers = sorted(m for m, deps in import_graph(typing_too=True).items()
                       if "cli" in deps and m != "cli")
    assert not importers, f"jobs.cli imported by: {', '.join(f'jobs.{m}' for m in importers)}"


def test_a_circle_through_a_function_is_caught() -> None:
    # an import inside a function counts (the test above cannot pass by not seeing it)
    mods = {"a", "b"}
    graph = {"a": jobs_imports("import jobs.b\n", mods),
             "b": jobs_imports("def f():\n    from jobs.a import g\n", mods)}
    assert cycles(graph) == [["a", "b", "a"]]
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jobs.a import T\n"
    assert jobs_imports(typed, mods) == set()
    assert jobs_imports(typed, mods, typing_too=True) == {"a"}
