"""Parse multi-section nvidia-smi captures: several commands' outputs in one text file.

Each section opens with a banner: a rule of ``#``, a title line, the command line as
``# $ nvidia-smi ...``, and another rule. gpuwise reads the sections it understands —
``--query-gpu`` CSV, ``dmon``, ``-q`` text and ``--version`` — and passes over the rest
(help texts, ``pmon``, per-process queries, symbol lists).

Sections without their own clock (dmon without ``-o T``) are placed right after the latest
time seen in the sections before them, ``delay_s`` apart.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from gpuwise.telemetry.readers import nvsmi_dmon, nvsmi_qtext, nvsmi_query
from gpuwise.telemetry.readers.nvsmi_fields import Parsed

_RULE = re.compile(r"^#{20,}\s*$")
_DELAY = re.compile(r"(?:-d|--delay)[ =](\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class Section:
    """One section of a capture and where its samples went.

    Attributes:
        title: The banner's title (``"load :: dmon (per-device monitor, incl. PCIe rx/tx)"``).
        command: The command line after ``# $`` (empty when the banner has none).
        format: ``"nvsmi-query-csv"``, ``"nvsmi-dmon"``, ``"nvsmi-q"``, ``"nvsmi-version"``
            or ``"other"`` (not read).
        line: 1-based file line number of the section's first content line.
        start: Index of the section's first sample in the parse's sample list.
        stop: One past the index of its last sample.
    """

    title: str
    command: str
    format: str
    line: int
    start: int
    stop: int


def is_capture(lines: Sequence[str]) -> bool:
    """True when the text holds at least one ``# $ nvidia-smi`` section banner."""
    return any(line.startswith("# $ nvidia-smi") for line in lines)


def banners(lines: Sequence[str]) -> Iterator[tuple[str, str, int, int]]:
    """Yield ``(title, command, first content offset, end offset)`` for every section."""
    opening = _openings(lines)
    for n, (a, b) in enumerate(opening):
        head = [lines[k][1:].strip() for k in range(a + 1, b)]
        command = next((h[1:].strip() for h in head if h.startswith("$")), "")
        title = next((h for h in head if not h.startswith("$")), "")
        end = opening[n + 1][0] if n + 1 < len(opening) else len(lines)
        yield title, command, b + 1, end


def _openings(lines: Sequence[str]) -> list[tuple[int, int]]:
    """Pairs of rule lines enclosing only ``#`` lines: the banners, in order."""
    rules = [i for i, line in enumerate(lines) if _RULE.match(line)]
    out: list[tuple[int, int]] = []
    k = 0
    while k + 1 < len(rules):
        a, b = rules[k], rules[k + 1]
        if b > a + 1 and all(lines[i].startswith("#") for i in range(a + 1, b)):
            out.append((a, b))
            k += 2
        else:
            k += 1
    return out


def section_format(command: str) -> str:
    """Name the format of a section from its command line."""
    if "nvidia-smi" not in command:
        return "other"
    if "--query-gpu" in command:
        return "nvsmi-query-csv"
    if re.search(r"\bdmon\b", command):
        return "nvsmi-dmon"
    if re.search(r"(^|\s)-q(\s|$)", command) and " -x" not in command:
        return "nvsmi-q"
    if "--version" in command:
        return "nvsmi-version"
    return "other"


def parse_capture(lines: Sequence[str], *, last_cut: bool = False) -> tuple[Parsed, list[Section]]:
    """Parse every readable section of a capture.

    Args:
        lines: All lines of the file, without line ends.
        last_cut: The file ends inside the last line (no final newline).

    Returns:
        The samples (absolute times, file order), devices, skipped records and host facts of
        all sections, and the list of sections with the slice of samples each produced.
    """
    out = Parsed()
    sections: list[Section] = []
    clock_s = 0.0
    for title, command, begin, end in banners(lines):
        fmt = section_format(command)
        body = list(lines[begin:end])
        cut = last_cut and end == len(lines)
        start = len(out.samples)
        part = _parse_section(fmt, command, body, begin + 1, cut, clock_s)
        if part is not None:
            out.extend(part)
            clock_s = max([clock_s, *(s.t_s for s in part.samples)])
        first = next((k for k in range(begin, end) if lines[k].strip()), begin)
        sections.append(Section(title, command, fmt, first + 1, start, len(out.samples)))
    return out, sections


def _parse_section(
    fmt: str, command: str, body: list[str], first_line: int, cut: bool, clock_s: float
) -> Parsed | None:
    first = next((i for i, line in enumerate(body) if line.strip()), None)
    if first is None:
        return None
    rest, line_no = body[first:], first_line + first
    if fmt == "nvsmi-query-csv" and nvsmi_query.looks_like_header(rest[0]):
        return nvsmi_query.parse_query_csv(_trim(rest), line_no, last_cut=cut)
    if fmt == "nvsmi-dmon":
        m = _DELAY.search(command)
        delay_s = float(m.group(1)) if m else nvsmi_dmon.DEFAULT_DELAY_S
        return nvsmi_dmon.parse_dmon(
            _trim(rest), line_no, last_cut=cut, start_s=clock_s + delay_s, delay_s=delay_s
        )
    if fmt == "nvsmi-q":
        return nvsmi_qtext.parse_q(rest, line_no, start_s=clock_s)
    if fmt == "nvsmi-version":
        return _version_facts(rest)
    return None


def _trim(lines: list[str]) -> list[str]:
    """Drop trailing blank lines (they separate sections)."""
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    return lines[:end]


def _version_facts(lines: Sequence[str]) -> Parsed:
    out = Parsed()
    for line in lines:
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "driver version":
            out.facts["driver_version"] = value.strip()
        elif key == "cuda version":
            out.facts["cuda_driver_version"] = value.strip()
    return out
