"""Checkpoint conversion: official CRATE / CRATE-alpha layouts, Lightning and timm files, and clear errors."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import save_file

import crate  # noqa: F401
from benchmarks.official_layouts import OfficialCRATE, OfficialCrateAlpha, perturb_
from crate.models import CheckpointError


def _load(name: str, path: Path, **kwargs) -> torch.nn.Module:
    overlay = dict(file=str(path), **kwargs.pop("overlay", {}))
    return timm.create_model(name, pretrained=True, pretrained_cfg_overlay=overlay, **kwargs).eval()


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def _float32_bound(reference: torch.Tensor, per_unit: float = 1e-5) -> float:
    """The difference float32 sums taken in another order leave, scaled to the logits' size (the CPU's matmul
    kernels choose the order: AVX2 and AVX-512 machines differ); a swapped or misread tensor gives > 0.1."""
    return per_unit * max(1.0, reference.abs().max().item())


@pytest.mark.parametrize("wrap", ["plain", "state_dict_module"])
@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_official_crate_layout_gives_identical_logits(tmp_path: Path, wrap: str, pool: str) -> None:
    torch.manual_seed(0)
    official = perturb_(OfficialCRATE(image=32, patch=4, classes=10, dim=96, depth=4, heads=4, pool=pool)).eval()
    state = official.state_dict()
    if wrap == "state_dict_module":
        state = {"state_dict": {f"module.{k}": v for k, v in state.items()}}
    torch.save(state, tmp_path / "official.pth")
    pooling = dict(global_pool="avg", pool_include_prefix=True) if pool == "mean" else {}
    ours = _load("crate_nano_patch4_32", tmp_path / "official.pth", num_classes=10, **pooling)
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        expected = official(x)
        assert _max_diff(ours(x), expected) <= _float32_bound(expected)


def test_official_crate_tiny_at_224_gives_identical_logits(tmp_path: Path) -> None:
    torch.manual_seed(1)
    official = OfficialCRATE(image=224, patch=16, classes=1000, dim=384, depth=12, heads=6).eval()
    assert sum(p.numel() for p in official.parameters()) == 6_090_856
    perturb_(official, seed=1, scale=0.05)
    torch.save(official.state_dict(), tmp_path / "crate_tiny.pth")
    ours = _load("crate_tiny_patch16_224", tmp_path / "crate_tiny.pth")
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():  # 12 perturbed layers, float32 sums in another order: 1e-4 (a swapped tensor: > 0.1)
        assert _max_diff(ours(x), official(x)) <= 1e-4


@pytest.mark.parametrize("conv_bias", [False, True])
def test_official_crate_alpha_layout_gives_identical_logits(tmp_path: Path, conv_bias: bool) -> None:
    torch.manual_seed(2)
    official = OfficialCrateAlpha(image=32, patch=4, classes=10, dim=96, depth=4, heads=4, conv_bias=conv_bias)
    perturb_(official, seed=2).eval()
    torch.save(official.state_dict(), tmp_path / "alpha.pth")
    ours = _load("crate_alpha_nano_patch4_32", tmp_path / "alpha.pth", num_classes=10)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        expected = official(x)
        assert _max_diff(ours(x), expected) <= _float32_bound(expected)


def test_timm_safetensors_round_trip_and_pos_embed_resampling(tmp_path: Path) -> None:
    torch.manual_seed(3)
    model = timm.create_model("crate_nano_patch4_32", num_classes=5).eval()
    save_file(model.state_dict(), str(tmp_path / "nano.safetensors"))
    same = _load("crate_nano_patch4_32", tmp_path / "nano.safetensors", num_classes=5)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert _max_diff(same(x), model(x)) == 0.0
    bigger = _load("crate_nano_patch4_32", tmp_path / "nano.safetensors", num_classes=5, img_size=48)
    assert bigger.pos_embed.shape == (1, 1 + 12 * 12, 96)
    assert bigger(torch.randn(1, 3, 48, 48)).shape == (1, 5)


def test_lightning_checkpoint_loads_into_timm(tmp_path: Path) -> None:
    import lightning as L

    from crate.lit import DigitsDataModule, ImageClassifier

    torch.manual_seed(4)
    module = ImageClassifier("crate_nano_patch4_32", num_classes=10, in_chans=1, img_size=32)
    trainer = L.Trainer(
        max_steps=1, limit_val_batches=1, logger=False, enable_checkpointing=False, enable_progress_bar=False
    )
    trainer.fit(module, DigitsDataModule(batch_size=8))
    trainer.save_checkpoint(tmp_path / "run.ckpt")
    ours = _load("crate_nano_patch4_32", tmp_path / "run.ckpt", num_classes=10, in_chans=1)
    x = torch.randn(2, 1, 32, 32)
    module.eval()
    with torch.no_grad():
        assert _max_diff(ours(x), module(x)) == 0.0


def test_head_reset_keeps_the_body(tmp_path: Path) -> None:
    model = timm.create_model("crate_nano_patch4_32", num_classes=10)
    torch.save(model.state_dict(), tmp_path / "ten.pth")
    reset = _load("crate_nano_patch4_32", tmp_path / "ten.pth", num_classes=3, overlay=dict(num_classes=10))
    assert reset.head.out_features == 3
    torch.testing.assert_close(reset.blocks[0].ista.weight, model.blocks[0].ista.weight)


def test_num_classes_mismatch_without_head_reset_is_a_clear_error(tmp_path: Path) -> None:
    torch.save(timm.create_model("crate_nano_patch4_32", num_classes=10).state_dict(), tmp_path / "ten.pth")
    with pytest.raises(CheckpointError, match=r"head has 10 classes.*num_classes=3.*num_classes=10"):
        _load("crate_nano_patch4_32", tmp_path / "ten.pth", num_classes=3)


def test_checkpoint_of_another_architecture_is_a_clear_error(tmp_path: Path) -> None:
    torch.save(timm.create_model("crate_micro_patch4_32", num_classes=10).state_dict(), tmp_path / "micro.pth")
    with pytest.raises(CheckpointError, match=r"does not fit .*another architecture"):
        _load("crate_nano_patch4_32", tmp_path / "micro.pth", num_classes=10)


@pytest.mark.parametrize(
    ("saved", "built", "named"),
    [
        ("crate_nano_patch4_32", dict(depth=2), lambda m: f"depth={len(m.blocks)}"),
        ("crate_nano_patch4_32", dict(embed_dim=64), lambda m: f"embed_dim={m.embed_dim}"),
        ("crate_nano_patch4_32", dict(class_token=False, global_pool="avg"), lambda m: "class_token=True"),
        ("crate_nano_patch4_32", dict(global_pool="seq"), lambda m: "global_pool='token' or 'avg'"),
        ("crate_cct4_3x2_32", dict(depth=2), lambda m: f"depth={len(m.blocks)}"),  # read with another pooling: loads
        ("vit_cct4_3x2_32", dict(depth=2), lambda m: f"depth={len(m.blocks)}"),
    ],
)
def test_a_checkpoint_built_with_other_arguments_names_them(tmp_path: Path, saved: str, built: dict, named) -> None:
    """Building a model name with another depth, width or class token than its file's (or sequence pooling for
    a file without it) is refused, and the error names the argument the file was built with (read off the saved
    model, not the state dict)."""
    model = timm.create_model(saved, num_classes=10)
    torch.save(model.state_dict(), tmp_path / "saved.pth")
    with pytest.raises(CheckpointError, match="does not fit") as raised:
        _load(saved, tmp_path / "saved.pth", num_classes=10, **built)
    assert f"build the model with the checkpoint's {named(model)} (leave such arguments out" in str(raised.value)


def test_a_checkpoint_of_the_arguments_built_has_no_argument_to_name(tmp_path: Path) -> None:
    state = timm.create_model("crate_nano_patch4_32", num_classes=10).state_dict()
    state["blocks.0.ista.weight"] = state["blocks.0.ista.weight"][:, :-1]  # a shape no build argument explains
    torch.save(state, tmp_path / "odd.pth")
    with pytest.raises(CheckpointError, match=r"Pick the matching model name\.$"):
        _load("crate_nano_patch4_32", tmp_path / "odd.pth", num_classes=10)
    # timm's MAP pooling sits in the attn_pool slot the zoo's sequence pooling uses, but is not it
    torch.save(timm.create_model("vit_nano_patch4_32", num_classes=10, global_pool="map").state_dict(), tmp_path / "m")
    with pytest.raises(CheckpointError, match=r"Pick the matching model name\.$"):
        _load("vit_nano_patch4_32", tmp_path / "m", num_classes=10)


def test_checkpoint_with_missing_keys_is_a_clear_error(tmp_path: Path) -> None:
    state = timm.create_model("crate_nano_patch4_32", num_classes=10).state_dict()
    del state["blocks.2.ista.weight"]
    torch.save(state, tmp_path / "partial.pth")
    with pytest.raises(CheckpointError, match=r"missing \['blocks.2.ista.weight'\]"):
        _load("crate_nano_patch4_32", tmp_path / "partial.pth", num_classes=10)


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_corrupt_or_truncated_file_is_a_clear_error(tmp_path: Path, suffix: str) -> None:
    good = tmp_path / f"good{suffix}"
    state = timm.create_model("crate_nano_patch4_32", num_classes=10).state_dict()
    save_file(state, str(good)) if suffix == ".safetensors" else torch.save(state, good)
    bad = tmp_path / f"bad{suffix}"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 3])
    with pytest.raises(CheckpointError, match=r"bad.* (corrupt|not a valid)"):
        _load("crate_nano_patch4_32", bad, num_classes=10)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"does not exist"):
        _load("crate_nano_patch4_32", tmp_path / "nowhere.pth", num_classes=10)


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("crate_nano_patch4_32", r"names no weights by itself: pick one of its tags \(.*crate_nano_patch4_32\.digits"),
        ("crate_cct4_3x2_32", r"names no weights by itself: pick one of its tags \(crate_cct4_3x2_32\.cifar10\)"),
        ("crate_tiny_patch16_224", r"has no pretrained weights: give a checkpoint file"),
    ],
)
def test_pretrained_weights_of_a_bare_architecture_name_point_to_its_tags(name: str, said: str) -> None:
    """timm says "No pretrained weights exist" of a name whose weights are under its tags."""
    with pytest.raises(ValueError, match=said):
        timm.create_model(name, pretrained=True)
    assert timm.create_model(name, pretrained=False) is not None  # an untrained model needs no tag


def test_bytes_that_are_no_checkpoint_get_torch_s_finding_not_its_advice_to_unpickle_unsafely(tmp_path: Path) -> None:
    bad = tmp_path / "notes.pth"
    bad.write_bytes(b"garbage, not a checkpoint\n")  # torch's weights-only unpickler stops at its first byte
    with pytest.raises(CheckpointError) as caught:
        _load("crate_nano_patch4_32", bad, num_classes=10)
    message = str(caught.value)
    assert "corrupt or truncated, or not a torch checkpoint (Unsupported operand" in message
    assert "weights_only" not in message and "\n" not in message


@pytest.mark.parametrize("key", ["model_config", "label_names", "eval_transform"])
def test_a_safetensors_file_with_unreadable_metadata_is_one_checkpoint_error(tmp_path: Path, key: str) -> None:
    model = timm.create_model("crate_nano_patch4_32", num_classes=10)
    metadata = {"model_name": "crate_nano_patch4_32", "format": "pt", key: '{"cut off'}
    save_file(model.state_dict(), str(tmp_path / "edited.safetensors"), metadata=metadata)
    with pytest.raises(CheckpointError, match=r"edited\.safetensors has unreadable metadata .*re-export it"):
        _load("crate_nano_patch4_32", tmp_path / "edited.safetensors", num_classes=10)


def test_an_average_pooling_file_built_as_a_class_token_model_names_global_pool_avg(tmp_path: Path) -> None:
    averaging = timm.create_model("crate_nano_patch4_32", num_classes=10, global_pool="avg")
    torch.save(averaging.state_dict(), tmp_path / "a")
    with pytest.raises(CheckpointError, match=r"with the checkpoint's global_pool='avg' \(leave such arguments out"):
        _load("crate_nano_patch4_32", tmp_path / "a", num_classes=10)


@pytest.mark.parametrize("name", ["crate_nano_patch4_32", "vit_nano_patch4_32"])
def test_a_class_token_file_read_with_average_pooling_and_its_head_is_said_to_be_another_model(
    tmp_path: Path, name: str
) -> None:
    """A class-token run's norm moved after an average pooling gives its kept head other features: the
    logits change (the property the warning states), and it is said; a new head, or the file's own pooling,
    is loaded without a word."""
    torch.manual_seed(0)
    trained = perturb_(timm.create_model(name, num_classes=10)).eval()
    torch.save(trained.state_dict(), tmp_path / "token.pth")
    x = torch.randn(2, 3, 32, 32)
    with pytest.warns(UserWarning, match=r"built with global_pool='avg'.*predictions are not the checkpoint's"):
        averaged = _load(name, tmp_path / "token.pth", num_classes=10, global_pool="avg")
    with torch.no_grad():
        assert _max_diff(averaged(x), trained(x)) > 1e-3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        own = _load(name, tmp_path / "token.pth", num_classes=10)
        _load(name, tmp_path / "token.pth", num_classes=3, global_pool="avg", overlay=dict(num_classes=10))
    with torch.no_grad():
        assert _max_diff(own(x), trained(x)) == 0.0


@pytest.mark.parametrize("name", ["crate_cct4_3x2_32", "vit_cct4_3x2_32"])
def test_a_sequence_pooling_file_read_with_another_pooling_is_that_pooling_of_its_tokens(
    tmp_path: Path, name: str
) -> None:
    """timm's idiom for features, ``num_classes=0, global_pool='avg'`` (or ``''``: every token), on a
    sequence-pooling file: its pooling weights are left out and the model is the file's encoder with the pooling
    asked for (the mean of its last tokens with the file's norm after the mean where the model builds an
    fc_norm, CRATE's, or before it, the ViT twin's; or its normed tokens; against the trained model's own
    intermediates); a kept head is said to read other features, a new one is not."""
    torch.manual_seed(0)
    trained = perturb_(timm.create_model(name, num_classes=10)).eval()
    torch.save(trained.state_dict(), tmp_path / "seq.pth")
    x = torch.randn(2, 3, 32, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        averaged = _load(name, tmp_path / "seq.pth", num_classes=0, global_pool="avg", overlay=dict(num_classes=10))
        tokens = _load(name, tmp_path / "seq.pth", num_classes=0, global_pool="", overlay=dict(num_classes=10))
    with torch.no_grad():
        last = trained.forward_intermediates(x, norm=False, output_fmt="NLC", intermediates_only=True)[-1]
        norm = trained.norm
        normed = torch.nn.functional.layer_norm(last, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
        if isinstance(averaged.fc_norm, torch.nn.Identity):
            mean = normed.mean(dim=1)
        else:
            mean = torch.nn.functional.layer_norm(
                last.mean(dim=1), norm.normalized_shape, norm.weight, norm.bias, norm.eps
            )
        torch.testing.assert_close(averaged(x), mean, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(tokens(x), normed, rtol=1e-5, atol=1e-5)
    with pytest.warns(UserWarning, match=r"trained on its sequence pooling's weighted mean.*global_pool='avg'"):
        kept = _load(name, tmp_path / "seq.pth", num_classes=10, global_pool="avg")
    with torch.no_grad():
        assert _max_diff(kept(x), trained(x)) > 1e-3
