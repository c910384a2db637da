"""Spark settings as Spark reads them: a boolean setting, read once, by Spark's rule.

Spark's ``ConfigBuilder.booleanConf`` converts a value with ``ConfigHelpers.toBoolean``:
``s.trim.toBoolean`` — Java's ``String.trim`` (every character up to U+0020 off both ends),
then Scala's ``StringOps.toBoolean``, which takes ``true`` or ``false`` in any case
(``equalsIgnoreCase``) and throws for anything else (``1``, ``yes``, ``on``): setting such a
value fails with ``<key> should be boolean, but was <value>``. A spec holding one describes a
job Spark would not start, so it is a spec error naming the key
(``tests/test_spark_conf.py`` compares with Spark's own conversion).
"""

from __future__ import annotations

from semantics.errors import SpecError

ALLOW_MULTIPLE = "spark.sql.streaming.statefulOperator.allowMultiple"
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
_JAVA_TRIM = "".join(map(chr, range(0x21)))  # what String.trim removes: U+0000 .. U+0020


def spark_bool(value: str | bool, key: str, file: str = "<spec>") -> bool:
    """The boolean Spark reads from the setting ``key = value``; a value Spark refuses raises a
    :class:`SpecError` naming ``spark_conf.<key>`` in ``file``.

    >>> [spark_bool(v, "spark.sql.streaming.noDataMicroBatches.enabled")
    ...  for v in ("true", "TRUE", " false\\t", "False", True)]
    [True, True, False, False, True]
    >>> spark_bool("yes", "spark.x.enabled", "job.yaml")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    semantics.errors.SpecError: job.yaml: spark_conf.spark.x.enabled: true or false, ... was 'yes'
    """
    if isinstance(value, bool):
        return value
    text = str(value).strip(_JAVA_TRIM)
    for word, meaning in (("true", True), ("false", False)):
        if _equals_ignore_case(text, word):
            return meaning
    raise SpecError(file, f"spark_conf.{key}",
                    "true or false, as Spark reads a boolean setting (any case, no other words "
                    f"such as 1 or yes), but was {value!r}")


def _equals_ignore_case(a: str, b: str) -> bool:
    """Java's ``String.equalsIgnoreCase``: equal lengths, and each pair of characters equal, or
    equal upper-cased, or equal lower-cased after that (so the long s ``ſ`` matches ``s``).

    >>> _equals_ignore_case("TrUe", "true"), _equals_ignore_case("falſe", "false")
    (True, True)
    >>> _equals_ignore_case("truee", "true"), _equals_ignore_case("ture", "true")
    (False, False)
    """
    return len(a) == len(b) and all(
        x == y or _up(x) == _up(y) or _low(_up(x)) == _low(_up(y))
        for x, y in zip(a, b, strict=True))


def _up(c: str) -> str:
    """Java's ``Character.toUpperCase``: one character (Python's ``upper`` may give two)."""
    u = c.upper()
    return u if len(u) == 1 else c


def _low(c: str) -> str:
    """Java's ``Character.toLowerCase``: one character."""
    u = c.lower()
    return u if len(u) == 1 else c
