"""ToST: the reference sizes to the parameter, and a reference-layout checkpoint loads with identical logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import timm.optim
import torch
from reference_tost import ReferenceToST

import crate  # noqa: F401
from benchmarks.official_layouts import perturb_
from crate.models import CheckpointError


@pytest.mark.parametrize(
    "name,params",
    [
        ("tost_cab_tiny_12_p16", 5_769_328),
        ("tost_cab_small_12_p16", 22_589_944),
        ("tost_cab_medium_24_p16", 71_481_064),
        ("tost_cab_large_24_p16", 160_286_920),
    ],
)
def test_parameter_counts_equal_the_reference(name: str, params: int) -> None:
    with torch.device("meta"):
        model = timm.create_model(name, num_classes=1000)
    assert sum(p.numel() for p in model.parameters()) == params


def _reference(patch: int, depth: int = 2) -> ReferenceToST:
    torch.manual_seed(0)
    reference = perturb_(ReferenceToST(dim=64, depth=depth, heads=4, patch=patch, classes=10, eta=1.0), scale=0.1)
    generator = torch.Generator().manual_seed(1)
    for module in reference.modules():  # running statistics off their initial values too
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.copy_(0.1 * torch.randn(module.num_features, generator=generator))
            module.running_var.copy_(1 + 0.5 * torch.rand(module.num_features, generator=generator))
    return reference.eval()


@pytest.mark.parametrize("patch", [16, 8])
@pytest.mark.parametrize("wrap", ["plain", "model"])
def test_reference_checkpoint_loads_with_identical_logits(tmp_path: Path, patch: int, wrap: str) -> None:
    reference = _reference(patch)
    state = reference.state_dict()
    torch.save({"model": state, "epoch": 3} if wrap == "model" else state, tmp_path / "tost.pth")
    ours = timm.create_model(
        f"tost_cab_tiny_12_p{patch}",
        pretrained=True,
        pretrained_cfg_overlay=dict(file=str(tmp_path / "tost.pth")),
        num_classes=10,
        embed_dim=64,
        depth=2,
        img_size=64,
    ).eval()
    x = torch.randn(3, 3, 64, 64)
    with torch.no_grad():
        expected = reference(x)
        torch.testing.assert_close(ours(x), expected, atol=1e-5, rtol=1e-5)
    assert expected.abs().max() > 0.1  # a non-trivial output: the comparison is not between zeros


def test_a_training_checkpoint_loads_safely_with_its_model_or_its_average(tmp_path: Path) -> None:
    # the layout of ToST's training script: weights, their moving average, the optimizer and the run's
    # argparse namespace (which torch.load(weights_only=True) refuses unless allowed)
    import argparse

    model, average = _reference(16), _reference(16)
    with torch.no_grad():
        for param in average.parameters():
            param.mul_(0.5)
    checkpoint = {
        "model": model.state_dict(),
        "model_ema": average.state_dict(),
        "optimizer": torch.optim.AdamW(model.parameters()).state_dict(),
        "args": argparse.Namespace(model="tost_cab_tiny_12_p16", lr=5e-4, drop_path=0.1),
        "epoch": 299,
    }
    torch.save(checkpoint, tmp_path / "checkpoint.pth")
    build = dict(pretrained=True, num_classes=10, embed_dim=64, depth=2, img_size=64)
    x = torch.randn(2, 3, 64, 64)
    for ema, reference in ((False, model), (True, average)):
        overlay = dict(file=str(tmp_path / "checkpoint.pth"), ema=ema)
        ours = timm.create_model("tost_cab_tiny_12_p16", pretrained_cfg_overlay=overlay, **build).eval()
        with torch.no_grad():
            torch.testing.assert_close(ours(x), reference(x), atol=1e-5, rtol=1e-5)
    torch.save({"model": model.state_dict()}, tmp_path / "plain.pth")
    with pytest.raises(CheckpointError, match="holds no model_ema"):
        overlay = dict(file=str(tmp_path / "plain.pth"), ema=True)
        timm.create_model("tost_cab_tiny_12_p16", pretrained_cfg_overlay=overlay, **build)
    # an object that is not a namespace (here a class) is never unpickled
    torch.save(dict(checkpoint, args=argparse.ArgumentParser), tmp_path / "code.pth")
    with pytest.raises(CheckpointError, match="other than tensors .*argparse.ArgumentParser"):
        overlay = dict(file=str(tmp_path / "code.pth"))
        timm.create_model("tost_cab_tiny_12_p16", pretrained_cfg_overlay=overlay, **build)


def test_reference_checkpoint_of_another_size_is_refused(tmp_path: Path) -> None:
    torch.save(_reference(16).state_dict(), tmp_path / "tost.pth")
    with pytest.raises(CheckpointError, match="does not fit"):
        timm.create_model(
            "tost_cab_tiny_12_p16",
            pretrained=True,
            pretrained_cfg_overlay=dict(file=str(tmp_path / "tost.pth")),
            num_classes=10,
            img_size=64,
        )


def test_conv_stem_is_timms_xcit_stem_for_reference_patch_sizes() -> None:
    from timm.models.xcit import ConvPatchEmbed

    from crate.layers import ConvStem

    for patch in (16, 8):
        ours, timms = ConvStem(64, patch, 3, 64).eval(), ConvPatchEmbed(64, patch, 3, 64).eval()
        assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in timms.state_dict().items()}
        timms.load_state_dict(ours.state_dict())
        x = torch.randn(2, 3, 64, 64)
        with torch.no_grad():
            (a, grid_a), (b, grid_b) = ours(x), timms(x)
        torch.testing.assert_close(a, b)
        assert grid_a == grid_b
    with pytest.raises(ValueError, match="power-of-two patch size"):
        ConvStem(64, 6, 3, 64)


def test_temperatures_and_position_encoding_get_no_weight_decay() -> None:
    model = timm.create_model("tost_nano_patch4_32", num_classes=10)
    optimizer = timm.optim.create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05)
    names = {id(p): n for n, p in model.named_parameters()}
    undecayed = {names[id(p)] for g in optimizer.param_groups if g["weight_decay"] == 0 for p in g["params"]}
    assert {f"blocks.{i}.attn.temp" for i in range(4)} <= undecayed
    assert {"cls_token", "pos_embed.token_projection.weight"} <= undecayed
    assert "blocks.0.attn.qkv.weight" not in undecayed


@pytest.mark.parametrize("size", [(64, 64), (40, 48)])
def test_dynamic_img_size_gives_the_model_built_at_that_size(size: tuple[int, int]) -> None:
    """``dynamic_img_size=True`` was a TypeError for ToST alone among the zoo's families; its Fourier encoding
    is computed per grid, so a dynamic model must equal the one built at the input's size, with the same weights."""
    dynamic = timm.create_model("tost_nano_patch4_32", dynamic_img_size=True).eval()
    built = timm.create_model("tost_nano_patch4_32", img_size=size).eval()
    built.load_state_dict(dynamic.state_dict())
    x = torch.randn(2, 3, *size)
    with torch.no_grad():
        torch.testing.assert_close(dynamic(x), built(x), rtol=0, atol=0)
    with pytest.raises(AssertionError, match=r"built for 32x32 images .* img_size="):
        timm.create_model("tost_nano_patch4_32").eval()(x)
