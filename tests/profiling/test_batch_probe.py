"""The first batch's facts (``profiling.batch_probe``) and the data kind read from them."""

from __future__ import annotations

import torch

from gpuwise.diagnose.anatomy.data_kind import data_kind, loader_image_side
from gpuwise.diagnose.fixes import feed
from gpuwise.profiling import batch_probe


def test_facts_of_a_tuple_and_a_dict_batch() -> None:
    images = torch.zeros(4, 3, 32, 32)
    images[0, 0, 0, 0] = 1.0
    assert batch_probe.batch_facts((images, torch.tensor([1, 0, 1, 0]))) == {
        "dtype": "float32", "shape": [4, 3, 32, 32], "min": 0.0, "max": 1.0,
    }  # fmt: skip
    ids = torch.tensor([[5, 7, 9], [1, 2, 3]])
    assert batch_probe.batch_facts({"label": "x", "input_ids": ids}) == {
        "dtype": "int64", "shape": [2, 3], "min": 1.0, "max": 9.0, "key": "input_ids",
    }  # fmt: skip
    assert batch_probe.batch_facts(["no", "tensor"]) == {}


def test_first_batch_is_read_once_per_dataset() -> None:
    seen: list[tuple[int, dict[str, object]]] = []
    batch_probe.listen(lambda key, facts: seen.append((key, facts)))
    try:

        class It:
            _dataset = object()

        it = It()
        for value in (1.0, 2.0, 3.0):
            batch_probe.first_batch(it, torch.full((2, 2), value))
    finally:
        batch_probe.listen(None)
    assert seen == [(id(It._dataset), {"dtype": "float32", "shape": [2, 2], "min": 1.0,
                                       "max": 1.0})]  # fmt: skip


def _kind(batch: dict[str, object], dataset: str = "__main__.PairDataset") -> tuple[str, str]:
    setup = {"loaders": [{"dataset": dataset, "transforms": "", "collate": "", "batch": batch}]}
    return data_kind(setup)


def test_kinds_from_batches_a_class_names_no_kind_of() -> None:
    f32 = {"dtype": "float32", "min": -0.42, "max": 2.8}
    assert _kind({**f32, "shape": [16, 3, 32, 32]}) == (
        "images", "batch: the first batch is float32 [16, 3, 32, 32] in [-0.42, 2.8]"
    )  # fmt: skip
    assert _kind({"dtype": "uint8", "shape": [8, 28, 28], "min": 0, "max": 255})[0] == "images"
    assert _kind({"dtype": "uint8", "shape": [8, 64, 64, 3], "min": 0, "max": 255})[0] == "images"
    assert _kind({"dtype": "int64", "shape": [8, 128], "min": 0, "max": 50000})[0] == "tokens"
    assert _kind({"dtype": "float32", "shape": [8, 16000], "min": -0.9, "max": 0.8})[0] == "audio"
    assert _kind({**f32, "shape": [64, 4]})[0] == "tensors"  # a 4-feature table
    assert _kind({**f32, "shape": [64, 3, 4, 4]})[0] == "tensors"  # 4x4 is no picture
    # the class names a kind: it wins over the batch
    assert _kind({**f32, "shape": [16, 3, 32, 32]}, "torch.utils.data.TensorDataset")[0] == (
        "tensors"
    )


def test_image_fixes_take_the_batch_side_never_a_fixed_224() -> None:
    batch = {"dtype": "float32", "shape": [16, 3, 32, 24], "min": 0.0, "max": 1.0}
    side = loader_image_side({"loaders": [{"batch": batch}]})
    assert side == 24
    assert feed.gpuwise_store(side).how.startswith("gpuwise pack images/ train.store --size 24  ")
    assert "DeviceTransform(24)" in feed.uint8_across(side).how
    assert feed.batched_transforms(side).how.startswith(
        "gpuwise.data.transforms.DeviceTransform(24)"
    )
    unknown = feed.gpuwise_store(None).how
    assert "--size S " in unknown
    assert unknown.endswith("# S = your images' side in pixels")
    assert "224" not in unknown + feed.uint8_across(None).how + feed.batched_transforms(None).how
