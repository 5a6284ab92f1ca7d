"""The change to make, in the user's framework, at the line that built the object.

A winning trial's overrides become edits of the user's own source: keyword arguments of
the ``DataLoader(...)`` or optimizer call found (with ``ast``) at the captured file:line,
of the ``TrainingArguments(...)`` call for a Hugging Face Trainer job, whose loaders and
optimizer the Trainer builds from those arguments, or, for an Accelerate script, of its
``Accelerator(...)`` call (mixed precision, compilation). The result is a unified diff
against the real file (``difflib``), nothing applied. What cannot be a keyword edit
(autocast and ``torch.compile`` outside Accelerate) is a line of text in the framework's
own terms.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpuwise.diagnose.fixes.calls import find_call, kept_arguments, script_option
from gpuwise.diagnose.fixes.terms import (
    HF_LOADER_ARGS,
    accelerator_record,
    first_record,
    framework_setting,
    records_for,
)
from gpuwise.records.trial_spec import JOB_OPTIMIZER, optimizer_flags
from gpuwise.trials.plan import Trial

ACCELERATOR_ARGS = {
    "autocast": ("mixed_precision", "bf16"),
    "compile": ("dynamo_backend", "inductor"),
}
"""Trial overrides an Accelerate script sets on its ``Accelerator(...)`` call."""


def _py(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _offset(lines: list[str], line: int, col: int) -> int:
    """Character offset in the joined text of ``(line, UTF-8 byte column)``."""
    before = sum(len(x) for x in lines[: line - 1])
    return before + len(lines[line - 1].encode("utf-8")[:col].decode("utf-8"))


def edit_call(text: str, line: int | None, callee: str, kwargs: Mapping[str, Any]) -> str | None:
    """``text`` with ``kwargs`` set on the ``callee(...)`` call at ``line``.

    An argument the call already passes gets the new value in place; the others are added
    after its last argument. Returns ``None`` when no such call is found.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    call = find_call(tree, line, callee)
    if call is None:
        return None
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    given = {k.arg: k for k in call.keywords if k.arg}
    added = []
    for key, value in kwargs.items():
        if key in given:
            v = given[key].value
            start = _offset(lines, v.lineno, v.col_offset)
            end = _offset(lines, v.end_lineno or v.lineno, v.end_col_offset or 0)
            edits.append((start, end, _py(value)))
        else:
            added.append(f"{key}={_py(value)}")
    if added:
        nodes: list[ast.expr | ast.keyword] = [*call.args, *call.keywords]
        if nodes:
            last = max(nodes, key=lambda n: (n.end_lineno or 0, n.end_col_offset or 0))
            at = _offset(lines, last.end_lineno or 0, last.end_col_offset or 0)
            edits.append((at, at, ", " + ", ".join(added)))
        else:
            at = _offset(lines, call.end_lineno or 0, call.end_col_offset or 0) - 1
            edits.append((at, at, ", ".join(added)))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def insert_before(text: str, line: int, statement: str) -> str:
    """``text`` with ``statement`` on its own line before ``line``, at that line's indent."""
    lines = text.splitlines(keepends=True)
    target = lines[line - 1]
    indent = target[: len(target) - len(target.lstrip())]
    lines.insert(line - 1, f"{indent}{statement}{_line_end(target)}")
    return "".join(lines)


def _line_end(line: str) -> str:
    r"""The line's own ending (``\r\n`` in a Windows-edited file), ``\n`` for none."""
    body = line.rstrip("\r\n")
    return line[len(body) :] or "\n"


def read_source(path: str | Path) -> str:
    r"""A script's text with its line endings as they are (``\r\n`` stays ``\r\n``).

    A diff of a CRLF file must keep its CRs, or neither ``patch`` nor ``git apply``
    finds the lines it changes.

    Raises:
        OSError: The file cannot be read.
        UnicodeDecodeError: It is not UTF-8.
    """
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read()


def unified_diff(path: str, old: str, new: str) -> str:
    """The unified diff of one file, ``a/`` and ``b/`` prefixed like ``git diff``."""
    name = Path(path).name
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{name}",
        tofile=f"b/{name}",
    )
    # a last line without an ending is marked as ``diff`` marks it, or the next line of
    # the diff would be read as part of it
    return "".join(x if x.endswith("\n") else f"{x}\n\\ No newline at end of file\n" for x in lines)


def _edits(
    trial: Trial, setup: Mapping[str, Any]
) -> Iterable[tuple[str, Any, str, dict[str, Any]]]:
    """``(record kind, record, callee, kwargs)`` for each call the trial edits."""
    framework = setup.get("framework", "plain")
    loader = first_record(setup, "loaders")
    hf = framework == "hf_trainer"
    if "loader" in trial.spec and loader is not None:
        kwargs = dict(trial.spec["loader"])
        if hf:
            kwargs = {HF_LOADER_ARGS[k]: v for k, v in kwargs.items() if k in HF_LOADER_ARGS}
        yield "loader", loader, "TrainingArguments" if hf else "DataLoader", kwargs
    by_class = optimizer_flags(trial.spec)
    for record in records_for(by_class, setup) if by_class else []:
        flags = by_class.get(str(record.get("class"))) or by_class.get(JOB_OPTIMIZER) or {}
        if hf:
            if record.get("class") == "AdamW" and flags.get("fused"):
                yield "optimizer", record, "TrainingArguments", {"optim": "adamw_torch_fused"}
        else:
            yield "optimizer", record, str(record.get("class")), flags
    site = accelerator_record(setup) if framework == "accelerate" else None
    owned = {k: v for k, v in ACCELERATOR_ARGS.items() if trial.spec.get(k)}
    if site is not None and owned:
        yield "accelerator", site, "Accelerator", dict(owned.values())


def changes_for(winners: list[Trial], setup: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One change per winning trial: where, what to write, and the diff of that edit alone."""
    out = []
    for trial in winners:
        edits = list(_edits(trial, setup))
        where = edits[0][1] if edits else _first_record(setup)
        out.append(
            {
                "trial": trial.name,
                "framework": setup.get("framework", "plain"),
                "file": where.get("file"),
                "line": where.get("line"),
                "code": where.get("code"),
                "text": _change_text(trial, setup),
                "diff": patch_for([trial], setup) or None,
            }
        )
    return out


def _change_text(trial: Trial, setup: Mapping[str, Any]) -> str:
    """The trial's setting in the framework's terms, with the script's own options kept."""
    kept = _kept([trial], setup)
    own = framework_setting(trial.name, trial.spec, setup, kept={k for k, _ in kept})
    return "; ".join([p for p in (own, *(line for _, line in kept)) if p != trial.name] or [own])


def _first_record(setup: Mapping[str, Any]) -> Mapping[str, Any]:
    records = list(setup.get("optimizers") or []) + list(setup.get("loaders") or [])
    return records[0] if records else {}


_SIMPLE = (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return)


def statement_line(text: str, line: int) -> int:
    """The first line of the simple statement that holds ``line`` (``line`` if none)."""
    spans = [
        (n.lineno, n.end_lineno or n.lineno)
        for n in ast.walk(ast.parse(text))
        if isinstance(n, _SIMPLE) and n.lineno <= line <= (n.end_lineno or n.lineno)
    ]
    return min(spans, key=lambda s: s[1] - s[0])[0] if spans else line


def _optimizer_site(setup: Mapping[str, Any]) -> tuple[str, int | None, str] | None:
    """``(file, line, callee)`` of the optimizer the job built, in the process that trains."""
    opt = first_record(setup, "optimizers")
    if opt is None or not opt.get("file") or setup.get("framework", "plain") != "plain":
        return None
    return str(opt["file"]), opt.get("line"), str(opt.get("class"))


def _insert_threads(
    files: dict[str, tuple[str, str]], at: tuple[str, int | None, str], threads: int, why: str
) -> None:
    """Insert ``torch.set_num_threads(threads)`` before the statement of the call at ``at``."""
    path, line, callee = at
    if path not in files:
        try:
            text = read_source(path)
        except (OSError, UnicodeDecodeError):
            return
        files[path] = (text, text)
    old, new = files[path]
    try:
        call = find_call(ast.parse(new), line, callee)
    except SyntaxError:
        return
    if call is None:
        return
    statement = f"torch.set_num_threads({threads})  # {why}"
    files[path] = (old, insert_before(new, statement_line(new, call.lineno), statement))


def merged_spec(trials: Iterable[Trial]) -> dict[str, Any]:
    """The overrides of several trials in one spec (nested objects merged)."""
    merged: dict[str, Any] = {}
    for t in trials:
        for key, value in t.spec.items():
            merged[key] = {**merged.get(key, {}), **value} if isinstance(value, dict) else value
    return merged


def kept_options(winners: list[Trial], setup: Mapping[str, Any]) -> list[str]:
    """How to set what the diff leaves to the script's own options or variables.

    One line each: ``run with --mixed_precision bf16 (train.py:41 passes
    mixed_precision=args.mixed_precision)``, or, for a variable, ``set mixed_precision to
    "bf16" where train.py:41 reads it from mp``.
    """
    return [line for _, line in _kept(winners, setup)]


def _kept(winners: list[Trial], setup: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(argument, how to set it)`` for each argument ``kept_options`` describes."""
    spec = merged_spec(winners)
    out = []
    for _, rec, callee, kwargs in _edits(Trial("combined", "", None, None, spec), setup):
        path = rec.get("file")
        line = None if callee == "TrainingArguments" else rec.get("line")
        try:
            text = Path(str(path)).read_text("utf-8") if path else ""
        except (OSError, UnicodeDecodeError):
            continue
        site = f"{Path(str(path)).name}:{rec.get('line')}"
        for key, source in kept_arguments(text, line, callee, kwargs).items():
            value = kwargs[key]
            option = script_option(text, source)
            if option is not None:
                out.append((key, f"run with {option} {value} ({site} passes {key}={source})"))
            else:
                how = f"set {key} to {_py(value)} where {site} reads it from {source}"
                out.append((key, how))
    return out


def patch_for(winners: list[Trial], setup: Mapping[str, Any]) -> str:
    """One unified diff with the winners' edits together, file by file (nothing applied).

    An argument the script passes as an expression (its own option, a variable) is not
    replaced: the diff opens with a ``#`` line per such argument saying how to set it
    (``kept_options``; ``git apply`` and ``patch`` skip text before the first file).
    """
    spec = merged_spec(winners)
    files: dict[str, tuple[str, str]] = {}
    threads_at = None
    for kind, rec, callee, kwargs in _edits(Trial("combined", "", None, None, spec), setup):
        path = rec.get("file")
        line = None if callee == "TrainingArguments" else rec.get("line")
        if not path or not kwargs:
            continue
        try:
            old, current = files.get(path) or (read_source(path),) * 2
        except (OSError, UnicodeDecodeError):
            continue
        kept = kept_arguments(current, line, callee, kwargs)
        kwargs = {k: v for k, v in kwargs.items() if k not in kept}
        if not kwargs:
            continue
        new = edit_call(current, line, callee, kwargs)
        if new is not None:
            files[path] = (old, new)
            threads_at = (path, line, callee) if kind == "loader" else threads_at
    if spec.get("torch_threads"):
        why = "leave the other cores to the loader workers"
        if threads_at is None:  # no loader edit: before the line that built the optimizer
            threads_at = _optimizer_site(setup)
            why = "one thread per core across the job's processes"
        if threads_at is not None:
            _insert_threads(files, threads_at, int(spec["torch_threads"]), why)
    notes = "".join(f"# {line}\n" for line in kept_options(winners, setup))
    return notes + "".join(unified_diff(p, old, new) for p, (old, new) in files.items())
