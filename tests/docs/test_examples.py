"""Every shell and Python example in README.md and docs/ runs, so the docs cannot drift.

A fenced block whose language is ``sh``, ``bash``, ``console`` or ``python`` is an example
(``text`` blocks are output and are not run). Each runs in a fresh temporary folder that
holds the repository's ``examples/``, ``benchmarks/`` and ``tests/`` (linked) and the real
recordings of ``tests/realdata/`` by name, with the environment's ``bin`` first on
``PATH`` so ``gpuwise`` and ``python`` are this checkout's. In a ``console`` block the
lines after ``$ `` are the commands; the other lines are their captured output.

An HTML comment on the line before the fence changes what is checked:

- ``<!-- needs: WHAT, reason -->``: the example is not run here (it needs a GPU, the
  network, the reader's own files, or minutes); the test is skipped with the reason. Every
  ``gpuwise ...`` command in it is still parsed by the real argument parser, so a flag
  that no longer exists fails.
- ``<!-- needs: long, reason -->``: run only when ``GPUWISE_DOCS_LONG=1``.
- ``<!-- expect: error, reason -->``: the commands show failures; a non-zero exit is fine,
  a traceback or an "unexpected" error is not.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuwise.cli.main import build_parser

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]
RUN_LANGS = {"sh", "bash", "console", "python"}
MARKER = re.compile(r"^<!--\s*(needs|expect):\s*([\w-]+)\s*,\s*(.+?)\s*-->$")
TIMEOUT_S = 600


@dataclass(frozen=True)
class Example:
    """One fenced example: where it is, its language, its text and its marker."""

    page: Path
    line: int
    lang: str
    code: str
    marker: tuple[str, str, str] | None

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def examples_of(page: Path) -> list[Example]:
    """The runnable fenced blocks of one Markdown page."""
    lines = page.read_text(encoding="utf-8").split("\n")
    found, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        lang, end = lines[i][3:].strip(), i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        previous = lines[i - 1].strip() if i else ""
        match = MARKER.match(previous)
        if lang in RUN_LANGS:
            marker = match.groups() if match else None
            found.append(Example(page, i + 1, lang, "\n".join(lines[i + 1 : end]), marker))
        i = end + 1
    return found


ALL = [example for page in PAGES for example in examples_of(page)]


def commands(example: Example) -> list[str]:
    """The shell commands of a shell or console block (continuation lines joined)."""
    lines = example.code.split("\n")
    if example.lang == "console":
        picked, keep = [], False
        for line in lines:
            if line.startswith("$ "):
                picked.append(line[2:])
                keep = line.endswith("\\")
            elif keep:
                picked.append(line)
                keep = line.endswith("\\")
        lines = picked
    joined = "\n".join(lines).replace("\\\n", " ")
    return [c for c in joined.split("\n") if c.strip() and not c.strip().startswith("#")]


def gpuwise_argv(command: str) -> list[str] | None:
    """The arguments of a ``gpuwise ...`` command, or None for any other command."""
    if "$(" in command:
        return None
    try:
        words = shlex.split(first_command(command), comments=True)
    except ValueError:
        return None
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value gpuwise ...
        words.pop(0)
    if not words or words[0] != "gpuwise":
        return None
    return words[1:]


def first_command(command: str) -> str:
    """The part of a shell line before its first ``;``, ``|``, ``&`` or ``>`` outside quotes."""
    quote = ""
    for index, char in enumerate(command):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in ";|&>":
            return command[:index]
    return command


def parses(argv: list[str]) -> None:
    """The real parser accepts these arguments (exit 0), or the test fails with its error."""
    code: object = 0
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:  # --help exits 0, a usage error 2
        code = exc.code
    if code != 0:
        pytest.fail(f"`gpuwise {shlex.join(argv)}` no longer parses (exit {code})")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A folder with the repository's example inputs, where the example's files land."""
    for name in ("examples", "benchmarks", "tests"):
        (tmp_path / name).symlink_to(REPO / name)
    realdata = REPO / "tests" / "realdata"
    for path in [*realdata.glob("*.*"), *(realdata / "hta_traces").glob("*.*")]:
        if not (tmp_path / path.name).exists():
            (tmp_path / path.name).symlink_to(path)
    return tmp_path


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("OMP_NUM_THREADS", "1")  # the examples share the machine with the suite
    env["COLUMNS"] = "120"
    return env


def run_example(example: Example, cwd: Path) -> list[tuple[str, subprocess.CompletedProcess[str]]]:
    """Run the example; return each command (or the script) with its finished process."""
    env = environment()
    if example.lang == "python":
        script = cwd / "example.py"
        script.write_text(example.code, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
        )  # fmt: skip
        return [("python example.py", done)]
    results = []
    for command in commands(example):
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
        )  # fmt: skip
        results.append((command, done))
    return results


@pytest.mark.timeout(2 * TIMEOUT_S)  # the README's `gpuwise try` runs the example nine times
@pytest.mark.parametrize("example", ALL, ids=[e.id for e in ALL])
def test_example_runs(example: Example, workdir: Path) -> None:
    kind, what, reason = example.marker or ("", "", "")
    for command in commands(example) if example.lang != "python" and kind != "expect" else []:
        argv = gpuwise_argv(command)
        if argv is not None:
            parses(argv)
    if kind == "needs" and not (what == "long" and os.environ.get("GPUWISE_DOCS_LONG") == "1"):
        pytest.skip(f"needs {what}: {reason}")
    for command, done in run_example(example, workdir):
        output = done.stdout + done.stderr
        assert "Traceback (most recent call last)" not in output, f"{command}\n{output[-3000:]}"
        assert "error: unexpected" not in output, f"{command}\n{output[-3000:]}"
        if kind != "expect":
            assert done.returncode == 0, f"`{command}` exited {done.returncode}\n{output[-3000:]}"


def test_every_page_is_collected_and_markers_are_well_formed() -> None:
    assert len(PAGES) > 20
    assert any(e.page.name == "README.md" for e in ALL)
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").split("\n"), 1):
            if line.startswith(("<!-- needs", "<!-- expect")):
                assert MARKER.match(line.strip()), f"{page}:{number}: malformed marker {line!r}"


def test_console_blocks_keep_commands_and_drop_output() -> None:
    example = Example(REPO, 1, "console", "$ gpuwise doctor \\\n  --json\n{\n$ echo hi\nhi", None)
    assert commands(example) == ["gpuwise doctor    --json", "echo hi"]
    assert gpuwise_argv("OMP_NUM_THREADS=1 gpuwise estimate resnet18 | tail -2") == [
        "estimate",
        "resnet18",
    ]
    assert gpuwise_argv('gpuwise analyze "$(gpuwise demo --example-trace)"') is None
    assert gpuwise_argv('gpuwise store verify s; echo "exit $?"') == ["store", "verify", "s"]
    assert gpuwise_argv("gpuwise monitor --prometheus 127.0.0.1:9400 -- sleep 2 &") == [
        "monitor",
        "--prometheus",
        "127.0.0.1:9400",
        "--",
        "sleep",
        "2",
    ]


def test_readme_quickstart_tries_the_fixes_and_is_run_here() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    quickstart = text.split("## A 60-second quickstart", 1)[1].split("\n## ", 1)[0]
    start = text.index(quickstart)
    first = text[:start].count("\n") + 1
    last = first + quickstart.count("\n")
    readme = [e for e in ALL if e.page.name == "README.md" and first <= e.line <= last]
    run_here = [e for e in readme if e.marker is None]
    assert any("gpuwise try " in c for e in run_here for c in commands(e))  # no skip marker
    assert any("gpuwise demo " in c for e in run_here for c in commands(e))
    # the other pages that were the README's engineering half
    for page in ("development.md", "performance.md", "reliability.md", "nvitop.md"):
        assert (REPO / "docs" / page).is_file(), page
    assert "make test" in (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
