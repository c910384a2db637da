"""The replay sink's failures reach the JVM short (jobs.sink.short_error): Spark matches a
Python sink's error message with a regular expression that overflows the JVM's stack on a long
one (seen as a StackOverflowError on stderr when Ctrl-C stopped a query mid-batch)."""

from __future__ import annotations

import re

from jobs.sink import short_error

# Spark's StreamExecution.PROXY_ERROR (4.0), the test of a stopped query's interrupted batch
PROXY_ERROR = re.compile(
    r"py4j\.protocol\.Py4JJavaError: An error occurred while calling((.|\r\n|\r|\n)*)"
    r"(java\.lang\.InterruptedException|java\.io\.InterruptedIOException|"
    r"java\.nio\.channels\.ClosedByInterruptException)")

JAVA_TRACE = "\n".join(f"\tat java.base/java.util.regex.Pattern$Loop.match(Pattern.java:{i})"
                       for i in range(5000))


def test_an_interrupted_batch_stays_an_interruption_in_a_few_words() -> None:
    exc = Exception("An error occurred while calling o123.toArrow.\n"
                    f": java.lang.InterruptedException\n{JAVA_TRACE}")
    short = str(short_error(exc, 7))
    assert len(short) < 200 and "\n" not in short
    assert PROXY_ERROR.search(short)  # Spark still sees the stop, not a failure


def test_another_failure_keeps_its_first_line() -> None:
    exc = ValueError(f"disk full\n{JAVA_TRACE}")
    short = str(short_error(exc, 3))
    assert short == "the sink of batch 3 failed: ValueError: disk full"
    assert not PROXY_ERROR.search(short)
