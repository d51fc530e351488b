"""Every registered zoo model builds, runs forward and backward, and matches the paper's sizes."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import timm
import torch

import crate  # noqa: F401  (registers the zoo)
from crate.models import create_classifier

ZOO = sorted(
    set(timm.list_models("crate_*")) - set(timm.list_models("crate_mae_*"))
    | {"crate_mae_nano_patch4_32"}
    | {"vit_nano_patch4_32", "vit_micro_patch4_32", "tost_nano_patch4_32", "tost_cab_tiny_12_p16"}
    | {"cbt_nano_patch4_32", "cbt_tiny_patch16_224"}
    | set(timm.list_models("vit_nano_patch4_32_*"))
)


def test_zoo_is_registered() -> None:
    expected = {
        "crate_tiny_patch16_224",
        "crate_small_patch16_224",
        "crate_base_patch16_224",
        "crate_large_patch16_224",
        "crate_base_patch8_224",
        "crate_nano_patch4_32",
        "crate_micro_patch4_32",
        "vit_nano_patch4_32",
        "vit_micro_patch4_32",
    }
    assert expected <= set(timm.list_models("crate*")) | set(timm.list_models("vit_*_patch4_32"))


@pytest.mark.parametrize(
    "name,params",
    [
        ("crate_tiny_patch16_224", 6_090_856),
        ("crate_small_patch16_224", 13_116_328),
        ("crate_base_patch16_224", 22_796_008),
        ("crate_large_patch16_224", 77_641_192),
    ],
)
def test_parameter_counts_match_the_paper(name: str, params: int) -> None:
    with torch.device("meta"):
        model = timm.create_model(name, num_classes=1000)
    assert sum(p.numel() for p in model.parameters()) == params


@pytest.mark.parametrize(
    "name,millions", [("crate_alpha_base_patch16_224", 72.3), ("crate_alpha_large_patch14_224", 253.7)]
)
def test_crate_alpha_sizes_match_the_paper(name: str, millions: float) -> None:
    with torch.device("meta"):
        model = timm.create_model(name, num_classes=1000)
    assert abs(sum(p.numel() for p in model.parameters()) / 1e6 - millions) < 0.05


@pytest.mark.parametrize("name", ZOO)
def test_forward_backward_reaches_every_parameter(name: str) -> None:
    # Images two patches a side keep the ImageNet-size members fast on CPU.
    size = 32 if "_32" in name else 2 * int(re.search(r"(?:patch|_p)(\d+)", name).group(1))
    torch.manual_seed(0)
    extra = {"decoder_depth": 0} if name.startswith("crate_mae") else {}  # the decoder: test_crate_mae.py
    model = timm.create_model(name, num_classes=7, in_chans=2, img_size=size, **extra)
    x = torch.randn(2, 2, size, size)
    out = model(x)
    assert out.shape == (2, 7)
    features = model.forward_features(x)
    assert features.shape[0] == 2 and features.shape[-1] == model.num_features
    assert model.forward_head(features, pre_logits=True).shape == (2, model.num_features)
    out.square().mean().backward()
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]  # not CRATE-MAE's fixed tables
    missing = [n for n, p in trained if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing, f"no (finite) gradient for {missing}"
    assert all(p.grad.abs().sum() > 0 for _, p in trained)


@pytest.mark.parametrize("global_pool", ["token", "avg"])
def test_global_pool_options(global_pool: str) -> None:
    model = timm.create_model("crate_nano_patch4_32", num_classes=3, global_pool=global_pool)
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 3)


@pytest.mark.parametrize("name", ["crate_nano_patch4_32", "vit_nano_patch4_32", "tost_nano_patch4_32"])
def test_wrong_image_size_or_channels_get_a_clear_error(name: str) -> None:
    model = timm.create_model(name, num_classes=10, in_chans=1)
    with pytest.raises(AssertionError, match=r"built for 32x32 images but got 28x28.*resize"):
        model(torch.randn(1, 1, 28, 28))
    with pytest.raises(AssertionError, match=r"built for 1-channel images but got 3-channel ones.*in_chans=3"):
        model(torch.randn(1, 3, 32, 32))
    with pytest.raises(AssertionError, match=r"got a 3-dimensional tensor \(one image: x.unsqueeze\(0\)\)"):
        model(torch.randn(1, 32, 32))
    # uint8 pixels, as torchvision.io reads them: a convolution's "expected scalar type Byte but found Float"
    with pytest.raises(AssertionError, match=r"expected floating-point images, .*create_transform.*integer tensor"):
        model(torch.randint(0, 255, (1, 1, 32, 32), dtype=torch.uint8))


def test_a_pruned_flat_patch_embedding_trains_on_its_masked_weights() -> None:
    """torch's pruning (Lightning's ModelPruning) computes ``proj.weight`` from ``weight_orig`` and its mask in the
    module's forward hook; the embedding read ``proj.weight`` with permuted columns without calling ``proj``, so
    the second step backpropagated through the first one's freed graph ("Trying to backward through the graph a
    second time"). Hooked, it calls its modules: the output is the plain embedding with the masked weights, and
    steps train."""
    from torch.nn.utils import prune

    torch.manual_seed(0)
    model = timm.create_model("crate_nano_patch4_32", num_classes=3, img_size=16, in_chans=1)
    embed = model.patch_embed
    reference = copy.deepcopy(embed)
    prune.l1_unstructured(embed.proj, "weight", amount=0.5)
    with torch.no_grad():
        reference.proj.weight.copy_(embed.proj.weight_orig * embed.proj.weight_mask)
    x = torch.randn(2, 1, 16, 16)
    torch.testing.assert_close(embed(x), reference(x), atol=1e-6, rtol=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    assert float((embed.proj.weight == 0).float().mean()) == pytest.approx(0.5, abs=0.01)


def test_unknown_model_name_gets_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"Unknown model 'crate_nanoo_patch4_32'.*crate_nano_patch4_32"):
        create_classifier("crate_nanoo_patch4_32", num_classes=10)
    for hub in ("local-dir:/runs/hub", "hf-hub:org/name", "hf_hub:org/name"):  # timm reads the last as the second
        with pytest.raises(ValueError, match=r"names a hub folder or repository, not an architecture: give the"):
            create_classifier(hub, num_classes=10)


def test_a_hub_folder_given_as_a_model_name_is_answered_with_what_it_holds(tmp_path: Path) -> None:
    """A folder crate.export --hub-dir wrote, given where an architecture belongs: the error names the architecture
    its config.json gives and its weights file, the two things to give instead."""
    import json
    import shutil

    shipped = Path(__file__).resolve().parents[1] / "checkpoints" / "crate_nano_patch4_32.digits.safetensors"
    shutil.copy(shipped, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "crate_nano_patch4_32", "num_classes": 10}))
    with pytest.raises(ValueError) as refused:
        create_classifier(f"local-dir:{tmp_path}", num_classes=10)
    assert str(refused.value) == (
        f"local-dir:{tmp_path} names a hub folder or repository, not an architecture: give its architecture, "
        f"crate_nano_patch4_32, as the model, and its weights, {tmp_path / 'model.safetensors'}, as the file to load"
    )


def test_factory_builds_timm_models_without_img_size() -> None:
    model = create_classifier("resnet10t", num_classes=4, in_chans=1, img_size=32)
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, 4)
    assert model.training  # the size check ran it once in eval mode, and handed it back for training


def test_a_network_that_cannot_take_the_image_size_is_refused_when_built() -> None:
    """ConvNeXt downsamples by 32: 16-px digits reach its last stage as nothing, and the first training step
    failed with a traceback from a convolution. 32 px is the least it takes."""
    with pytest.raises(ValueError, match=r"^convnext_atto cannot take 16x16 images \(Calculated padded input size"):
        create_classifier("convnext_atto", num_classes=4, in_chans=1, img_size=16)
    model = create_classifier("convnext_atto", num_classes=4, in_chans=1, img_size=32)
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, 4)
    # a network built for the size it is given may still not take it: CrossViT scales its branches' inputs
    with pytest.raises(ValueError, match=r"^crossvit_tiny_240 cannot take 16x16 images \(Calculated padded input"):
        create_classifier("crossvit_tiny_240", num_classes=4, in_chans=1, img_size=16)


def test_vit_twin_attention_under_cpu_bf16_is_softmax_attention_in_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    import crate.models.vit as vit

    torch.manual_seed(0)
    model = timm.create_model("vit_nano_patch4_32")
    attn = model.blocks[0].attn
    assert type(attn) is vit.TwinAttention
    x = torch.randn(2, 17, 96)
    sdpa_calls = []
    sdpa = vit.F.scaled_dot_product_attention
    monkeypatch.setattr(vit.F, "scaled_dot_product_attention", lambda *a, **k: sdpa_calls.append(1) or sdpa(*a, **k))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attn(x)
    assert not sdpa_calls  # the explicit core under CPU autocast
    # float64, written from the definition: per head softmax(q k^T / sqrt(p)) v, heads concatenated, projected
    x64, heads, width = x.double(), attn.num_heads, attn.head_dim
    q, k, v = (x64 @ attn.qkv.weight.double().T + attn.qkv.bias.double()).split(heads * width, dim=-1)
    q, k, v = (t.reshape(2, 17, heads, width).transpose(1, 2) for t in (q, k, v))
    mixed = torch.softmax(q @ k.transpose(-2, -1) / width**0.5, dim=-1) @ v
    expected = mixed.transpose(1, 2).reshape(2, 17, 96) @ attn.proj.weight.double().T + attn.proj.bias.double()
    assert out.dtype == torch.bfloat16
    assert (out.double() - expected).abs().max() <= 0.02 * expected.abs().max()
    assert torch.allclose(attn(x).double(), expected, atol=1e-5)  # float32: timm's fused forward
    assert sdpa_calls == [1]
