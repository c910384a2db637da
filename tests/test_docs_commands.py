"""Every command line shown in README.md and docs/**/*.md runs, and does what the docs say.

What counts as a command line, and which fenced blocks and files are read: tests/doc_commands.py
(inline code in prose is grammar, never run). A new example in the docs is a new test here the
day it is written; one with no entry in :data:`EXPECTED` fails, asking for its exit code and
the property of its output that shows it worked.

How a command runs: ``bash -c`` with ``set -e``, the setup lines above it in its block first
(``. .venv/bin/activate``, ``export``, ``cp``, ``mkdir``, ``cd``: as the shell would apply
them), in its block's folder, laid out as the docs assume the repository's root to be: every
top-level entry of this repository linked (``./dev``, ``.venv``, ``workspace.yaml``,
``infra/``, ``bench/``, ...), the files the docs show written where they name them (README's
```yaml block to ``backtests/clicks_per_ad.yaml``), and the demo's Delta tables
(``jobs.demo.make_sample``, built once per module) copied to ``data/``, where README's spec
reads them (``../data/clicks``). A block's commands run one after the other in one folder, as
a reader runs them (a command may read what one above it wrote, when that one was selected
too); each block has a fresh folder.
PATH starts with ``.venv/bin`` (``wmbt`` is the project's console script, as in an activated
environment) and PYTHONPATH is this tree; ``WMBT_*`` and ``DAGSTER_*`` variables are cleared,
so the docs' own settings are what counts.

Not run as shown:

* ``dagster dev`` gets a free port instead of 3000 (``-p``; another process on the machine may
  hold 3000); it is started with ``env --default-signal=INT,TERM``, checked while it serves and
  its process group stopped;
* ``bench/...`` commands run in smoke mode (``WMBT_BENCH_SMOKE=1``, bench/smoke.py: tiny
  sizes, no Spark where it takes minutes); the checks are exit 0 and the table header;
* :data:`EXEMPT_COMMANDS` and :data:`EXEMPT_DOCS` are not run (each says why).

Run once a session and shared: README's ``./dev demo --small`` (:func:`run_readme_demo`, the
``readme_demo`` fixture of tests/conftest.py): tests/test_backtest.py checks what that run
stored instead of running the demo again.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from semantics.profiles import profile_name
from tests.doc_commands import (
    DocCommand,
    DocFile,
    commands,
    documents,
    files,
    without_assignments,
    words,
)
from tests.test_dagster_ui import free_port, stop_group

REPO = Path(__file__).resolve().parents[1]

# documents whose commands are not instructions
EXEMPT_DOCS = {
    "docs/benchmarks-archive.md",  # the history of past benchmark runs, as they were run then
}
# commands shown in the docs but not run here, with the reason
EXEMPT_COMMANDS = {
    r"^\./dev test\b": "the test suite itself: running it from one of its tests would recurse",
}
# top-level entries of the repository not linked into the work folder: what the docs'
# commands write or what this test writes there
NOT_LINKED = {".git", "backtests", "data", "demo", "results", ".dagster_home", ".spark-local",
              "work"}

DOCS = documents(REPO, EXEMPT_DOCS)
COMMANDS = [c for p in DOCS for c in commands(p.relative_to(REPO).as_posix(), p.read_text())]
FILES = [f for p in DOCS for f in files(p.relative_to(REPO).as_posix(), p.read_text())]


@dataclass(frozen=True)
class Ran:
    """A command that ran: its program words (:func:`program`), exit code, output, folder."""

    command: DocCommand
    argv: list[str]
    code: int
    out: str
    err: str
    cwd: Path

    def option(self, name: str) -> str | None:
        """The value of option ``name`` (``--candidate tight`` -> ``tight``), if given."""
        if name in self.argv[:-1]:
            return self.argv[self.argv.index(name) + 1]
        return None

    def candidates(self) -> list[str]:
        """The candidates the command reports: ``--candidate`` or all of its spec's."""
        only = self.option("--candidate")
        if only:
            return [only]
        spec = next(a for a in self.argv if a.endswith((".yaml", ".yml")))
        return list(yaml.safe_load((self.cwd / spec).read_text())["candidates"])

    def path_after(self, label: str) -> Path:
        """The file named on the output line ``label: PATH`` (relative to the folder run in),
        which must exist."""
        m = re.search(rf"^{label}: (\S+)$", self.out, re.M)
        assert m, f"no '{label}: PATH' line in the output"
        path = self.cwd / m.group(1)
        assert path.is_file(), f"{label} {path} does not exist"
        return path


def _table_rows(ran: Ran, side: str) -> None:
    for c in ran.candidates():
        assert re.search(rf"^{re.escape(c)}\s+{side}\s+\d+", ran.out, re.M), \
            f"no '{c} {side}' row in the table"


def check_predict(ran: Ran) -> None:
    """A table row per candidate, side ``predicted``."""
    _table_rows(ran, "predicted")


def check_json(ran: Ran) -> None:
    """One JSON document on stdout, naming every candidate (a sweep: the one it sweeps)."""
    text = json.dumps(json.loads(ran.out))
    names = ran.candidates()[:1] if ran.argv[1] == "sweep" else ran.candidates()
    for c in names:
        assert f'"{c}"' in text, f"candidate {c} not in the JSON document"


def check_other_spark(ran: Ran) -> None:
    """The JSON document; every candidate replayed by the ``--spark`` release and predicted
    with its profile (docs/replay.md)."""
    check_json(ran)
    want = ran.argv[ran.argv.index("--spark") + 1]
    for c in json.loads(ran.out)["candidates"]:
        ran_on = c["actual"]["info"]["spark_version"]
        assert ran_on == want or ran_on.startswith(want + "."), (ran_on, want)
        assert c["predicted"]["info"]["spark_profile"] == profile_name(ran_on)


def check_switch(ran: Ran) -> None:
    """One JSON document naming every candidate, whose info shows the switch at the first
    restart and the first batch after it (docs/replay.md, SPEC.md §1.3)."""
    check_json(ran)
    found = re.findall(r'"switch": \{"after_tick": (\d+), "first_batch": (\d+)',
                       json.dumps(json.loads(ran.out)))
    assert found, "no info.switch with the restart's tick and first batch"


def check_late(ran: Ran) -> None:
    """A ``[candidate] N input rows dropped as late`` headline per candidate."""
    for c in ran.candidates():
        assert re.search(rf"^\[{re.escape(c)}\] \d+ input rows? (dropped as late|late in)",
                         ran.out, re.M), f"no late-rows headline for {c}"


def check_explain(ran: Ran) -> None:
    """A ``[candidate] row N of <source> ...`` line per candidate, about the row asked for."""
    row = ran.option("--explain")
    for c in ran.candidates():
        assert re.search(rf"^\[{re.escape(c)}\] row {row} of \w+", ran.out, re.M), \
            f"no '[{c}] row {row} of ...' line"


def check_replay(ran: Ran) -> None:
    """A table row per candidate, side ``actual``."""
    _table_rows(ran, "actual")


def check_backtest(ran: Ran) -> None:
    """Both sides of every candidate and the HTML report written (exit 0: validated)."""
    _table_rows(ran, "predicted")
    _table_rows(ran, "actual")
    assert "<html" in ran.path_after("report").read_text()[:500].lower()


def check_sample(ran: Ran) -> None:
    """A sampled backtest: validated (exit 0), both sides' rows, the line saying what the
    figures are (rate, rows sampled, carrier rows)."""
    check_backtest(ran)
    for c in ran.candidates():
        assert re.search(rf"^{re.escape(c)}: sample of [\d.]+ of the keys \(.*\): \d+ of \d+ "
                         r"rows, \d+ carrier rows .*figures are for the sampled keys", ran.out,
                         re.M), f"no sample line for {c}"


def check_sweep(ran: Ran) -> None:
    """One delay marked as the knee, and the plot written."""
    assert len(re.findall(r"<- knee\s*$", ran.out, re.M)) == 1, "no single '<- knee' mark"
    assert ran.path_after("plot").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def check_demo(ran: Ran) -> None:
    """Both demo backtests' tables, validated, and their reports written."""
    for name in ("clicks_per_ad", "impressions_to_clicks"):
        assert re.search(rf"^== {name} ==\ncandidate\s+side\s+batches", ran.out, re.M), \
            f"no table of {name}"
    assert re.findall(r"^\w+\s+actual\s.*\syes\s*$", ran.out, re.M), "no validated row"
    reports = re.findall(r"^report: (\S+)$", ran.out, re.M)
    assert len(reports) == 2 and all((ran.cwd / r).is_file() for r in reports), reports


def check_serves(ran: Ran) -> None:
    """(A server: :func:`serve` checks that it answers and loads its code location.)"""


BENCH_HEADERS = {  # bench script -> its table's header line
    "predict": r"^kind\s+events\s+batches\s+out/event\s+predict s",
    "sweep": r"^kind\s+events\s+delays\s+one pass s\s+per delay s",
    "schedule": r"^threads: \d+; [\d,]+ rows in \d+ commits, \d+ ticks\n"
                r"read_arrivals\s.*rows/s\nplan\s",
    "state_bytes": r"^estimate / actual memoryUsedBytes",
    "sample": r"^shape\s+events\s+rate\s+sampled\s+carriers\s+full s\s+sample s",
    "paths": r"^kind\s+events\s+step s\s+whole s\s+ratio\s+auto",
    "memory": r"^kind\s+events\s+path\s+peak MB\s+base MB\s+B/event",
    "cluster": r"^shape\s+events\s+where\s+ranges\s+seconds\s+events/s\s+exact",
}


def check_bench(ran: Ran) -> None:
    """The bench script's table header (bench scripts run in smoke mode)."""
    script = next(Path(a).stem for a in ran.argv if a.startswith("bench/"))
    assert script in BENCH_HEADERS, (f"bench/{script}.py: add its table header to "
                                     "BENCH_HEADERS in tests/test_docs_commands.py")
    assert re.search(BENCH_HEADERS[script], ran.out, re.M), f"no table header of {script}"


PG_BIN = Path("/usr/lib/postgresql/15/bin")
# docs/dagster.md's throwaway cluster, on a port and in a folder of this run's own (its
# defaults, 5432 and /tmp/wmbt-postgres-5432, may be another cluster's on this machine)
PG_ENV = {"DAGSTER_PG_PORT": str(free_port()),
          "WMBT_PG_DIR": str(Path(tempfile.mkdtemp(prefix="wmbt-docs-pg-")) / "cluster")}
os.chmod(Path(PG_ENV["WMBT_PG_DIR"]).parent, 0o755)  # (as root the server runs as postgres)


def _pg_ready() -> bool:
    return subprocess.run([str(PG_BIN / "pg_isready"), "-h", "127.0.0.1", "-p",
                           PG_ENV["DAGSTER_PG_PORT"]], capture_output=True).returncode == 0


def _pg_stop() -> None:
    """(A cluster a selection of this file started and did not stop: stopped at exit.)"""
    subprocess.run(["bash", str(REPO / "infra" / "postgres-local.sh"), "stop"],
                   env={**os.environ, **PG_ENV}, capture_output=True)


def check_pg_started(ran: Ran) -> None:
    """The cluster answers on the port it names."""
    atexit.register(_pg_stop)
    port = PG_ENV["DAGSTER_PG_PORT"]
    assert re.search(rf"^postgres-local: PostgreSQL on 127\.0\.0\.1:{port}, database dagster",
                     ran.out, re.M), ran.out
    assert _pg_ready(), "nothing answers on the cluster's port"


def check_pg_env(ran: Ran) -> None:
    """``eval`` of the variables: silent (what it exports is what the next lines read)."""
    assert ran.out == "" and ran.err == "", (ran.out, ran.err)


def check_pg_stopped(ran: Ran) -> None:
    """Says it stopped, and nothing answers on the port any more."""
    assert re.search(r"^postgres-local: (stopped|not running) ", ran.out, re.M), ran.out
    assert not _pg_ready(), "the cluster still answers"


@dataclass(frozen=True)
class Expect:
    """What a command must do: exit ``code`` and pass ``check`` (which states the property)."""

    check: Callable[[Ran], None]
    code: int = 0
    spark: bool = False  # starts Spark
    timeout: float = 120.0  # seconds: a guard against hangs, generous (the machine is shared)
    server: bool = False  # runs until stopped: checked while it serves (dagster dev)
    env: Mapping[str, str] = field(default_factory=dict)


# Keyed by a pattern of the command's program words (:func:`program`): the first match counts
# (the specific forms before the general ones).
EXPECTED: list[tuple[str, Expect]] = [
    (r"^wmbt predict \S*switch\S*\.yaml --json\b", Expect(check_switch)),
    (r"^wmbt (predict|sweep) .*--json\b", Expect(check_json)),
    # (first use: the release's environment is made from the package registry)
    (r"^wmbt (replay|backtest) .*--spark \S+ --json\b",
     Expect(check_other_spark, spark=True, timeout=1200)),
    (r"^wmbt (replay|backtest) .*--json\b", Expect(check_json, spark=True, timeout=600)),
    (r"^wmbt backtest .*--sample\b", Expect(check_sample, spark=True, timeout=600)),
    (r"^wmbt predict .*--explain \d+", Expect(check_explain)),
    (r"^wmbt predict .*--late\b", Expect(check_late)),
    (r"^wmbt predict\b", Expect(check_predict)),
    (r"^wmbt replay\b", Expect(check_replay, spark=True, timeout=600)),
    (r"^wmbt backtest\b", Expect(check_backtest, spark=True, timeout=600)),
    (r"^wmbt sweep\b", Expect(check_sweep)),
    (r"^(\./dev demo|wmbt demo)\b", Expect(check_demo, spark=True, timeout=900)),
    (r"^dagster dev\b", Expect(check_serves, server=True, timeout=300)),
    (r"^infra/postgres-local\.sh start$", Expect(check_pg_started, env=PG_ENV)),
    (r"^eval \S*infra/postgres-local\.sh env", Expect(check_pg_env, env=PG_ENV)),
    (r"^infra/postgres-local\.sh stop$", Expect(check_pg_stopped, env=PG_ENV)),
    (r"^python bench/(state_bytes|sample|cluster)\.py\b",
     Expect(check_bench, spark=True, timeout=600, env={"WMBT_BENCH_SMOKE": "1"})),
    (r"^python bench/\w+\.py\b",
     Expect(check_bench, timeout=300, env={"WMBT_BENCH_SMOKE": "1"})),
]

LAUNCHERS = {  # a command's first words -> the program they run
    ("./dev", "wmbt"): ["wmbt"],
    (".venv/bin/wmbt",): ["wmbt"],
    ("./dev", "dagster"): ["dagster", "dev"],
    (".venv/bin/dagster",): ["dagster"],
    (".venv/bin/python",): ["python"],
    ("python3",): ["python"],
    ("python3.11",): ["python"],
}


def program(text: str) -> list[str]:
    """The words of a command line without its assignments and ``time``/``env`` prefixes,
    launchers spelled one way (``./dev wmbt`` and ``.venv/bin/wmbt`` are ``wmbt``, ``./dev
    dagster`` is ``dagster dev``).

    >>> program("DAGSTER_HOME=x .venv/bin/dagster dev -w workspace.yaml")
    ['dagster', 'dev', '-w', 'workspace.yaml']
    >>> program("time env WMBT_THREADS=1 .venv/bin/python bench/predict.py")
    ['python', 'bench/predict.py']
    """
    argv = without_assignments(words(text))
    while argv and argv[0] in ("time", "env"):
        argv = without_assignments(argv[1:])
    for prefix, name in LAUNCHERS.items():
        if tuple(argv[:len(prefix)]) == prefix:
            return name + argv[len(prefix):]
    return argv


def expectation(command: DocCommand) -> Expect | str | None:
    """The command's :class:`Expect`, the reason it is exempt, or None (no entry)."""
    text = " ".join(program(command.text))
    for pattern, reason in EXEMPT_COMMANDS.items():
        if re.search(pattern, text):
            return reason
    for pattern, expect in EXPECTED:
        if re.search(pattern, text):
            return expect
    return None


def _param(command: DocCommand) -> object:
    found = expectation(command)
    spark = isinstance(found, Expect) and found.spark
    return pytest.param(command, id=f"{command.where} {command.text[:100]}",
                        marks=[pytest.mark.spark] if spark else [])


def _env(work: Path, extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WMBT_", "DAGSTER_")) and k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{work / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO)  # this tree's code, whichever tree installed .venv
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return {**env, **extra}


def _script(command: DocCommand, text: str | None = None) -> str:
    return "\n".join(["set -e", *command.setup, text or command.text]) + "\n"


def _venv_installed() -> bool:
    """Whether ``./dev`` finds .venv installed for this pyproject/constraints (it would
    otherwise pip install into it: the shared environment)."""
    digest = hashlib.sha256((REPO / "pyproject.toml").read_bytes()
                            + (REPO / "constraints.txt").read_bytes()).hexdigest()[:16]
    return (REPO / ".venv" / f".installed-{digest}").exists()


def run(command: DocCommand, work: Path, expect: Expect | None) -> Ran:
    """Run ``command`` (after its setup lines) in ``work``; its process group is killed if it
    outlives the expected time."""
    env = _env(work, expect.env if expect else {})
    proc = subprocess.Popen(["bash", "-c", _script(command)], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    timeout = expect.timeout if expect else 60.0
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc, grace=10)
        out, err = proc.communicate()
        pytest.fail(f"{command.where}: `{command.text}` still ran after {timeout:.0f} s\n"
                    f"{out[-2000:]}\n{err[-3000:]}")
    return Ran(command, program(command.text), proc.returncode, out, err, work)


def serve(command: DocCommand, work: Path, expect: Expect, log: Path) -> None:
    """Start a server command on a free port, wait until it answers and has loaded its code
    location, stop its process group."""
    port = free_port()
    text, n = re.subn(r"(?<=\s)(-p|--port)\s+\d+", f"-p {port}", command.text)
    text = text if n else f"{text} -p {port}"
    with log.open("wb") as sink:
        proc = subprocess.Popen(["env", "--default-signal=INT,TERM", "bash", "-c",
                                 _script(command, text)], cwd=work, env=_env(work, expect.env),
                                stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        state = _wait_loaded(proc, f"http://127.0.0.1:{port}", expect.timeout)
        assert state == "LOADED", (f"{command.where}: `{command.text}`: {state}\n"
                                   f"{log.read_text(errors='replace')[-4000:]}")
    finally:
        stop_group(proc)


def _wait_loaded(proc: subprocess.Popen, url: str, timeout: float) -> str:
    """``LOADED`` once the webserver answers ``/server_info`` and its code location has
    loaded; else what went wrong."""
    query = json.dumps({"query": "{ workspaceOrError { ... on Workspace { locationEntries { "
                        "loadStatus locationOrLoadError { __typename ... on PythonError { "
                        "message } } } } } }"}).encode()
    deadline = time.monotonic() + timeout
    last = "the webserver never answered"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"exited with code {proc.returncode}"
        try:
            with urllib.request.urlopen(f"{url}/server_info", timeout=10) as resp:
                json.loads(resp.read())
            req = urllib.request.Request(f"{url}/graphql", query,
                                         {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                entries = json.loads(resp.read())["data"]["workspaceOrError"]["locationEntries"]
            if entries and entries[0]["loadStatus"] == "LOADED":
                loaded = entries[0]["locationOrLoadError"]
                if loaded["__typename"] == "RepositoryLocation":
                    return "LOADED"
                return f"the code location failed to load: {loaded}"
            last = f"code location not loaded yet: {entries}"
        except (urllib.error.URLError, ConnectionError, TimeoutError, KeyError) as exc:
            last = f"no answer: {exc}"
        time.sleep(1.0)
    return f"timed out after {timeout:.0f} s ({last})"


def checkout(work: Path, tables: Path | None) -> Path:
    """``work`` laid out as the docs assume the repository's root to be: every top-level entry
    linked but :data:`NOT_LINKED`, the files the docs show, the demo's tables in ``data/``
    (when given)."""
    work.mkdir(parents=True)
    for entry in REPO.iterdir():
        if entry.name not in NOT_LINKED:
            (work / entry.name).symlink_to(entry)
    if tables is not None:
        shutil.copytree(tables, work / "data")
    for f in FILES:
        target = work / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f.text)
    return work


# README's demo command: run once a session (:func:`run_readme_demo`)
README_DEMO = r"^\./dev demo --small$"


def readme_demo_command() -> DocCommand:
    """README's ``./dev demo --small`` (the first README command that is that line)."""
    found = [c for c in COMMANDS if c.doc == "README.md" and re.search(README_DEMO, c.text)]
    assert found, f"README.md shows no `./dev demo --small` ({README_DEMO})"
    return found[0]


def run_readme_demo(root: Path) -> Ran:
    """README's ``./dev demo --small``, run as its test runs it, in a checkout under ``root``
    (its block runs nothing before it: the demo makes its own tables, in ``demo/``)."""
    command = readme_demo_command()
    assert not command.setup, command.setup
    found = expectation(command)
    assert isinstance(found, Expect), found
    return run(command, checkout(root / "checkout", None), found)


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's Delta tables (``impressions``, ``clicks``), built once: 10 minutes of data
    at 15 clicks a minute: 12 commits, and the README spec's ``tight`` drops a row."""
    from jobs.demo import make_sample

    root = tmp_path_factory.mktemp("demo-tables")
    make_sample(root, minutes=10, per_minute=15)
    return root / "data"


@pytest.fixture(scope="module")
def folders() -> dict[tuple[str, int], Path]:
    """Each block's folder, made by :func:`folder` when its first command runs."""
    return {}


@pytest.fixture
def folder(command: DocCommand, folders: dict[tuple[str, int], Path],
           tmp_path_factory: pytest.TempPathFactory, tables: Path) -> Path:
    """The folder of ``command``'s block, laid out as the docs assume the repository's root
    to be (made fresh for the block's first command)."""
    key = (command.doc, command.block)
    if key not in folders:
        folders[key] = checkout(tmp_path_factory.mktemp("block") / "checkout", tables)
    return folders[key]


SAMPLE = """\
Run `wmbt replay SPEC --master URL` (grammar, not a command), e.g. `x/spec.yaml`:

```yaml
name: x
```

```bash
export A=1   # a setup line
wmbt predict x/spec.yaml \\
    --late 3       # continued
# a comment line
```

```console
$ .venv/bin/python bench/predict.py
kind  events
```

```
wmbt: error: output, not a command
./dev wmbt sweep x/spec.yaml --delays "1 minute..2 minutes/2"  # why
```

```python
wmbt = 1
```
"""


def test_extraction_rules() -> None:
    """tests/doc_commands.py's rules on a sample covering each kind of block."""
    found = commands("S.md", SAMPLE)
    assert [(c.line, c.text, c.setup, c.is_setup) for c in found] == [
        (8, "export A=1", (), True),
        (9, "wmbt predict x/spec.yaml --late 3", ("export A=1",), False),
        (15, ".venv/bin/python bench/predict.py", (), False),
        (21, './dev wmbt sweep x/spec.yaml --delays "1 minute..2 minutes/2"', (), False),
    ]
    assert files("S.md", SAMPLE) == [DocFile("S.md", 4, "x/spec.yaml", "name: x\n")]


def test_docs_show_commands_and_the_readme_spec() -> None:
    """The extraction finds the docs' examples (an extractor that finds nothing tests nothing)."""
    assert any(program(c.text)[:2] == ["wmbt", "predict"] for c in COMMANDS), COMMANDS
    assert "backtests/clicks_per_ad.yaml" in {f.path for f in FILES}, FILES
    by_path: dict[str, DocFile] = {}
    for f in FILES:  # two documents showing one file must agree on its text
        assert by_path.setdefault(f.path, f).text == f.text, (f, by_path[f.path])


@pytest.mark.parametrize("command", [_param(c) for c in COMMANDS])
def test_doc_command(command: DocCommand, folder: Path, tmp_path: Path,
                     request: pytest.FixtureRequest) -> None:
    found = None if command.is_setup else expectation(command)
    if isinstance(found, str):
        pytest.skip(f"exempt: {found}")
    if not command.is_setup and found is None:
        pytest.fail(f"{command.where}: `{command.text}` has no expected property: add an entry "
                    "to EXPECTED in tests/test_docs_commands.py (its exit code and what its "
                    "output must show)")
    if re.search(r"(^|\s|&&)\./dev\b", _script(command)) and not _venv_installed():
        pytest.fail("./dev would install .venv (not installed for this pyproject.toml and "
                    "constraints.txt): run ./dev once in the repository")
    if found is not None and found.server:
        serve(command, folder, found, tmp_path / "server.log")
        return
    if command == readme_demo_command():  # (the session's one run: tests/conftest.py)
        ran = request.getfixturevalue("readme_demo")
    else:
        ran = run(command, folder, found)
    code = found.code if found else 0
    if ran.code != code:
        pytest.fail(f"{command.where}: `{command.text}` exited {ran.code}, expected {code}\n"
                    f"{ran.out[-2000:]}\n{ran.err[-3000:]}", pytrace=False)
    if found is not None:
        try:
            found.check(ran)
        except AssertionError as exc:
            pytest.fail(f"{command.where}: `{command.text}`: {exc}\n(expected: "
                        f"{found.check.__doc__})\n{ran.out[-3000:]}", pytrace=False)
