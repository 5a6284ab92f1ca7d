from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import simplejpeg

from gpuwise.cli.main import main


def _folder(root: Path) -> None:
    rng = np.random.default_rng(0)
    for cls, count in (("ant", 3), ("bee", 2)):
        (root / cls).mkdir(parents=True)
        for i in range(count):
            img = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
            (root / cls / f"{i}.jpg").write_bytes(simplejpeg.encode_jpeg(img))
    (root / "bee" / "bad.jpg").write_bytes(b"\xff\xd8 truncated")


def test_pack_info_verify_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _folder(tmp_path / "src")
    assert main(["pack", str(tmp_path / "src"), str(tmp_path / "s"), "--size", "16", "--json"]) == 0
    packed = json.loads(capsys.readouterr().out)
    assert packed["records"] == 5
    assert packed["classes"] == ["ant", "bee"]
    assert [s["item"] for s in packed["skipped"]] == ["bee/bad.jpg"]
    assert packed["fields"]["image"]["shape"] == [16, 16, 3]

    assert main(["store", "info", str(tmp_path / "s"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["records"] == 5
    assert info["bytes"] == 5 * 16 * 16 * 3 + 5 * 8
    assert info["mode"] == "raw"

    assert main(["store", "verify", str(tmp_path / "s"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


def test_verify_exits_1_naming_the_corrupt_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.save(tmp_path / "x.npy", np.ones((4, 5, 5, 3), np.uint8))
    np.save(tmp_path / "y.npy", np.arange(4))
    src, dst = str(tmp_path / "x.npy"), str(tmp_path / "s")
    assert main(["pack", src, dst, "--labels", str(tmp_path / "y.npy")]) == 0
    assert "packed 4 records" in capsys.readouterr().out
    shard = tmp_path / "s/label.bin"
    shard.write_bytes(b"\x07" + shard.read_bytes()[1:])
    assert main(["store", "verify", dst]) == 1
    captured = capsys.readouterr()
    assert "BAD label.bin" in captured.out
    assert "label.bin" in captured.err
    assert "corrupt" in captured.err


def test_text_info_and_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _folder(tmp_path / "src")
    dst = str(tmp_path / "s")
    assert main(["pack", str(tmp_path / "src"), dst, "--mode", "jpeg"]) == 0
    capsys.readouterr()
    assert main(["store", "info", dst]) == 0
    out = capsys.readouterr().out
    assert "jpeg mode" in out
    assert "records: 5" in out
    assert "classes: 2 (ant, bee)" in out
    assert main(["pack", str(tmp_path / "src"), dst]) == 2  # a usage error: pick another DST
    assert "already exists" in capsys.readouterr().err
    assert main(["pack", str(tmp_path / "src"), str(tmp_path / "t"), "--mode", "raw"]) == 1
    err = capsys.readouterr().err
    assert "--size" in err
    assert "--mode jpeg" in err
    assert main(["store", "info", str(tmp_path / "src")]) == 1
    assert "not a gpuwise store" in capsys.readouterr().err


def test_json_schemas_and_dtype_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "x.npy", np.ones((3, 4, 4, 3), np.uint8))
    dst = str(tmp_path / "s")
    assert main(["pack", str(tmp_path / "x.npy"), dst, "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["schema"] == "gpuwise.pack/1"
    assert captured.err == ""  # no progress bar outside a terminal
    assert main(["store", "info", dst, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == "gpuwise.store_info/1"
    assert main(["store", "verify", dst, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == "gpuwise.store_verify/1"
    assert main(["store", "info", dst]) == 0
    assert "field image: uint8 4x4x3 (image.bin)" in capsys.readouterr().out


def test_verify_names_every_truncated_or_missing_shard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.save(tmp_path / "x.npy", np.ones((4, 5, 5, 3), np.uint8))
    np.save(tmp_path / "y.npy", np.arange(4))
    dst = tmp_path / "s"
    assert (
        main(["pack", str(tmp_path / "x.npy"), str(dst), "--labels", str(tmp_path / "y.npy")]) == 0
    )
    capsys.readouterr()
    (dst / "image.bin").write_bytes(b"\x00" * 10)
    (dst / "label.bin").unlink()
    assert main(["store", "verify", str(dst), "--json"]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["ok"] is False
    assert [(s["file"], s["ok"]) for s in report["shards"]] == [
        ("image.bin", False),
        ("label.bin", False),
    ]
    assert "has 10 bytes, the header says 300" in report["shards"][0]["problem"]
    assert "label.bin is missing" in report["shards"][1]["problem"]
    assert captured.err.count("gpuwise store: error: ") == 2


def test_missing_labels_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.save(tmp_path / "x.npy", np.ones((2, 4, 4, 3), np.uint8))
    argv = ["pack", str(tmp_path / "x.npy"), str(tmp_path / "s"), "--labels", "nope.npy"]
    assert main(argv) == 1
    assert capsys.readouterr().err == (
        "gpuwise pack: error: labels file 'nope.npy' does not exist; check the path\n"
    )
