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

from gpuwise.diagnose.fix_terms import (
    HF_LOADER_ARGS,
    accelerator_record,
    first_record,
    framework_setting,
)
from gpuwise.trials.plan import Trial

ACCELERATOR_ARGS = {
    "autocast": ("mixed_precision", "bf16"),
    "compile": ("dynamo_backend", "inductor"),
}
"""Trial overrides an Accelerate script sets on its ``Accelerator(...)`` call."""


def _py(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _callee(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def find_call(tree: ast.AST, line: int | None, callee: str) -> ast.Call | None:
    """The innermost call of ``callee`` spanning ``line`` (any line: the first such call)."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _callee(n) == callee]
    if line is not None:
        calls = [c for c in calls if c.lineno <= line <= (c.end_lineno or c.lineno)]
        calls.sort(key=lambda c: (c.end_lineno or c.lineno) - c.lineno)
    else:
        calls.sort(key=lambda c: c.lineno)
    return calls[0] if calls else None


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
    lines.insert(line - 1, f"{indent}{statement}\n")
    return "".join(lines)


def unified_diff(path: str, old: str, new: str) -> str:
    """The unified diff of one file, ``a/`` and ``b/`` prefixed like ``git diff``."""
    name = Path(path).name
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"a/{name}",
            tofile=f"b/{name}",
        )
    )


def _edits(
    trial: Trial, setup: Mapping[str, Any]
) -> Iterable[tuple[str, Any, str, dict[str, Any]]]:
    """``(record kind, record, callee, kwargs)`` for each call the trial edits."""
    framework = setup.get("framework", "plain")
    loader = first_record(setup, "loaders")
    opt = first_record(setup, "optimizers")
    hf = framework == "hf_trainer"
    if "loader" in trial.spec and loader is not None:
        kwargs = dict(trial.spec["loader"])
        if hf:
            kwargs = {HF_LOADER_ARGS[k]: v for k, v in kwargs.items() if k in HF_LOADER_ARGS}
        yield "loader", loader, "TrainingArguments" if hf else "DataLoader", kwargs
    if "optimizer" in trial.spec and opt is not None:
        flags = dict(trial.spec["optimizer"])
        if hf:
            if opt.get("class") == "AdamW" and flags.get("fused"):
                yield "optimizer", opt, "TrainingArguments", {"optim": "adamw_torch_fused"}
        else:
            yield "optimizer", opt, str(opt.get("class")), flags
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
                "text": framework_setting(trial.name, trial.spec, setup),
                "diff": patch_for([trial], setup) or None,
            }
        )
    return out


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
            text = Path(path).read_text("utf-8")
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


def patch_for(winners: list[Trial], setup: Mapping[str, Any]) -> str:
    """One unified diff with the winners' edits together, file by file (nothing applied)."""
    spec = merged_spec(winners)
    files: dict[str, tuple[str, str]] = {}
    threads_at = None
    for kind, rec, callee, kwargs in _edits(Trial("combined", "", None, None, spec), setup):
        path = rec.get("file")
        line = None if callee == "TrainingArguments" else rec.get("line")
        if not path or not kwargs:
            continue
        try:
            old, current = files.get(path) or (Path(path).read_text("utf-8"),) * 2
        except (OSError, UnicodeDecodeError):
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
    return "".join(unified_diff(p, old, new) for p, (old, new) in files.items())
