from __future__ import annotations

import sys

import pytest

from gpuwise.errors import MissingExtraError


def test_without_ray_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuwise.integrations.ray import fit_measured

    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail
    with pytest.raises(MissingExtraError, match=r"pip install 'gpuwise\[ray\]'") as err:
        fit_measured(lambda: None)
    assert err.value.extra == "ray"


def _train() -> None:
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=8)
    for (x,) in data:
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@pytest.mark.slow
@pytest.mark.dist
def test_ray_train_workers_are_each_measured() -> None:
    pytest.importorskip("ray.train", reason="Ray Train is an optional extra: gpuwise[ray]")
    from gpuwise.integrations.ray import fit_measured

    run = fit_measured(_train, num_workers=2)
    assert run.exit_code == 0
    ranks = run.to_dict(include_samples=False)["ranks"]
    assert ranks["step_counts"] == {"0": 8, "1": 8}
    assert ranks["ddp"]["backend"] == "gloo"
    assert ranks["comm"]["iterations"] >= 6
