"""Resources, chosen by deployment (``$WMBT_DEPLOYMENT``: ``local`` by default, or ``cluster``).

* ``spark`` — :class:`SparkResource`: embedded ``local[2]`` by default; a ``spark://`` master or
  an ``sc://`` Spark Connect URL via ``master`` config or ``$WMBT_SPARK_MASTER``.
* ``results`` — :class:`ResultsStoreResource`: the Delta results folder (``$WMBT_RESULTS`` or
  ``results``), shared with the CLI.
* ``specs`` — :class:`SpecsResource`: the backtest spec folder (``$WMBT_BACKTESTS`` or
  ``backtests``).

``cluster`` reads ``WMBT_SPARK_MASTER`` and ``WMBT_RESULTS`` as Dagster ``EnvVar``s: they must be
set, and the UI shows where the values came from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dagster as dg

from jobs.results import ResultsStore
from orchestration.specs import Discovery, default_folder, discover, find_spec
from semantics.spec import BacktestSpec


class SparkResource(dg.ConfigurableResource):
    """A SparkSession for the replay (``jobs.spark.get_spark``; an active session is reused)."""

    master: str = ""  # empty: $WMBT_SPARK_MASTER, else local[2]
    # predict per key range on this session's executors (jobs.predict_cluster, docs/semantics.md
    # §15): the same batches and rows, without rows' fates
    predict_on_cluster: bool = False

    def session(self) -> Any:
        from jobs.spark import get_spark

        return get_spark(self.master or None)


class ResultsStoreResource(dg.ConfigurableResource):
    """The results store (Delta tables ``runs``, ``batch_reports``, ``outputs``)."""

    root: str = "results"

    def store(self) -> ResultsStore:
        return ResultsStore(self.root)

    @property
    def path(self) -> Path:
        return Path(self.root)


class SpecsResource(dg.ConfigurableResource):
    """The folder of backtest specs."""

    folder: str = "backtests"

    def discover(self) -> Discovery:
        return discover(self.folder)

    def spec(self, backtest: str) -> BacktestSpec:
        """The spec named ``backtest``; ``dg.Failure`` (shown as is in the UI) if missing."""
        try:
            return find_spec(self.folder, backtest)
        except LookupError as exc:
            raise dg.Failure(str(exc)) from None


def resources_for(deployment: str | None = None) -> dict[str, Any]:
    """The resources of a deployment (``local`` or ``cluster``)."""
    deployment = deployment or os.environ.get("WMBT_DEPLOYMENT", "local")
    specs = SpecsResource(folder=default_folder())
    if deployment == "local":
        return {
            "spark": SparkResource(master=os.environ.get("WMBT_SPARK_MASTER", "")),
            "results": ResultsStoreResource(root=os.environ.get("WMBT_RESULTS") or "results"),
            "specs": specs,
        }
    if deployment == "cluster":
        return {
            "spark": SparkResource(master=dg.EnvVar("WMBT_SPARK_MASTER")),
            "results": ResultsStoreResource(root=dg.EnvVar("WMBT_RESULTS")),
            "specs": specs,
        }
    raise ValueError(f"WMBT_DEPLOYMENT={deployment!r}: expected 'local' or 'cluster'")
