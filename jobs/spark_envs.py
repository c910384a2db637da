"""One Python environment per Spark release, made on demand: ``.venvs/spark-<version>/``.

Such an environment holds only ``pyspark`` (and the ``py4j`` it pins), installed from the
package registry with pip; a ``.pth`` file adds the project's own ``.venv`` site-packages
*after* its own, so every other pinned dependency (pandas, pyarrow, numpy, deltalake, ...) is
the project's and only Spark differs. ``wmbt replay SPEC --spark 3.5`` runs the replay there
(:func:`reexec`).

Versions: an exact release (``"3.5.3"``) is used as given; a line (``"3.5"``) means its newest
release in the registry (``pip index versions pyspark``; without the registry, the newest
environment of that line already made). ``"4.0"`` is the project's own pinned ``4.0.5``.

Invariants: an environment is made in a temporary folder and renamed into place when complete
(an interrupted creation leaves nothing that is used); creating one that exists does nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from semantics.errors import WmbtError

ROOT = Path(__file__).resolve().parent.parent
ENVS = Path(os.environ.get("WMBT_SPARK_ENVS") or ROOT / ".venvs")
PINNED = "4.0.5"  # the project's own pyspark (constraints.txt)
# Lines whose newest release is not what the project verifies against.
LINE_DEFAULTS = {"4.0": PINNED}
_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")


class SparkEnvError(WmbtError):
    """A Spark version that cannot be made into an environment (bad form, not in the
    registry, pip failed): exit code 2."""


def running_version() -> str:
    """The pyspark version of this process."""
    import pyspark

    return pyspark.__version__


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


def _line(v: str) -> str:
    return ".".join(v.split(".")[:2])


def existing(line: str) -> list[str]:
    """The exact versions of ``line`` with a complete environment, oldest first."""
    if not ENVS.is_dir():
        return []
    found = [p.name.removeprefix("spark-") for p in ENVS.glob("spark-*")
             if (p / ".complete").exists()]
    return sorted((v for v in found if _VERSION.match(v) and _line(v) == line
                   and v.count(".") == 2), key=_key)


def resolve(version: str) -> str | None:
    """The exact release ``version`` names, or None for a line the registry cannot be asked
    about and no environment of which exists (pip then resolves ``pyspark==<line>.*``)."""
    if not _VERSION.match(version):
        raise SparkEnvError(f"--spark: a Spark version such as 3.5, 3.5.3 or 4.1, got "
                            f"{version!r}")
    if version.count(".") == 2:
        return version
    if version in LINE_DEFAULTS:
        return LINE_DEFAULTS[version]
    newest = _registry_newest(version)
    if newest is not None:
        return newest
    have = existing(version)
    return have[-1] if have else None


def _registry_newest(line: str) -> str | None:
    """The newest final release of ``line`` the package registry lists (None: not reachable
    or none)."""
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "pyspark",
                           "--disable-pip-version-check"], capture_output=True, text=True)
    m = re.search(r"Available versions: (.*)", done.stdout)
    if done.returncode != 0 or m is None:
        return None
    found = [v.strip() for v in m.group(1).split(",")]
    ours = [v for v in found if re.fullmatch(r"\d+\.\d+\.\d+", v) and _line(v) == line]
    return max(ours, key=_key) if ours else None


def python_for(version: str) -> Path:
    """The interpreter of the environment for ``version`` (made first when missing)."""
    exact = resolve(version)
    if exact is not None and exact == running_version():
        return Path(sys.executable)
    if exact is not None and (ENVS / f"spark-{exact}" / ".complete").exists():
        return ENVS / f"spark-{exact}" / "bin" / "python"
    return ensure(version) / "bin" / "python"


def ensure(version: str) -> Path:
    """Make (if missing) and return the environment for ``version``; see the module
    docstring. Prints pip's progress on stderr only on failure."""
    exact = resolve(version)
    if exact is not None and (ENVS / f"spark-{exact}" / ".complete").exists():
        return ENVS / f"spark-{exact}"
    want = f"pyspark=={exact}" if exact else f"pyspark=={version}.*"
    ENVS.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".making-", dir=ENVS))
    try:
        base = getattr(sys, "_base_executable", sys.executable)
        _run([base, "-m", "venv", str(tmp)])
        py = tmp / "bin" / "python"
        _run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", want])
        got = subprocess.run([str(py), "-c", "import pyspark; print(pyspark.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
        (_site(tmp) / "wmbt_project.pth").write_text(
            f"import site; site.addsitedir({_site_of_running()!r})\n")
        (tmp / ".complete").write_text(got + "\n")
        final = ENVS / f"spark-{got}"
        if (final / ".complete").exists():  # (made meanwhile by another process)
            shutil.rmtree(tmp, ignore_errors=True)
            return final
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        _fix_paths(final, tmp)
        return final
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise SparkEnvError(f"--spark: could not make the environment of {cmd[-1]} from the "
                            "package registry: " + " / ".join(tail))


def _site(env: Path) -> Path:
    return next((env / "lib").glob("python3*/site-packages"))


def _site_of_running() -> str:
    """The site-packages of the project's .venv (the one this process runs from, or the one
    a ``.pth`` of this environment points at)."""
    main = ROOT / ".venv"
    found = list((main / "lib").glob("python3*/site-packages")) if main.exists() else []
    return str(found[0].resolve()) if found else sysconfig.get_paths()["purelib"]


def _fix_paths(final: Path, tmp: Path) -> None:
    """A venv's scripts and pyvenv.cfg name the folder it was made in: point them at the
    folder it was renamed to (only ``bin/python`` is used, but pip inside should work too)."""
    for f in [final / "pyvenv.cfg", *(final / "bin").iterdir()]:
        if f.is_file() and not f.is_symlink():
            try:
                text = f.read_text()
            except UnicodeDecodeError:
                continue
            if str(tmp) in text:
                f.write_text(text.replace(str(tmp), str(final)))


def reexec(version: str, argv: list[str]) -> int:
    """Run ``python -m jobs.cli *argv`` under the environment of ``version`` and return its
    exit code (the project's code comes from this checkout via PYTHONPATH)."""
    py = python_for(version)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH")] if p)
    env["PYSPARK_PYTHON"] = str(py)
    return subprocess.run([str(py), "-m", "jobs.cli", *argv], env=env).returncode
