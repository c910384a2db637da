"""Run the Spark-suite corpus (tests/corpus/): per scenario, write its Delta tables, its
``job.py`` and its spec, predict every candidate as ``wmbt predict`` does, replay it in Spark
as ``wmbt replay`` does, and compare batch by batch (the exact columns, per operator) and the
emitted rows.

    python -m tests.corpus_run [--only NAME ...] [--out DIR]

(``--only shape``: every scenario named ``shape_...``.)

One line per scenario: PASS, REFUSED (the predictor or the replay refused it with exit code 2:
its message), DIFF (candidate, first differing batch and column) or ERROR (anything else),
then ``N of M reproduced``. One SparkSession for the whole run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.corpus import Scenario, all_scenarios


@dataclass(frozen=True)
class Outcome:
    name: str
    result: str  # PASS | REFUSED | DIFF | ERROR
    reason: str = ""

    def line(self) -> str:
        return f"{self.result:8} {self.name}" + (f": {self.reason}" if self.reason else "")


def write_scenario(s: Scenario, root: Path) -> Path:
    """The scenario's tables (one Delta commit per ``commits`` entry, in order), ``job.py``
    and spec under ``root``; returns the spec's path."""
    from tests.deltas import write_commits

    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for source, rows in s.commits:
        write_commits(root / "src" / source, [rows], event_time=s.time_of(source))
        time.sleep(0.005)  # distinct commit timestamps: the arrival order is the list's
    (root / "job.py").write_text(s.code)
    sources = sorted({source for source, _ in s.commits})
    replay: dict[str, object] = {"batch_by": {"commits": 1}, "pace": s.pace}
    if s.restarts:
        replay["restarts"] = list(s.restarts)
    doc: dict[str, object] = {
        "name": s.name.replace("_", "-"),
        "sources": {src: {"table": f"src/{src}"} for src in sources},
        "query": {"pyspark": f"job.py:{s.function}", "output_mode": s.output_mode},
        "replay": replay,
        "candidates": {k: dict(v) for k, v in s.candidates.items()},
    }
    if s.spark_conf:
        doc["spark_conf"] = dict(s.spark_conf)
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run_scenario(s: Scenario, root: Path, spark: object) -> Outcome:
    """Predict (``wmbt predict``'s call) and replay (``wmbt replay``'s) every candidate and
    compare them."""
    from jobs.backtest import run_backtest
    from semantics.compare import compare_outputs, compare_reports
    from semantics.errors import WmbtError
    from semantics.spec import load_spec

    try:
        path = write_scenario(s, root)
        spec = load_spec(path)
        results = root / "results"
        predicted = run_backtest(spec, actual=False, results=results, spark=spark,
                                 explain=False)
        actual = run_backtest(spec, predict=False, results=results, spark=spark, fresh=True)
    except WmbtError as e:  # exit code 2: a refusal with its message
        message = " ".join(str(e).split()).replace(f"{root / 'spec.yaml'}: ", "")
        return Outcome(s.name, "REFUSED", message)
    except Exception as e:  # noqa: BLE001 -- the corpus reports it and goes on
        return Outcome(s.name, "ERROR", f"{type(e).__name__}: {' '.join(str(e).split())[:400]}")
    for p, a in zip(predicted.candidates, actual.candidates, strict=True):
        assert p.name == a.name and p.predicted is not None and a.actual is not None
        if a.actual.batches.empty:  # (nothing compared is nothing reproduced)
            return Outcome(s.name, "ERROR", f"[{p.name}] the replay ran no batch")
        diffs = compare_reports(p.predicted.batches, a.actual.batches)
        diffs += compare_outputs(p.predicted.outputs, a.actual.outputs)
        if diffs:
            return Outcome(s.name, "DIFF", f"[{p.name}] {diffs[0].message}"
                           + (f" (+{len(diffs) - 1} more)" if len(diffs) > 1 else ""))
    return Outcome(s.name, "PASS")


def run(scenarios: list[Scenario], out: Path, spark: object,
        echo: bool = True) -> list[Outcome]:
    outcomes = []
    for s in scenarios:
        t0 = time.perf_counter()
        o = run_scenario(s, out / s.name, spark)
        outcomes.append(o)
        if echo:
            print(o.line() + f"  ({time.perf_counter() - t0:.0f}s)", flush=True)
    return outcomes


def markdown(outcomes: list[Outcome], scenarios: list[Scenario]) -> str:
    """The table of docs/corpus.md: scenario, category, Spark test, result, reason."""
    by = {s.name: s for s in scenarios}
    lines = ["| scenario | category | Spark suite: test | result | reason |",
             "|---|---|---|---|---|"]
    for o in outcomes:
        s = by[o.name]
        reason = o.reason.replace("|", "\\|")
        lines.append(f"| `{o.name}` | {s.category} | {s.origin} | {o.result} | {reason} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.corpus_run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these scenarios only")
    parser.add_argument("--out", type=Path, help="working folder (default: a temporary one)")
    parser.add_argument("--table", type=Path, help="also write the results as a Markdown table")
    args = parser.parse_args(argv)
    scenarios = all_scenarios()
    if args.only:
        # (a NAME is a scenario, or a group: the scenarios named ``NAME_...``, e.g. shape)
        def picks(name: str, s: Scenario) -> bool:
            return s.name == name or s.name.startswith(f"{name}_")

        unknown = sorted(n for n in args.only if not any(picks(n, s) for s in scenarios))
        if unknown:
            parser.error(f"--only: no scenario {', '.join(unknown)}")
        scenarios = [s for s in scenarios if any(picks(n, s) for n in args.only)]
    from jobs.spark import get_spark

    out = args.out or Path(tempfile.mkdtemp(prefix="wmbt-corpus-"))
    spark = get_spark()
    try:
        outcomes = run(scenarios, out, spark)
    finally:
        spark.stop()
    ok = sum(o.result == "PASS" for o in outcomes)
    print(f"{ok} of {len(outcomes)} reproduced")
    if args.table:
        args.table.write_text(markdown(outcomes, scenarios))
    return 0 if ok == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
