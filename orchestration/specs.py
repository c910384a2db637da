"""Backtest specs discovered from a folder, and their partition keys and fingerprints.

The folder is ``$WMBT_BACKTESTS`` or ``backtests/`` (relative to the working directory of the
code location). Every ``*.yaml`` / ``*.yml`` file in it (recursively) is one backtest spec
(SPEC.md §1). A candidate partition key is ``"<backtest>|<candidate>"``.

A *fingerprint* per partition key hashes everything in the spec that can change that
candidate's result: the spec without its ``candidates`` plus that one candidate. Editing one
candidate changes one fingerprint; editing the query, sources or replay changes all of that
backtest's fingerprints.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from semantics.errors import WmbtError
from semantics.spec import BacktestSpec, load_spec

DEFAULT_FOLDER = "backtests"
SEP = "|"


def default_folder() -> str:
    """``$WMBT_BACKTESTS`` or ``backtests``."""
    return os.environ.get("WMBT_BACKTESTS") or DEFAULT_FOLDER


def partition_key(backtest: str, candidate: str) -> str:
    """``"clicks_per_ad|tight"``."""
    return f"{backtest}{SEP}{candidate}"


def split_key(key: str) -> tuple[str, str]:
    """Inverse of :func:`partition_key`."""
    backtest, sep, candidate = key.partition(SEP)
    if not sep or not backtest or not candidate:
        raise ValueError(f"partition key {key!r}: expected '<backtest>{SEP}<candidate>'")
    return backtest, candidate


def fingerprint(spec: BacktestSpec, candidate: str) -> str:
    """Hash of what determines one candidate's result (see the module docstring)."""
    # without defaults: a field added to the spec later (with a default) changes no fingerprint;
    # nor does ``sweep`` (what the sweep asset sweeps: no candidate's result)
    doc = spec.model_dump(mode="json", exclude={"candidates", "path", "sweep"},
                          exclude_defaults=True)
    doc["candidate"] = spec.candidates[candidate].model_dump(mode="json", exclude_defaults=True)
    doc["candidate_name"] = candidate
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Discovery:
    """What a scan of the spec folder found."""

    specs: dict[str, BacktestSpec] = field(default_factory=dict)  # backtest name -> spec
    errors: dict[str, str] = field(default_factory=dict)  # file -> message (file not used)

    @property
    def fingerprints(self) -> dict[str, str]:
        """Partition key -> fingerprint, for every candidate of every valid spec."""
        return {partition_key(name, c): fingerprint(spec, c)
                for name, spec in self.specs.items() for c in spec.candidates}

    @property
    def partition_keys(self) -> list[str]:
        return sorted(self.fingerprints)


def spec_files(folder: str | Path) -> list[Path]:
    root = Path(folder)
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def discover(folder: str | Path) -> Discovery:
    """Load every spec in ``folder``; invalid files and duplicate names go to ``errors``."""
    found = Discovery()
    for path in spec_files(folder):
        try:
            spec = load_spec(path)
        except WmbtError as exc:
            found.errors[str(path)] = str(exc)
            continue
        if spec.name in found.specs:
            found.errors[str(path)] = (f"{path}: name: a unique backtest name ({spec.name!r} is "
                                       f"already defined in {found.specs[spec.name].path})")
            continue
        found.specs[spec.name] = spec
    return found


def find_spec(folder: str | Path, backtest: str) -> BacktestSpec:
    """The spec named ``backtest`` in ``folder``; a clear error when it is missing."""
    found = discover(folder)
    if backtest in found.specs:
        return found.specs[backtest]
    broken = "".join(f"\n  {m}" for m in found.errors.values())
    raise LookupError(f"no valid backtest spec named {backtest!r} in {Path(folder).resolve()} "
                      f"(found: {', '.join(sorted(found.specs)) or 'none'}){broken}")
