"""A framework's option the script exposes is kept and used, never replaced (issue 40, 11).

An Accelerate script that builds ``Accelerator(mixed_precision=args.mixed_precision)`` from
its own ``--mixed_precision`` option: the bf16 change is "run with --mixed_precision bf16",
the ``--patch`` diff leaves that line alone, and the profile's fix says the same.
"""

from __future__ import annotations

from pathlib import Path

from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.diagnose.fixes.calls import script_option
from gpuwise.diagnose.fixes.terms import in_user_terms
from gpuwise.records import Finding
from gpuwise.trials.change import changes_for, patch_for
from gpuwise.trials.plan import Trial

SCRIPT = """\
import argparse
from accelerate import Accelerator
parser = argparse.ArgumentParser()
parser.add_argument("--mixed_precision", type=str, default=None, choices=["no", "fp16", "bf16"])
parser.add_argument("--cpu", action="store_true")
args = parser.parse_args()
accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
"""

LITERAL = SCRIPT.replace("mixed_precision=args.mixed_precision", 'mixed_precision="no"')

BF16 = Trial("autocast_bf16", "", None, None, {"autocast": "bfloat16"})


def _setup(path: Path) -> dict[str, object]:
    site = {"file": str(path), "line": 7}
    prepared = {"file": str(path), "line": 9, "accelerator": site}
    return {
        "framework": "accelerate",
        "loaders": [],
        "optimizers": [{"file": str(path), "line": 8, "class": "AdamW", "prepared_at": prepared}],
    }


def test_the_option_a_call_reads_is_named() -> None:
    assert script_option(SCRIPT, "args.mixed_precision") == "--mixed_precision"
    assert script_option(SCRIPT, "args.cpu") == "--cpu"
    assert script_option(SCRIPT, "mp") is None
    assert script_option(SCRIPT.replace("--mixed_precision", "--mixed-precision"),
                         "args.mixed_precision") == "--mixed-precision"  # fmt: skip


def test_the_patch_keeps_the_scripts_option_and_says_how_to_use_it(tmp_path: Path) -> None:
    path = tmp_path / "nlp_example.py"
    path.write_text(SCRIPT)
    setup = _setup(path)
    diff = patch_for([BF16], setup)
    assert diff == (
        "# run with --mixed_precision bf16 (nlp_example.py:7 passes "
        "mixed_precision=args.mixed_precision)\n"
    )
    (change,) = changes_for([BF16], setup)
    assert change["text"] == (
        "run with --mixed_precision bf16 (nlp_example.py:7 passes "
        "mixed_precision=args.mixed_precision)"
    )


def test_a_literal_is_still_edited(tmp_path: Path) -> None:
    path = tmp_path / "nlp_example.py"
    path.write_text(LITERAL)
    diff = patch_for([BF16], _setup(path))
    assert '+accelerator = Accelerator(cpu=args.cpu, mixed_precision="bf16")' in diff
    assert not diff.startswith("#")


def test_the_profile_fix_uses_the_scripts_option(tmp_path: Path) -> None:
    path = tmp_path / "nlp_example.py"
    path.write_text(SCRIPT)
    precision = fx.mixed_precision("8.0", False)
    assert precision is not None
    finding = Finding("healthy", "info", "", {}, None, (precision,))
    (fixed,) = in_user_terms([finding], _setup(path))
    assert fixed.fixes[0].how == (
        "run with --mixed_precision bf16 (your script's own option; "
        "mixed_precision=args.mixed_precision)  # at nlp_example.py:7"
    )
    path.write_text(LITERAL)
    (fixed,) = in_user_terms([finding], _setup(path))
    assert fixed.fixes[0].how == 'Accelerator(mixed_precision="bf16")  # at nlp_example.py:7'
