"""No constant defined twice (issue 43): a constant lives in one module and the others import
it, so a change to it reaches every reader. Walks semantics/, jobs/ and orchestration/ with
``ast``: an UPPER_CASE name assigned a literal at module level in two modules fails, and so
does a Spark setting (a ``"spark.…"`` string) bound to a module-level name in two modules."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("semantics", "jobs", "orchestration")


def is_literal(node: ast.expr) -> bool:
    """A value written out in the source: a constant, or one built of constants only
    (``1 << 62``, ``-1``, ``("a", "b")``)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return is_literal(node.operand)
    if isinstance(node, ast.BinOp):
        return is_literal(node.left) and is_literal(node.right)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(is_literal(e) for e in node.elts)
    return False


def module_bindings(tree: ast.Module) -> list[tuple[str, ast.expr, int]]:
    """``(name, value, line)`` of every module-level assignment to a single name."""
    out = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name):
            out.append((target.id, value, node.lineno))
    return out


def is_upper(name: str) -> bool:
    bare = name.lstrip("_")
    return bool(bare) and bare.upper() == bare and any(c.isalpha() for c in bare)


def is_spark_setting(value: ast.expr) -> bool:
    return isinstance(value, ast.Constant) and isinstance(value.value, str) \
        and value.value.startswith("spark.")


def twice(root: Path) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Literal UPPER_CASE constants and Spark setting strings bound in more than one module:
    name (or setting) -> its places ``path:line``."""
    names: dict[str, list[str]] = defaultdict(list)
    settings: dict[str, list[str]] = defaultdict(list)
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            for name, value, line in module_bindings(ast.parse(path.read_text())):
                if is_upper(name) and is_literal(value):
                    names[name.lstrip("_")].append(f"{where}:{line}")
                if is_spark_setting(value):
                    assert isinstance(value, ast.Constant)
                    settings[value.value].append(f"{where}:{line} ({name})")

    def modules(places: list[str]) -> int:
        return len({p.split(":")[0] for p in places})

    return ({k: v for k, v in names.items() if modules(v) > 1},
            {k: v for k, v in settings.items() if modules(v) > 1})


def test_the_walk_finds_a_constant_defined_twice(tmp_path: Path) -> None:
    # the check itself can fail: two modules defining one constant, and one Spark setting
    # under two names, are both found; a name in one module only and a computed value are not
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
    (tmp_path / "semantics" / "a.py").write_text(
        'LIMIT = 1 << 62\nPOLICY = "spark.sql.streaming.multipleWatermarkPolicy"\n'
        "ONLY_HERE = 3\nCOMPUTED = len('x')\n")
    (tmp_path / "jobs" / "b.py").write_text(
        '_LIMIT = 1 << 62\nKEY = "spark.sql.streaming.multipleWatermarkPolicy"\n'
        "COMPUTED = len('y')\n")
    names, settings = twice(tmp_path)
    assert set(names) == {"LIMIT"}
    assert set(settings) == {"spark.sql.streaming.multipleWatermarkPolicy"}


def test_no_constant_is_defined_in_two_modules() -> None:
    names, settings = twice(ROOT)
    assert not names, "constants defined in more than one module (define once, import): " \
        + "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(names.items()))
    assert not settings, "Spark settings bound to a name in more than one module: " \
        + "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(settings.items()))
