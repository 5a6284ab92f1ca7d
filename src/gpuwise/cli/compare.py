"""``gpuwise compare BEFORE AFTER``: did the fix deliver the speedup the diagnosis promised?"""

from __future__ import annotations

import argparse
import sys

from gpuwise.cli._args import add_html, add_json, add_strict, number
from gpuwise.cli._common import check_writable, guard, make_console, print_json

HELP = "compare two runs (before/after a fix): speedup with its interval, phases, verdicts"
EXAMPLES = """\
  gpuwise compare naive.json fixed.json             Runs saved by `gpuwise profile --out`
  gpuwise compare before.pt.trace.json.gz after.pt.trace.json.gz
  gpuwise compare base.json new.json --max-regression 5
                                                    CI guard: exit 1 when NEW is more than
                                                    5 % slower beyond the step-time noise
  gpuwise compare a.json b.json --json              the gpuwise.compare/1 object
  gpuwise compare a.json b.json --html compare.html before/after bars per phase
Exit codes: 0 ok, 1 regression (with --max-regression) or error, 2 usage error."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise compare``."""
    parser.add_argument("before", metavar="BEFORE", help="run, trace or log before the change")
    parser.add_argument("after", metavar="AFTER", help="run, trace or log after the change")
    parser.add_argument(
        "--max-regression",
        type=number("regression percent", 0.0, 1000.0),
        metavar="PCT",
        help="exit 1 when AFTER's steps are more than PCT %% slower and the 95 %% interval "
        "of the slowdown excludes 0 (noise passes)",
    )
    add_json(parser, "gpuwise.compare/1")
    add_html(parser)
    add_strict(parser)


@guard
def run(args: argparse.Namespace) -> int:
    """Compare the two inputs, print the report (or JSON), exit 1 on a regression."""
    from gpuwise.atomic import check_outputs
    from gpuwise.diagnose.analyze import analyze
    from gpuwise.diagnose.compare import compare_runs

    check_outputs([(args.html, "HTML report")], [(args.before, "BEFORE"), (args.after, "AFTER")])
    check_writable(args.html, "HTML report")
    runs = (analyze([args.before], strict=args.strict), analyze([args.after], strict=args.strict))
    result = compare_runs(
        *runs, names=(args.before, args.after), max_regression_pct=args.max_regression
    )
    doc = result.to_dict()
    if args.json:
        print_json(doc)
    else:
        from gpuwise.report.comparisons.compare_text import render_comparison

        render_comparison(doc, make_console())
    if args.html:
        from gpuwise.report.comparisons.compare_html import write_compare_html

        write_compare_html(doc, args.html, runs)
        print(f"gpuwise compare: wrote {args.html}", file=sys.stderr)
    return 1 if result.regressed else 0
