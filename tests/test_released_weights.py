"""Released weights of the family by name: the CRATE-alpha authors' hub files as pretrained tags, served from
a local hub cache offline (files built in the authors' layout by an independent transcription)."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from hub_cache import serve_offline

import crate  # noqa: F401
from benchmarks.official_layouts import OfficialCrateAlpha, perturb_
from crate.models import CheckpointError

HUB = "UCSC-VLAA/CRATE-alpha"
RELEASED = {  # tag -> (file in the hub repository, classes, patch, width, depth, heads)
    "crate_alpha_base_patch16_224.in21k_ft_in1k": ("torch/crate_alpha_B16.pth", 1000, 16, 768, 12, 12),
    "crate_alpha_large_patch14_224.in21k_ft_in1k": ("torch/crate_alpha_L14.pth", 1000, 14, 1024, 24, 16),
    "crate_alpha_base_patch32_224.in21k": ("torch/in21k_Pretrain/crate_alpha_B32_in21k.pth", 19167, 32, 768, 12, 12),
    "crate_alpha_large_patch32_224.in21k": ("torch/in21k_Pretrain/crate_alpha_L32_in21k.pth", 19167, 32, 1024, 24, 16),
    "crate_alpha_base_patch16_224.in21k": ("torch/in21k_Pretrain/crate_alpha_B16_IN21K", 19167, 16, 768, 12, 12),
    "crate_alpha_base_patch8_224.in21k": ("torch/in21k_Pretrain/crate_alpha_B8_IN21K", 19167, 8, 768, 12, 12),
    "crate_alpha_large_patch14_224.in21k": ("torch/in21k_Pretrain/crate_alpha_L14_IN21K", 19167, 14, 1024, 24, 16),
    "crate_alpha_large_patch8_224.in21k": ("torch/in21k_Pretrain/crate_alpha_L8_IN21K", 19167, 8, 1024, 24, 16),
}


@pytest.mark.parametrize("tag", sorted(RELEASED))
def test_every_released_file_has_a_tag_with_the_authors_evaluation(tag: str) -> None:
    filename, classes, patch, width, depth, heads = RELEASED[tag]
    cfg = timm.models.get_pretrained_cfg(tag)
    assert (cfg.hf_hub_id, cfg.hf_hub_filename, cfg.num_classes) == (HUB, filename, classes)
    # the authors' evaluation: resize 224, centre crop 224, bilinear, ImageNet statistics
    assert (cfg.input_size, cfg.crop_pct, cfg.interpolation) == ((3, 224, 224), 1.0, "bilinear")
    assert cfg.mean == (0.485, 0.456, 0.406) and cfg.std == (0.229, 0.224, 0.225)
    assert cfg.paper_ids == "arXiv:2405.20299" and cfg.license
    if classes == 1000:
        assert ("81.2" if "base" in tag else "83.9") in cfg.notes[0]
    with torch.device("meta"):
        model = timm.create_model(tag)  # the architecture the file needs, with the file's classes
    assert model.num_classes == classes and model.patch_embed.patch_size == (patch, patch)
    assert (model.embed_dim, len(model.blocks), model.blocks[0].attn.num_heads) == (width, depth, heads)
    untagged = timm.models.get_pretrained_cfg(tag.split(".")[0])
    assert untagged.hf_hub_id is None and untagged.num_classes == 1000  # the bare name stays untrained


def _authors_file(path: Path, tag: str, seed: int = 0) -> OfficialCrateAlpha:
    _, classes, patch, width, depth, heads = RELEASED[tag]
    torch.manual_seed(seed)
    authors = OfficialCrateAlpha(image=224, patch=patch, classes=classes, dim=width, depth=depth, heads=heads)
    perturb_(authors, seed=seed, scale=0.02).eval()
    torch.save(authors.state_dict(), path)
    return authors


@pytest.mark.parametrize("tag", ["crate_alpha_base_patch16_224.in21k_ft_in1k", "crate_alpha_base_patch16_224.in21k"])
def test_a_released_file_loads_by_name_from_the_hub_cache_with_the_authors_logits(
    tag: str, tmp_path: Path, monkeypatch
) -> None:
    filename = RELEASED[tag][0]
    authors = _authors_file(tmp_path / "weights", tag)
    serve_offline(monkeypatch, tmp_path / "cache", HUB, {filename: tmp_path / "weights"})
    model = timm.create_model(tag, pretrained=True).eval()
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model(x), authors(x), atol=1e-4, rtol=1e-4)
    config = timm.data.resolve_data_config({}, model=model)
    assert config["crop_pct"] == 1.0 and config["interpolation"] == "bilinear"


def test_a_bad_or_absent_released_file_is_one_clear_error(tmp_path: Path, monkeypatch) -> None:
    tag = "crate_alpha_base_patch16_224.in21k_ft_in1k"
    serve_offline(monkeypatch, tmp_path / "empty", "someone/else", {})
    with pytest.raises(CheckpointError, match="not in the local hub cache"):
        timm.create_model(tag, pretrained=True)
    (tmp_path / "broken.pth").write_bytes(b"PK\x03\x04 not a whole file")
    serve_offline(monkeypatch, tmp_path / "cache", HUB, {RELEASED[tag][0]: tmp_path / "broken.pth"})
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        timm.create_model(tag, pretrained=True)
    # another model's file under this name: a B/32 with 1000 classes where B/16's weights belong
    torch.save(
        OfficialCrateAlpha(image=224, patch=32, classes=1000, dim=768, depth=12, heads=12).state_dict(),
        tmp_path / "b32.pth",
    )
    serve_offline(monkeypatch, tmp_path / "cache2", HUB, {RELEASED[tag][0]: tmp_path / "b32.pth"})
    with pytest.raises(CheckpointError, match="does not fit"):
        timm.create_model(tag, pretrained=True)


def test_the_authors_demo_crate_loads_from_its_file(tmp_path: Path) -> None:
    from benchmarks.official_layouts import OfficialCRATE

    # the demo file: {'model': ...} of the official CRATE with 6 heads of 128 at width 768, patch 8, an
    # mlp_head of LayerNorm + Linear(768, 768), and a head Linear(768, 21842) that its forward never calls
    torch.manual_seed(0)
    demo = OfficialCRATE(image=224, patch=8, classes=768, dim=768, depth=12, heads=6)
    perturb_(demo, scale=0.02).eval()
    state = dict(demo.state_dict(), **{f"head.{k}": v for k, v in torch.nn.Linear(768, 21842).state_dict().items()})
    torch.save({"model": state}, tmp_path / "crate-demo.pth")
    model = timm.create_model(
        "crate_demo_patch8_224", pretrained=True, pretrained_cfg_overlay=dict(file=str(tmp_path / "crate-demo.pth"))
    ).eval()
    assert model.blocks[0].attn.num_heads == 6 and model.num_classes == 768
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model(x), demo(x), atol=1e-4, rtol=1e-4)
    # the official layout does not record the head count: the 12-head B/8 takes the same tensors and
    # computes something else (why the demo has an architecture of its own)
    overlay = dict(file=str(tmp_path / "crate-demo.pth"))
    twelve = timm.create_model(
        "crate_base_patch8_224", pretrained=True, num_classes=768, pretrained_cfg_overlay=overlay
    )
    with torch.no_grad():
        assert (twelve.eval()(x) - demo(x)).abs().max() > 1e-2


def _released_file(kind: str, path: Path) -> tuple[str, dict]:
    """A file of one released format at a small size, and the ``timm.create_model`` kwargs that fit it."""
    import argparse

    from reference_crate_mae import ReleasedCrateMAE
    from reference_tost import ReferenceToST

    from benchmarks.official_layouts import OfficialCRATE

    torch.manual_seed(0)
    if kind == "crate demo":  # {'model': ...} of the official layout, plus the head its forward never calls
        model = OfficialCRATE(image=32, patch=8, classes=768, dim=768, depth=2, heads=6)
        state = dict(model.state_dict(), **{f"head.{k}": v for k, v in torch.nn.Linear(768, 5).state_dict().items()})
        torch.save({"model": state}, path)
        return "crate_demo_patch8_224", dict(img_size=32, depth=2)
    if kind == "crate-mae":
        model = ReleasedCrateMAE(img=32, patch=4, chans=3, dim=96, depth=4, heads=4, decoder_depth=4)
        torch.save({"model": model.state_dict()}, path)
        return "crate_mae_nano_patch4_32", dict(lambd=0.5, num_classes=0)
    model = ReferenceToST(dim=64, depth=2, heads=4, patch=16, classes=10, eta=1.0)
    torch.save({"model": model.state_dict(), "model_ema": model.state_dict(), "args": argparse.Namespace(x=1)}, path)
    return "tost_cab_tiny_12_p16", dict(num_classes=10, embed_dim=64, depth=2, img_size=64)


@pytest.mark.parametrize("kind", ["crate demo", "crate-mae", "tost"])
def test_each_released_format_good_corrupt_and_another_model_s(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "weights.pth"
    name, kwargs = _released_file(kind, path)
    overlay = dict(file=str(path))
    timm.create_model(name, pretrained=True, pretrained_cfg_overlay=overlay, **kwargs)  # the good file loads
    # another architecture with the file's classes: refused for what its layers hold, not for its head
    other = {"crate demo": ("crate_alpha_base_patch8_224", dict(num_classes=768, img_size=32))}.get(
        kind, ("crate_nano_patch4_32", dict(num_classes=10 if kind == "tost" else 0))
    )
    with pytest.raises(CheckpointError, match="does not fit|unrecognised keys"):
        timm.create_model(other[0], pretrained=True, pretrained_cfg_overlay=overlay, **other[1])
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        timm.create_model(name, pretrained=True, pretrained_cfg_overlay=overlay, **kwargs)
