"""Errors a user can act on: each names the file, the field path and what was expected."""

from __future__ import annotations


class WmbtError(Exception):
    """Base class of user-facing errors (CLI exit code 2)."""

    exit_code = 2


class SpecError(WmbtError):
    """A backtest spec is invalid. Nothing was run."""

    def __init__(self, file: str, field: str, expected: str) -> None:
        self.file, self.field, self.expected = file, field, expected
        super().__init__(f"{file}: {field}: {expected}")


class DataError(WmbtError):
    """A source table does not fit the spec (missing column, naive or null timestamps, ...)."""

    def __init__(self, where: str, field: str, expected: str) -> None:
        self.where, self.field, self.expected = where, field, expected
        super().__init__(f"{where}: {field}: {expected}")


class ReplayMismatch(WmbtError):
    """Spark did not consume the schedule exactly as planned."""

    exit_code = 1
