"""CBT (CBSA attention) against the authors' layout: parameter counts, their state dicts' logits through timm's
loader, the two poolings told apart, and the CPU-scale member's white-box trace."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from reference_cbt import ReferenceCBT, pool_bins

import crate  # noqa: F401
from crate.layers.cbsa import cbsa_representatives
from crate.metrics import trace_model


@pytest.mark.parametrize(
    ("name", "count"),
    [
        ("cbt_tiny_patch16_224", 1_789_192),
        ("cbt_small_patch16_224", 6_667_048),
        ("cbt_base_patch16_224", 25_691_752),
        ("cbt_large_patch16_224", 83_051_368),
    ],
)
def test_parameter_counts_are_the_authors(name: str, count: int) -> None:
    """The counts of the authors' classes with 1000 classes (their Ours_base/large name an undefined class
    ``Ours``; built with CBSA, the class meant, they have these counts)."""
    with torch.device("meta"):
        model = timm.create_model(name)
    assert sum(p.numel() for p in model.parameters()) == count


def _perturbed_reference(**kwargs) -> ReferenceCBT:
    torch.manual_seed(0)
    reference = ReferenceCBT(**kwargs).eval()
    with torch.no_grad():
        for module in reference.modules():  # non-trivial norms and BatchNorm statistics, so each must load
            if isinstance(module, torch.nn.LayerNorm | torch.nn.BatchNorm2d):
                module.weight.add_(0.1 * torch.randn_like(module.weight))
                module.bias.add_(0.1 * torch.randn_like(module.bias))
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    return reference


@pytest.mark.parametrize("patch", [16, 8])
def test_an_authors_state_dict_gives_the_authors_logits_through_timm(tmp_path: Path, patch: int) -> None:
    """CBT-T at 64 pixels (16 or 64 patches), its state dict saved as their training code saves it (under
    ``model``), loaded by ``timm.create_model(..., pretrained=True, pretrained_cfg_overlay=dict(file=...))``."""
    img = 64
    reference = _perturbed_reference(dim=192, depth=3, heads=3, patch=patch, img=img, classes=1000)
    file = tmp_path / "cbt.pth"
    torch.save({"model": reference.state_dict()}, file)
    name = f"cbt_tiny_patch{patch}_224"
    model = timm.create_model(name, pretrained=True, img_size=img, depth=3, pretrained_cfg_overlay=dict(file=str(file)))
    images = torch.randn(2, 3, img, img, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(images), reference(images), atol=1e-5, rtol=1e-5)


def test_another_models_file_is_refused_with_what_it_holds(tmp_path: Path) -> None:
    reference = _perturbed_reference(dim=384, depth=2, heads=6, patch=16, img=64, classes=1000)
    file = tmp_path / "cbt_small.pth"
    torch.save(reference.state_dict(), file)
    with pytest.raises(ValueError, match="does not fit"):
        timm.create_model(
            "cbt_tiny_patch16_224", pretrained=True, img_size=64, depth=2, pretrained_cfg_overlay=dict(file=str(file))
        )


def test_the_two_poolings_are_the_reference_one_and_the_patch_tokens_alone() -> None:
    """``reference`` pools the first int(sqrt(N))^2 tokens (class token included, last patch left out);
    ``patches`` the patch tokens; both against explicit bins, and the two differ."""
    tokens = torch.randn(2, 1 + 36, 8)
    reference = cbsa_representatives(tokens, 4, False, 1)
    patches = cbsa_representatives(tokens, 4, True, 1)
    torch.testing.assert_close(reference, pool_bins(tokens[:, :36].reshape(2, 6, 6, 8), 4))
    torch.testing.assert_close(patches, pool_bins(tokens[:, 1:].reshape(2, 6, 6, 8), 4))
    assert not torch.allclose(reference, patches)
    with pytest.raises(ValueError, match="square grid"):
        cbsa_representatives(torch.randn(1, 1 + 35, 8), 4, True, 1)


def test_the_cpu_member_pools_the_patch_tokens_as_an_independent_transcription_does(tmp_path: Path) -> None:
    reference = _perturbed_reference(dim=96, depth=2, heads=4, patch=4, img=32, classes=10, grid=4, patches_only=True)
    file = tmp_path / "nano.pth"
    torch.save(reference.state_dict(), file)
    model = timm.create_model(
        "cbt_nano_patch4_32", pretrained=True, num_classes=10, depth=2, pretrained_cfg_overlay=dict(file=str(file))
    ).eval()
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(images), reference(images), atol=1e-5, rtol=1e-5)
        the_authors_pooling = timm.create_model(
            "cbt_nano_patch4_32", pretrained=True, num_classes=10, depth=2, rep_pool="reference",
            pretrained_cfg_overlay=dict(file=str(file)),
        ).eval()  # fmt: skip
        assert not torch.allclose(the_authors_pooling(images), reference(images), atol=1e-3)


def test_the_trace_of_a_cbt_block_is_its_forward_with_its_subspaces_and_no_maps() -> None:
    model = timm.create_model("cbt_nano_patch4_32", num_classes=10).eval()
    images = torch.randn(2, 3, 32, 32)
    traces = trace_model(model, images)
    with torch.no_grad():
        torch.testing.assert_close(model.norm(traces[-1].z_out), model.forward_features(images))
        x = model.blocks[0].norm1(traces[0].z_in)
        torch.testing.assert_close(traces[0].z_half, traces[0].z_in + model.blocks[0].attn(x))
    assert all(trace.attention is None for trace in traces)
    assert traces[0].subspaces.shape == (4, 96, 24)
