"""``gpuwise estimate --hf-config`` with mistyped, out-of-range or inconsistent fields.

Promise: each such field is refused with a message that names it, its value and what is
expected (never "unexpected ...; report it"), before torch or transformers is imported and
before any model is built: a huge depth (``1e6`` layers) takes no memory and raises no
MemoryError.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.faults.helpers import run
from tests.sizing.hf_configs import tiny_llama_config

pytest.importorskip("transformers", reason="--hf-config builds models with transformers")

LLAMA = tiny_llama_config(num_key_value_heads=2, max_position_embeddings=128)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("hidden_size", "4096", 'hidden_size is "4096"; give a whole number'),
        ("hidden_size", 4096.5, "hidden_size is 4096.5; give a whole number"),
        ("hidden_size", -4096, "hidden_size is -4096; give a whole number"),
        ("num_hidden_layers", 1e6, "num_hidden_layers is 1000000.0; give a whole number"),
        ("num_hidden_layers", 10_000_000, "num_hidden_layers is 10000000; give a whole number"),
        ("num_hidden_layers", True, "num_hidden_layers is true"),
        ("num_attention_heads", 5, "num_attention_heads 5 does not divide hidden_size 64"),
        ("num_key_value_heads", 3, "num_key_value_heads 3 does not divide"),
    ],
)
def test_a_bad_field_is_named_with_what_is_expected(
    tmp_path: Path, field: str, value: Any, says: str
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**LLAMA, field: value}))
    done = run(["estimate", "--hf-config", str(config), "--seq", "16"], tmp_path)
    assert done.returncode != 0
    assert says in done.stderr, done.stderr
    assert "unexpected" not in done.stderr
    assert "report it" not in done.stderr


def test_a_config_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text("[1, 2]")
    done = run(["estimate", "--hf-config", str(config)], tmp_path)
    assert done.returncode != 0
    assert "not an object of config fields" in done.stderr, done.stderr


@pytest.mark.parametrize("command", ["estimate", "advise", "tune"])
def test_a_bad_field_is_refused_before_torch_is_imported(tmp_path: Path, command: str) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**LLAMA, "hidden_size": -1}))
    probe = (
        "import sys; from gpuwise.cli.main import main\n"
        f"code = main([{command!r}, '--hf-config', {str(config)!r}])\n"
        "print(code, 'torch' in sys.modules, 'transformers' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert "hidden_size is -1; give a whole number" in done.stderr, done.stderr
    code, torch_loaded, transformers_loaded = done.stdout.split()
    assert code != "0"
    assert (torch_loaded, transformers_loaded) == ("False", "False"), done.stdout
