"""The one place that creates a SparkSession for the replay.

Defaults suit a small laptop/CI box: embedded ``local[2]``, 2 shuffle partitions, no UI, bound to
127.0.0.1, session time zone UTC, quiet logs, every progress update kept
(``numRecentProgressUpdates``) and no idle "no data" progress events between triggers.
``master`` may also be ``spark://host:port`` (standalone) or ``sc://host:port`` (Spark Connect).
An active session is reused (its confs are updated with the runtime-settable ones given).
"""

from __future__ import annotations

import os
from pathlib import Path

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2]"
LOG4J_FILE = Path(__file__).with_name("log4j2.properties")  # errors only (embedded driver)

BASE_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.streaming.numRecentProgressUpdates": "1000000",
    "spark.sql.streaming.noDataProgressEventInterval": "1000000000",
    "spark.sql.adaptive.enabled": "false",
    "spark.default.parallelism": "2",
    "spark.sql.streaming.stopTimeout": "60s",
}

# Settings that only take effect when the JVM/context starts (not via spark.conf.set).
_STATIC_PREFIXES = ("spark.driver.", "spark.ui.", "spark.master", "spark.executor.",
                    "spark.default.parallelism", "spark.jars", "spark.app.")


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect session (no py4j ``_jvm``/``_jdf`` access)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def get_spark(master: str | None = None, conf: dict | None = None) -> SparkSession:
    """Return a SparkSession (reusing an active one) configured for deterministic replays."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON") or _python())
    settings = {**BASE_CONF, **{k: str(v) for k, v in (conf or {}).items()}}
    master = master or os.environ.get("WMBT_SPARK_MASTER") or DEFAULT_MASTER
    active = SparkSession.getActiveSession()
    if active is not None:
        _set_runtime(active, settings)
        return active
    builder = SparkSession.builder.appName("watermark-backtest")
    if master.startswith("sc://"):
        builder = builder.remote(master)
        spark = builder.getOrCreate()
        _set_runtime(spark, settings)
        return spark
    builder = builder.master(master)
    if LOG4J_FILE.exists() and "spark.driver.extraJavaOptions" not in settings:
        opt = f"-Dlog4j2.configurationFile={LOG4J_FILE.as_uri()}"
        settings["spark.driver.extraJavaOptions"] = opt
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    _set_runtime(spark, settings)
    return spark


def _set_runtime(spark: SparkSession, settings: dict[str, str]) -> None:
    for k, v in settings.items():
        if k.startswith(_STATIC_PREFIXES):
            continue
        try:
            spark.conf.set(k, v)
        except Exception:  # noqa: BLE001 - static confs of a running session cannot change
            pass


def _python() -> str:
    import sys

    return sys.executable
