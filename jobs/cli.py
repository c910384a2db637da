"""``wmbt``: the command line (SPEC.md §4). JSON on stdout with --json; progress on stderr.

Exit codes: 0 success; 1 a validation failed; 2 bad spec, bad data or a misused command line
(the message names the file, the field and what was expected); 3 an internal error, said in
one line (``--debug`` or ``WMBT_DEBUG=1``: with its traceback); 130 interrupted by Ctrl-C
(SIGINT), 143 by SIGTERM (one line, ``wmbt: interrupted``); 141 when the reader of stdout went
away (``wmbt ... | head``), silently. No other exit shows a Python traceback. With --json,
stdout holds one whole JSON document or nothing: a document is written in one piece, a signal
arriving meanwhile taking effect once it is out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.exits import failed, quiet_logging, watch_signals, write_document
from jobs.tables import format_table, late_note, restart_notes, summary_rows, unbounded_notes
from semantics.errors import SpecError
from semantics.memory import reuse_freed_memory

if TYPE_CHECKING:  # (the CLI imports its heavy modules where a command needs them)
    from jobs.backtest import BacktestResult
    from semantics.schedule import Schedule
    from semantics.spec import BacktestSpec


def _progress(quiet: bool):
    def emit(msg: str) -> None:
        if not quiet:
            print(f"wmbt: {msg}", file=sys.stderr, flush=True)

    return emit


def _print_result(result: BacktestResult, as_json: bool) -> int:
    if as_json:
        from semantics.output_chunks import document_parts

        # (the frames' rows as text built column by column, the rest by json.dumps' C encoder;
        # a streamed prediction's rows frame by frame, never all at once)
        write_document(chain(document_parts(result.to_json(records=False)), ["\n"]))
    else:
        rows = summary_rows(result)
        print(format_table(rows))
        note = late_note(result.spec, rows)
        if note:
            print(f"\n{note}")
        for line in unbounded_notes(result):
            print(f"\n{line}")
        for line in restart_notes(result):
            print(f"\n{line}")
        for line in sample_notes(result):
            print(f"\n{line}")
        for c in result.candidates:
            if c.validation and not c.success:
                print(f"\n{c.name}: validation failed")
                for f in c.validation["failed"][:20]:
                    print(f"  - {f}")
        if result.report:
            print(f"\nreport: {result.report}")
    return 0 if result.success else 1


def sample_notes(result: BacktestResult) -> list[str]:
    """One line per sampled candidate: the rate, the rows and carrier rows, what the figures
    are (``semantics.sample.Sample.info``)."""
    out = []
    for c in result.candidates:
        run = c.actual if c.actual is not None else c.predicted
        s = run.info.get("sample") if run is not None else None
        if isinstance(s, dict):
            out.append(f"{c.name}: sample of {s['rate']:g} of the keys ({', '.join(s['keys'])}):"
                       f" {s['sampled_rows']} of {s['total_rows']} rows, {s['carrier_rows']} "
                       f"carrier rows ({s['carrier_marker']}); {s['note']}")
    return out


def _fraction(text: str) -> float:
    """``--sample``'s type: a fraction above 0 and at most 1."""
    try:
        x = float(text)
    except ValueError:
        x = -1.0
    if not 0.0 < x <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction of the keys above 0 and at most "
                                         f"1 (e.g. 0.01), got {text!r}")
    return x


def cmd_run(args: argparse.Namespace, predict: bool, actual: bool) -> int:
    from jobs.backtest import run_backtest
    from semantics.spec import load_spec

    spec = load_spec(args.spec)
    if getattr(args, "sample", None) is not None:
        from semantics.pipeline.spec import refuse_for_pipelines

        # (--explain and --late follow a pipeline's rows, semantics.pipeline.explain; a
        # sampled replay does not take one yet)
        refuse_for_pipelines(spec, "--sample")
    # (rows' fates only where they are read: a row explained, the late rows listed, the
    # report of a backtest)
    with_fates = actual or getattr(args, "explain", None) is not None \
        or getattr(args, "late", None) is not None
    if predict and not actual and getattr(args, "master", None) and with_fates:
        raise SpecError(spec.path, "--master", "a prediction without --explain and --late "
                        "(rows' fates are made on one machine: drop --master for them)")
    result = run_backtest(spec, args.candidate, predict=predict, actual=actual,
                          results=Path(args.results) if args.results else None,
                          master=getattr(args, "master", None),
                          progress=_progress(args.json and not sys.stderr.isatty()),
                          explain=with_fates, fresh=getattr(args, "fresh", False),
                          planned=_row_id_check(spec, getattr(args, "explain", None)),
                          sample=getattr(args, "sample", None),
                          # (a plain prediction: its emitted rows stored and printed a range
                          # of batches at a time, semantics.output_chunks)
                          stream=predict and not actual and not with_fates)
    if predict and actual:
        from jobs.backtest import default_results_dir
        from jobs.report_html import write_report

        root = Path(args.results) if args.results else default_results_dir()
        result.report = write_report(result, root / "reports")
    if predict and getattr(args, "explain", None) is not None:
        return explain(result, args.explain)
    if predict and getattr(args, "late", None) is not None:
        return print_late(result, args.late, args.json)
    return _print_result(result, args.json)


def cmd_versions(args: argparse.Namespace) -> int:
    """``predict --spark-version 3.5,4.0,4.2``: the same candidates predicted under each
    release's profile (the spec's own ``spark_version`` settings replaced), one table each."""
    from jobs.backtest import run_backtest
    from semantics.profiles import profile_name
    from semantics.report import dumps
    from semantics.spec import load_spec

    spec = load_spec(args.spec)
    if getattr(args, "master", None):  # (one table per profile: predicted on this machine)
        raise SpecError(spec.path, "--master", "a prediction without --spark-version (the "
                        "profiles' tables are predicted on one machine: drop one of them)")
    versions = [v.strip() for v in args.spark_version.split(",") if v.strip()]
    for v in versions or [args.spark_version]:
        try:
            profile_name(v)
        except ValueError as exc:
            raise SpecError(spec.path, "--spark-version", str(exc)) from None
    docs, code = [], 0
    for v in versions:
        cands = {n: c.model_copy(update={"spark_version": None})
                 for n, c in spec.candidates.items()}
        sv = spec.model_copy(update={"spark_version": v, "candidates": cands})
        result = run_backtest(sv, args.candidate, predict=True, actual=False,
                              results=Path(args.results) if args.results else None,
                              progress=_progress(args.json and not sys.stderr.isatty()),
                              explain=False)
        if args.json:
            docs.append({"spark_version": v, "spark_profile": profile_name(v),
                         **result.to_json(records=False)})
            continue
        print(f"[Spark {v}: profile {profile_name(v)}]")
        print(format_table(summary_rows(result)))
        print()
        code = max(code, 0 if result.success else 1)
    if args.json:
        write_document(dumps({"backtest": spec.name, "versions": docs}) + "\n")
    return code


def print_late(result: BacktestResult, limit: int, as_json: bool) -> int:
    """The input rows each candidate's watermark drops (the first ``limit`` per candidate)."""
    from semantics.explain import late_rows
    from semantics.pipeline.chain_rows import traced_late

    doc = {"backtest": result.spec.name, "candidates": []}
    for c in result.candidates:
        late = late_rows(c.schedule, c.predicted, limit) if result.spec.query.kind != \
            "pipeline" else traced_late(c.schedule, result.spec, c.name, c.predicted, limit)
        if as_json:  # timestamps in JSON are epoch milliseconds (SPEC.md §4)
            doc["candidates"].append({
                "name": c.name, "late_rows": late.rows, "late_entries": late.entries,
                "entries": late.table.drop(columns="event_time").to_dict("records")})
            continue
        print(f"[{c.name}] {late.headline()}")
        if len(late.table):
            shown = late.table.drop(columns=["event_time_ms", "unit", "late_watermark_ms"],
                                    errors="ignore")  # (the detail says the watermark)
            print(format_table(shown.to_dict("records")))
        print()
    if as_json:
        write_document(json.dumps(doc, default=str) + "\n")
    return 0


def _row_id_check(spec: BacktestSpec, row_id: int | None) -> Callable[[Schedule], None] | None:
    """``--explain ROW_ID`` checked against each schedule as soon as it is planned, before
    anything is predicted or stored. Row ids are 0 .. n - 1 over all the query's sources (one
    count for every candidate: ``semantics.history.plan``)."""
    if row_id is None:
        return None

    def check(schedule: Schedule) -> None:
        n = schedule.total_rows
        if not 0 <= row_id < n:
            sources = ", ".join(spec.query_sources)
            raise SpecError(spec.path, "--explain",
                            f"a row id from 0 to {n - 1} (the {n} input rows of {sources}), "
                            f"got {row_id}")

    return check


def explain(result: BacktestResult, row_id: int) -> int:
    """Print the fate of input row ``row_id`` (checked by :func:`_row_id_check`) for each
    candidate."""
    from semantics.explain import explain_row

    for c in result.candidates:
        if result.spec.query.kind == "pipeline":  # (each stage it reached; a PySpark
            # chain's as the pipeline it is lowered onto: semantics.pipeline.chain_rows)
            from semantics.pipeline.chain_rows import traced
            from semantics.pipeline.explain import explain_pipeline_row

            _, spec, t = traced(c.schedule, result.spec, c.name, c.predicted)
            print(f"[{c.name}] " + explain_pipeline_row(c.schedule, t, row_id, spec))
            continue
        print(f"[{c.name}] " + explain_row(c.schedule, c.predicted, row_id, result.spec))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from jobs.demo import run_demo

    return run_demo(Path(args.dir), small=args.small, as_json=args.json)


def cmd_sweep(args: argparse.Namespace) -> int:
    from jobs.sweep import run_sweep

    return run_sweep(args)


def _at_least_zero(what: str) -> Callable[[str], int]:
    """An option's type: an integer, 0 or more, refused by argparse naming ``what``."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = -1
        if n < 0:
            raise argparse.ArgumentTypeError(f"expected {what} (0 or more), got {text!r}")
        return n

    return parse


# (which row ids exist is known once the tables are read: _row_id_check)
_row_id, _count = _at_least_zero("a row id"), _at_least_zero("a number of rows")


DEBUG_HELP = "print the traceback of an error (as WMBT_DEBUG=1 does)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="wmbt", description="Backtest Spark watermark configurations "
                                "on historical Delta tables (Spark 4.0 semantics).")
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = p.add_subparsers(dest="command", required=True)

    def debug(sp: argparse.ArgumentParser) -> None:
        # (SUPPRESS: not given after the subcommand, `wmbt --debug CMD`'s value stays)
        sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help=DEBUG_HELP)

    def common(sp: argparse.ArgumentParser) -> None:
        debug(sp)
        sp.add_argument("spec", help="backtest spec YAML (SPEC.md §1)")
        sp.add_argument("--candidate", help="only this candidate")
        sp.add_argument("--json", action="store_true", help="one JSON document on stdout")
        sp.add_argument("--results", help="results folder (default $WMBT_RESULTS or ./results)")

    sp = sub.add_parser("predict", help="prediction only, no Spark")
    common(sp)
    sp.add_argument("--explain", type=_row_id, metavar="ROW_ID",
                    help="the fate of one input row")
    sp.add_argument("--late", type=_count, nargs="?", const=20, metavar="N",
                    help="list the input rows the watermark drops (first N per candidate, "
                    "default 20), with the watermark each missed and by how much")
    sp.add_argument("--master", help="predict on this Spark cluster, per key range "
                    "(spark://host:port, sc://host:port or local[N]; the same answer as "
                    "without; docs/semantics.md §15)")
    sp.add_argument("--spark-version", metavar="V1,V2,...",
                    help="predict once per Spark release (e.g. 3.5,4.0,4.2: what an upgrade "
                    "alone changes; docs/semantics.md §12)")
    sp.set_defaults(func=lambda a: cmd_versions(a) if a.spark_version
                    else cmd_run(a, True, False))
    for name, helptext, pred in (("replay", "Spark replay only (actual)", False),
                                 ("backtest", "predict + replay + validate + report", True)):
        sp = sub.add_parser(name, help=helptext)
        common(sp)
        sp.add_argument("--master", help="Spark master: local[2] (default), spark://host:port, "
                        "or sc://host:port (Spark Connect)")
        sp.add_argument("--fresh", action="store_true", help="do not resume an interrupted replay")
        sp.add_argument("--sample", type=_fraction, metavar="RATE",
                        help="replay (and predict) only this fraction of the keys, by key "
                        "hash, plus carrier rows that keep the full history's watermarks")
        sp.add_argument("--spark", metavar="VERSION",
                        help="replay on this pyspark (3.5, 3.5.3, 4.1, 4.3, ...: its own "
                        "environment in .venvs/, made on first use; default: the installed "
                        "4.0.5); the prediction uses its profile unless the spec pins one")
        sp.set_defaults(func=lambda a, pred=pred: cmd_run(a, pred, True))
    sp = sub.add_parser("sweep", help="prediction-only tradeoff over watermark delays")
    common(sp)
    sp.add_argument("--source", action="append", help="the source whose delay is swept "
                    "(default: the query's only source; a join needs one); twice, each before "
                    "its --delays, for a grid of two sources")
    sp.add_argument("--delays", action="append",
                    help='e.g. "1 minute..2 hours/60"; twice for a grid')
    sp.add_argument("--window-sizes", metavar="RANGE", help="sweep the window's size instead "
                    '(its slide kept), e.g. "1 minute..1 hour/20"')
    sp.add_argument("--ranges", metavar="RANGE", help="sweep a bound of the join's "
                    'time_range instead, e.g. "-2 hours..0 seconds/20"')
    sp.add_argument("--bound", choices=("lower", "upper"), help="the time_range bound "
                    "--ranges sweeps (default: the join's only one)")
    sp.add_argument("--checkpoint-bytes", action="store_true", help="also predict each "
                    "point's checkpoint bytes, and per day of event time (every point "
                    "predicted on its own)")
    sp.set_defaults(func=cmd_sweep)
    sp = sub.add_parser("demo", help="build sample Delta tables and a demo spec, run a backtest")
    sp.add_argument("--dir", default="demo", help="folder for the demo (default ./demo)")
    sp.add_argument("--small", action="store_true", help="a smaller, faster demo")
    sp.add_argument("--json", action="store_true")
    debug(sp)
    sp.set_defaults(func=cmd_demo)
    return p


def _on_other_spark(version: str, argv: list[str]) -> int | None:
    """``--spark VERSION``: the exit code of the same command run under that pyspark's
    environment (``jobs.spark_envs``), or None when this process already runs it."""
    from jobs import spark_envs
    from semantics.profiles import profile_name

    try:
        profile_name(version)
    except ValueError as exc:
        raise spark_envs.SparkEnvError(f"--spark: {exc}") from None
    exact = spark_envs.resolve(version)
    if exact == spark_envs.running_version():
        return None
    rest, skip = [], False
    for a in argv:  # (the command again, without --spark)
        if skip:
            skip = False
        elif a == "--spark":
            skip = True
        elif not a.startswith("--spark="):
            rest.append(a)
    return spark_envs.reexec(exact or version, rest)


def main(argv: list[str] | None = None) -> int:
    """Run one command; return its exit code (module docstring). Usage errors exit 2 from the
    parser (SystemExit, as argparse does), before anything runs."""
    args = build_parser().parse_args(argv)
    debug = bool(args.debug) or os.environ.get("WMBT_DEBUG", "") not in ("", "0")
    received = bytearray()
    try:
        if getattr(args, "spark", None):
            code = _on_other_spark(args.spark, sys.argv[1:] if argv is None else argv)
            if code is not None:
                return code
        with watch_signals(received), quiet_logging(debug):
            reuse_freed_memory()  # the predictor's large arrays: reused, not faulted in again
            code = int(args.func(args))
            sys.stdout.flush()  # (here, so that a reader gone is seen here)
            return code
    except SystemExit:
        raise
    except BaseException as exc:  # also a Rust panic in deltalake: pyo3's PanicException
        # derives from BaseException, not Exception
        return failed(exc, bytes(received), debug)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
