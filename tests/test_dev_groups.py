"""``./dev test``'s two pytest processes (docs/testing.md): group a is the list ``GROUP_A`` in
``dev``; group b every other file, after the Spark Connect file in a process of its own. What
must hold for the two to run at once and lose nothing: every listed file exists, the Connect
file is in neither list, and what one process must do alone stays in one group (the README
demo, built once a session; the other Spark releases' environments, made one at a time; the
two users of port 15002, one after the other)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONNECT = "tests/test_replay_connect.py"


def group_a(dev: str) -> list[str]:
    """The files of ``GROUP_A=( ... )`` in ``dev``'s text, as paths from the repository root.

    >>> group_a("x\\nGROUP_A=(\\n  test_a.py test_b.py\\n  test_c.py\\n)\\n")
    ['tests/test_a.py', 'tests/test_b.py', 'tests/test_c.py']
    """
    m = re.search(r"^GROUP_A=\(\n(.*?)\n\)$", dev, re.M | re.S)
    assert m, "no GROUP_A=( ... ) list in dev"
    return [f"tests/{name}" for name in m.group(1).split()]


def group_of(path: str) -> str:
    """``a`` (``dev``'s list), ``connect`` (its own process) or ``b`` (every other file)."""
    if path == CONNECT:
        return "connect"
    return "a" if path in group_a((REPO / "dev").read_text()) else "b"


def test_the_listed_files_exist_once() -> None:
    listed = group_a((REPO / "dev").read_text())
    assert listed, "group a is empty"
    assert len(set(listed)) == len(listed), sorted(f for f in listed if listed.count(f) > 1)
    missing = [f for f in listed if not (REPO / f).is_file()]
    assert not missing, f"dev's GROUP_A names files that do not exist: {missing}"
    assert CONNECT not in listed, "the Connect file runs in its own process, before group b"
    assert re.search(rf"^CONNECT={re.escape(CONNECT)}$", (REPO / "dev").read_text(), re.M)


def _users(pattern: str) -> set[str]:
    """The test files whose text matches ``pattern``."""
    return {p.relative_to(REPO).as_posix() for p in (REPO / "tests").glob("test_*.py")
            if re.search(pattern, p.read_text(encoding="utf-8"))}


def test_what_runs_once_a_run_stays_in_one_group() -> None:
    demo = _users(r"\breadme_demo\b") | {"tests/test_docs_commands.py"}
    envs = _users(r"\bspark_envs\b|--spark \d") | {"tests/test_docs_commands.py"}
    for what, files in (("the README demo (built once a session)", demo),
                        ("the other Spark releases' environments (made once)", envs)):
        assert len(files) > 1, f"{what}: found in {files} only (the search is broken)"
        groups = {f: group_of(f) for f in files}
        assert len(set(groups.values())) == 1, f"{what} is used in two groups: {groups}"
    # port 15002: Connect's own server first, then infra/spark-local.sh's, in b's lane
    assert group_of("tests/test_infra_connect.py") == "b"


def test_group_b_starts_no_embedded_spark() -> None:
    # (one JVM per process at most: b's Spark runs in the commands and servers it starts)
    users = _users(r"def \w+\([^)]*\bspark\b[^)]*\)")
    assert "tests/test_pipeline_spark.py" in users, "the search finds no user of `spark`"
    in_b = sorted(f for f in users if group_of(f) == "b")
    assert not in_b, f"files of group b using the `spark` fixture (list them in GROUP_A): {in_b}"
