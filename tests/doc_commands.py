"""The command lines and files the project's Markdown docs show (tests/test_docs_commands.py
runs them).

What counts as a command line, in the fenced code blocks (``` or ~~~) of a document:

* ```bash, ```sh, ```shell, ```zsh: every line that is not blank or only a comment;
* ```console: the lines after a ``$ `` prompt (the other lines are the output shown);
* a fence without a language: the lines whose first word (after ``VAR=value`` assignments) is
  one of :data:`COMMAND_WORDS` or a path starting ``./`` or ``.venv/``; its other lines are
  output or prose;
* any other language (yaml, python, text, ...): none.

A line ending in ``\\`` goes on on the next one (a ``> `` prompt there is dropped in console
blocks); a trailing ``# comment`` (a ``#`` starting a word, outside quotes) is not part of the
command. Inline code in prose (`wmbt replay SPEC --master URL`, `./dev wmbt ...`) is grammar
with placeholders, not a command line: it is never run.

Setup lines (:data:`SETUP_WORDS`: ``. .venv/bin/activate``, ``source``, ``export``, ``cp``,
``mkdir``, ``cd``; a bare ``VAR=value``; an ``&&`` chain of these) change the shell the block
stands for: every command records the setup lines above it in its block, which run before it.

A ```yaml block right after a paragraph that ends with ``:`` and whose last inline code span is a
``.yaml``/``.yml`` path (README: "e.g. `backtests/clicks_per_ad.yaml`:") is that file's text; a
```python block introduced the same way by a ``.py`` path (the job's own code a spec names).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SHELL_LANGS = frozenset({"bash", "sh", "shell", "zsh"})
# first words that make a line of an unlabelled fence a command line
COMMAND_WORDS = frozenset({"wmbt", "dagster", "python", "python3", "python3.11", "pytest",
                           "bash", "export", "cp", "mkdir", "cd", ".", "source", "env", "time",
                           "docker", "java", "pip"})
SETUP_WORDS = frozenset({".", "source", "export", "cp", "mkdir", "cd"})
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_YAML_PATH = re.compile(r"`([^`\s]+\.ya?ml)`")
# a fenced file's language -> the code spans naming such a file
_FILE_PATHS = {"yaml": _YAML_PATH, "yml": _YAML_PATH, "python": re.compile(r"`([^`\s:]+\.py)`")}


@dataclass(frozen=True)
class DocCommand:
    """One command line of a document, as a shell would run it.

    ``text`` has its continuation lines joined and its comment removed; ``setup`` holds the
    setup lines above it in its block, in order (never itself)."""

    doc: str  # the document, relative to the repository root: "README.md", "docs/dagster.md"
    block: int  # 1-based line of its block's first line (a block's commands share a folder)
    line: int  # 1-based line of the command's first line
    text: str
    setup: tuple[str, ...]
    is_setup: bool

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


@dataclass(frozen=True)
class DocFile:
    """A file whose whole text a document shows (path relative to the folder the docs'
    commands run in)."""

    doc: str
    line: int
    path: str
    text: str


@dataclass(frozen=True)
class Fence:
    lang: str  # lower case, "" when the fence has none
    first: int  # 1-based line of its first content line
    lines: tuple[str, ...]
    before: str  # the paragraph right above the fence


def fences(text: str) -> Iterator[Fence]:
    """The fenced code blocks of a Markdown text (the indentation of the opening fence is
    removed from its lines; an unclosed fence runs to the end)."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, mark, lang = len(m.group(1)), m.group(2), m.group(3).lower()
        above: list[str] = []  # the paragraph above, blank lines between them skipped
        for prev in reversed(lines[:i]):
            if prev.strip():
                above.append(prev)
            elif above:
                break
        body = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(mark):
            line = lines[j]
            body.append(line[indent:] if line[:indent].isspace() else line.lstrip() if indent
                        else line)
            j += 1
        yield Fence(lang, i + 2, tuple(body), "\n".join(reversed(above)))
        i = j + 1


def strip_comment(line: str) -> str:
    """``line`` without its trailing shell comment.

    >>> strip_comment('wmbt sweep x.yaml --delays "1 minute..2 hours/60"   # knee')
    'wmbt sweep x.yaml --delays "1 minute..2 hours/60"'
    >>> strip_comment("echo 'a # b' c#d # e")
    "echo 'a # b' c#d"
    >>> strip_comment("# only a comment")
    ''
    """
    quote = ""
    escaped = False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def words(text: str) -> list[str]:
    """The shell words of a command line, ``&&``/``||``/``;``/``|`` as words of their own (a
    line the shell lexer cannot read falls back to its blank-separated words).

    >>> words('mkdir -p .h&&cp a "b c"')
    ['mkdir', '-p', '.h', '&&', 'cp', 'a', 'b c']
    """
    lex = shlex.shlex(text, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    try:
        return list(lex)
    except ValueError:
        return text.split()


def without_assignments(argv: list[str]) -> list[str]:
    """``argv`` without the leading ``VAR=value`` words (environment for the command)."""
    i = 0
    while i < len(argv) and _ASSIGNMENT.match(argv[i]):
        i += 1
    return argv[i:]


def is_setup(text: str) -> bool:
    """Whether a command line only sets up the shell (:data:`SETUP_WORDS`, assignments, and
    ``&&`` chains of them).

    >>> is_setup("mkdir -p .dagster_home && cp infra/dagster.yaml .dagster_home/")
    True
    >>> is_setup("export DAGSTER_HOME=$PWD/.dagster_home DAGSTER_DISABLE_TELEMETRY=1")
    True
    >>> is_setup("DAGSTER_HOME=x dagster dev")
    False
    """
    parts: list[list[str]] = [[]]
    for w in words(text):
        if w == "&&":
            parts.append([])
        elif w in ("||", ";", "|", "&"):
            return False
        else:
            parts[-1].append(w)
    for part in parts:
        rest = without_assignments(part)
        if rest and rest[0] not in SETUP_WORDS:
            return False
    return True


def _looks_like_command(text: str) -> bool:
    argv = without_assignments(words(text))
    return bool(argv) and (argv[0] in COMMAND_WORDS or argv[0].startswith(("./", ".venv/")))


def _logical_lines(fence: Fence) -> Iterator[tuple[int, str]]:
    """(line number, command text) of a shell or console fence or an unlabelled one."""
    lines = fence.lines
    i = 0
    while i < len(lines):
        number, text = fence.first + i, lines[i].strip()
        i += 1
        if fence.lang == "console":
            if not text.startswith("$ "):
                continue
            text = text[2:]
        text = strip_comment(text)
        while text.endswith("\\") and i < len(lines):
            nxt = lines[i].strip()
            i += 1
            if fence.lang == "console" and nxt.startswith("> "):
                nxt = nxt[2:]
            text = text[:-1].rstrip() + " " + strip_comment(nxt)
        text = text.strip()
        if text and (fence.lang or _looks_like_command(text)):
            yield number, text


def commands(doc: str, text: str) -> list[DocCommand]:
    """The command lines of the Markdown ``text`` of document ``doc``, in order."""
    found = []
    for fence in fences(text):
        if fence.lang not in SHELL_LANGS | {"console", ""}:
            continue
        setup: list[str] = []
        for number, line in _logical_lines(fence):
            found.append(DocCommand(doc, fence.first, number, line, tuple(setup),
                                    is_setup(line)))
            if is_setup(line):
                setup.append(line)
    return found


def files(doc: str, text: str) -> list[DocFile]:
    """The files whose text the Markdown ``text`` of document ``doc`` shows (```yaml and
    ```python blocks introduced by a paragraph ending ``:`` whose last code span is their path)."""
    found = []
    for fence in fences(text):
        if fence.lang not in _FILE_PATHS or not fence.before.rstrip().endswith(":"):
            continue
        paths = _FILE_PATHS[fence.lang].findall(fence.before)
        if paths:
            found.append(DocFile(doc, fence.first, paths[-1], "\n".join(fence.lines) + "\n"))
    return found


def documents(repo: Path, exempt: set[str]) -> list[Path]:
    """README.md and every docs/**/*.md of ``repo``, except the ``exempt`` ones (paths
    relative to ``repo``)."""
    found = [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]
    return [p for p in found if p.exists() and p.relative_to(repo).as_posix() not in exempt]
