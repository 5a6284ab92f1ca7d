"""Calls in the user's script, read with ``ast``: the one at a recorded line, its arguments.

A fix or a change that sets an argument must not drop the script's own wiring: where the
call already passes it as an expression (``Accelerator(mixed_precision=args.mixed_precision)``),
``kept_arguments`` finds it and ``script_option`` names the command-line option it reads, so
the fix says ``run with --mixed_precision bf16`` instead of hard-coding the value.
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any


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


def kept_arguments(
    text: str, line: int | None, callee: str, kwargs: Mapping[str, Any]
) -> dict[str, str]:
    """The ``kwargs`` the call at ``line`` already passes as an expression, with its source.

    ``Accelerator(mixed_precision=args.mixed_precision)`` reads the script's own option: an
    edit that wrote ``"bf16"`` there would drop it, so such arguments are kept and the
    change says how to set them (``script_option``) instead.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    call = find_call(tree, line, callee)
    if call is None:
        return {}
    return {
        k.arg: ast.get_source_segment(text, k.value) or k.arg
        for k in call.keywords
        if k.arg is not None and k.arg in kwargs and not isinstance(k.value, ast.Constant)
    }


def script_option(text: str, expression: str) -> str | None:
    """The command-line option (``--mixed_precision``) whose value ``expression`` reads.

    ``args.mixed_precision`` names the ``dest`` of an ``add_argument`` call in ``text``;
    ``None`` when the expression is not such an attribute or no option has that ``dest``.
    """
    try:
        expr = ast.parse(expression, mode="eval").body
        tree = ast.parse(text)
    except SyntaxError:
        return None
    if not isinstance(expr, ast.Attribute):
        return None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _callee(node) == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant)]
        flags = [n for n in names if isinstance(n, str) and n.startswith("-")]
        dest = next((k.value.value for k in node.keywords if k.arg == "dest"
                     and isinstance(k.value, ast.Constant)), None)  # fmt: skip
        longest = max(flags, key=len) if flags else None
        if dest is None and longest is not None:
            dest = longest.lstrip("-").replace("-", "_")
        if dest == expr.attr and flags:
            return next((f for f in flags if f.startswith("--")), flags[0])
    return None


def option_setting(file: Any, line: Any, callee: str, key: str, value: Any) -> str | None:
    """``run with --option value`` when the call at ``file:line`` passes ``key`` from an option.

    ``None`` when the file cannot be read, the call passes ``key`` as a literal or not at all,
    or the expression is not a command-line option of the script.
    """
    if not file:
        return None
    with contextlib.suppress(OSError, UnicodeDecodeError):
        text = Path(str(file)).read_text("utf-8")
        source = kept_arguments(text, line if isinstance(line, int) else None, callee, {key: value})
        option = script_option(text, source[key]) if key in source else None
        if option is not None:
            return f"run with {option} {value} (your script's own option; {key}={source[key]})"
    return None
