"""Patch dropout (``patch_drop_rate``, timm's ``PatchDropout``) in CRATE and CRATE-alpha: a training batch keeps
the class token and a random subset of each image's patch tokens; evaluation sees every token."""

from __future__ import annotations

import math

import pytest
import timm
import torch

import crate  # noqa: F401  (registers the zoo)
from crate.models.checkpoint import Checkpoint


@pytest.mark.parametrize("name", ["crate_nano_patch4_32", "crate_alpha_nano_patch4_32"])
@pytest.mark.parametrize("rate", [0.5, 0.3])
def test_training_keeps_the_class_token_and_distinct_patch_tokens(name: str, rate: float) -> None:
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=10, patch_drop_rate=rate)
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        full = model.eval()._embed(images)  # (3, 1 + 64, d)
        kept = model.train()._embed(images)
    patches = full.shape[1] - 1
    assert kept.shape == (3, 1 + math.floor((1 - rate) * patches), full.shape[2])
    assert torch.equal(kept[:, 0], full[:, 0])
    drawn = []
    for image in range(3):
        # each kept token is one of the image's own patch tokens, bit for bit, and none is kept twice
        matches = (kept[image, 1:, None, :] == full[image, None, 1:, :]).all(dim=-1)
        assert (matches.sum(dim=1) == 1).all()
        index = matches.float().argmax(dim=1)
        assert index.unique().numel() == index.numel()
        drawn.append(set(index.tolist()))
    assert len({frozenset(d) for d in drawn}) > 1, "every image kept the same tokens"


def test_evaluation_equals_the_model_without_patch_dropout() -> None:
    torch.manual_seed(0)
    dropped = timm.create_model("crate_micro_patch4_32", num_classes=10, patch_drop_rate=0.5)
    plain = timm.create_model("crate_micro_patch4_32", num_classes=10)
    plain.load_state_dict(dropped.state_dict(), strict=True)  # no parameter of its own
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(dropped.eval()(images), plain.eval()(images))
        assert dropped.train()(images).shape == (2, 10)


def test_a_run_with_patch_dropout_loads_without_it() -> None:
    held = Checkpoint(
        path="run.ckpt",
        state_dict={},
        layout="timm",
        source="lightning",
        hparams={"model_kwargs": {"patch_drop_rate": 0.5, "drop_path_rate": 0.1, "global_pool": "avg"}},
    )
    assert held.architecture_kwargs == {"global_pool": "avg"}


@pytest.mark.parametrize("rate", [-0.5, 1.0])
def test_a_rate_outside_zero_to_one_is_a_clear_error(rate: float) -> None:
    with pytest.raises(ValueError, match=r"patch_drop_rate .* in \[0, 1\); got"):
        timm.create_model("crate_nano_patch4_32", patch_drop_rate=rate)
