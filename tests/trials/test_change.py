"""The change in the user's source: keyword edits found with ``ast``, diffs with ``difflib``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuwise.trials.change import changes_for, edit_call, patch_for, statement_line
from gpuwise.trials.plan import Trial

PLAIN = """\
import torch
from torch.utils.data import DataLoader

loader = DataLoader(
    dataset,
    batch_size=32,
    num_workers=0,
)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
"""

HF = """\
args = TrainingArguments(output_dir="out", per_device_train_batch_size=8)
trainer = Trainer(model=model, args=args)
trainer.train()
"""

LOADER = Trial("loader_workers", "", "input_bound", 1.5, {
    "loader": {"num_workers": 2, "persistent_workers": True}, "torch_threads": 2,
})  # fmt: skip
FUSED = Trial("optimizer_fused", "", "optimizer_bound", 1.4, {
    "optimizer_class": "SGD", "optimizer": {"fused": True},
})  # fmt: skip


def _setup(path: Path, framework: str = "plain", **opt: Any) -> dict[str, Any]:
    hf = framework == "hf_trainer"
    return {
        "framework": framework,
        "loaders": [{"file": str(path), "line": 3 if hf else 5, "num_workers": 0}],
        "optimizers": [
            {"file": str(path), "line": 3 if hf else 9, "class": "SGD", **opt},
        ],
    }


def test_edit_replaces_a_given_argument_and_adds_the_others():
    new = edit_call(PLAIN, 5, "DataLoader", {"num_workers": 2, "persistent_workers": True})
    assert new is not None
    assert "    num_workers=2, persistent_workers=True,\n)" in new
    assert new.count("num_workers") == 1
    assert edit_call(PLAIN, 5, "Missing", {"x": 1}) is None
    assert edit_call("f(", 1, "f", {"x": 1}) is None  # not Python: no edit


def test_edit_of_an_empty_call_and_of_a_string_value():
    assert edit_call("x = f()\n", 1, "f", {"optim": "adamw_torch_fused"}) == (
        'x = f(optim="adamw_torch_fused")\n'
    )


def test_statement_line_of_a_multiline_call():
    assert statement_line(PLAIN, 6) == 4


def test_patch_for_plain_pytorch_edits_both_calls_and_inserts_the_threads(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(PLAIN)
    diff = patch_for([LOADER, FUSED], _setup(path))
    assert diff.startswith("--- a/train.py\n+++ b/train.py\n")
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and "+++" not in line]
    assert added == [
        "torch.set_num_threads(2)  # leave the other cores to the loader workers",
        "    num_workers=2, persistent_workers=True,",
        "opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)",
    ]
    assert path.read_text() == PLAIN  # nothing applied


def test_hf_trainer_change_edits_training_arguments(tmp_path):
    path = tmp_path / "hf.py"
    path.write_text(HF)
    fused = Trial("optimizer_fused", "", "optimizer_bound", 1.4, {
        "optimizer_class": "AdamW", "optimizer": {"fused": True},
    })  # fmt: skip
    setup = _setup(path, "hf_trainer")
    setup["optimizers"][0]["class"] = "AdamW"
    diff = patch_for([LOADER, fused], setup)
    assert (
        '+args = TrainingArguments(output_dir="out", per_device_train_batch_size=8, '
        "dataloader_num_workers=2, dataloader_persistent_workers=True, "
        'optim="adamw_torch_fused")'
    ) in diff
    change = changes_for([LOADER], setup)[0]
    assert change["text"].startswith(
        "TrainingArguments(dataloader_num_workers=2, dataloader_persistent_workers=True)"
    )
    assert change["line"] == 3


def test_lightning_change_names_the_datamodule(tmp_path):
    path = tmp_path / "lit.py"
    path.write_text(PLAIN)
    change = changes_for([LOADER], _setup(path, "lightning"))[0]
    assert change["text"].startswith("LightningDataModule.train_dataloader(): DataLoader(")
    assert change["diff"] is not None
    assert "+    num_workers=2, persistent_workers=True," in change["diff"]


def _applies(tool: list[str], folder: Path, diff: str) -> str:
    """Apply ``diff`` in ``folder`` with a real ``patch`` or ``git apply``; its output."""
    import shutil
    import subprocess

    import pytest

    if shutil.which(tool[0]) is None:
        pytest.skip(f"{tool[0]} is not installed")
    (folder / "fix.patch").write_bytes(diff.encode())
    done = subprocess.run(
        [*tool, "fix.patch"], cwd=folder, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"{tool} refused the diff: {done.stdout}{done.stderr}"
    return done.stdout


def test_a_crlf_script_gets_a_crlf_diff_that_patch_and_git_apply_take(tmp_path):
    crlf = PLAIN.replace("\n", "\r\n").encode()
    for tool in (["patch", "-p1", "-i"], ["git", "apply"]):
        folder = tmp_path / tool[0]
        folder.mkdir()
        path = folder / "train.py"
        path.write_bytes(crlf)
        diff = patch_for([LOADER, FUSED], _setup(path))
        added = [x for x in diff.split("\n") if x.startswith("+") and not x.startswith("+++")]
        assert len(added) == 3
        assert all(x.endswith("\r") for x in added), added  # the file's own line ends
        _applies(tool, folder, diff)
        edited = path.read_bytes()
        assert b"\r\n" in edited
        assert b"\n" not in edited.replace(b"\r\n", b"")
        assert b"num_workers=2, persistent_workers=True,\r\n" in edited
        assert b"torch.set_num_threads(2)  # leave the other cores to the loader workers\r\n" in (
            edited
        )


def test_a_script_without_a_last_newline_gets_a_diff_patch_takes(tmp_path):
    path = tmp_path / "train.py"
    text = PLAIN.rstrip("\n")  # the optimizer line, edited, is the file's last
    path.write_text(text)
    diff = patch_for([FUSED], _setup(path))
    assert diff.count("\\ No newline at end of file\n") == 2
    _applies(["patch", "-p1", "-i"], tmp_path, diff)
    assert path.read_text() == text.replace("momentum=0.9)", "momentum=0.9, fused=True)")
