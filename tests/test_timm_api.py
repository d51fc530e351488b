"""The generic checks of timm's own tests/test_models.py, over every model of the zoo."""

from __future__ import annotations

import fnmatch
import re

import pytest
import timm
import timm.optim
import torch

import crate  # noqa: F401

VARIANTS = set(timm.list_models("vit_nano_patch4_32_*")) | set(timm.list_models("crate_nano_patch4_32_*"))
# ToST: the CPU-scale member and one reference size per patch size (the other sizes share their code;
# their parameter counts are checked in test_tost.py)
TOST = {"tost_nano_patch4_32", "tost_cab_tiny_12_p16", "tost_cab_tiny_12_p8"}
# CRATE-MAE: the CPU-scale member and the smallest reference size (the others: test_crate_mae.py)
MAE = {"crate_mae_nano_patch4_32", "crate_mae_tiny_patch16_224"}
# CBT: the CPU-scale member (the patch-token pooling) and CBT-T at both patch sizes (the authors' pooling)
CBT = {"cbt_nano_patch4_32", "cbt_tiny_patch16_224", "cbt_tiny_patch8_224"}
CRATE = set(timm.list_models("crate_*")) - set(timm.list_models("crate_mae_*"))
# CCT's tokenizer and sequence pooling: the CRATE twins (in CRATE) and CCT's own models as the ViT twins
SHAPES = ("cct2_3x2", "cct4_3x2", "cct4_3x2_w152", "cct7_3x1")
COMPACT = {f"{family}_{shape}_32" for family in ("crate", "vit") for shape in SHAPES}
COMPACT |= {"crate_alpha_cct4_3x2_32", "cbt_cct4_3x2_32"}  # CRATE-alpha's and CBT's layers on the tokenizer
ZOO = sorted(
    CRATE | {"vit_nano_patch4_32", "vit_micro_patch4_32", "vit_tiny_patch4_32"} | VARIANTS | TOST | MAE | CBT | COMPACT
)


def _small_size(name: str) -> int:
    """Two patches a side for the ImageNet-size members (fast on CPU), the native 32 for the others."""
    return 32 if "_32" in name else 2 * int(re.search(r"(?:patch|_p)(\d+)", name).group(1))


def _build(name: str, **kwargs) -> torch.nn.Module:
    """The registered model at a small image size; the ImageNet-size reference members (12 or 24 layers) with 4
    of their layers, which runs every code path of the API checks below (a block's code is the same at every
    depth) at a third to a sixth of the cost (their full sizes: test_models.py and each family's tests)."""
    torch.manual_seed(0)
    if "_32" not in name:
        kwargs.setdefault("depth", 4)
    return timm.create_model(name, img_size=_small_size(name), **kwargs)


def _model_and_input(name: str, **kwargs) -> tuple[torch.nn.Module, torch.Tensor]:
    """``_build(name, **kwargs)`` in eval mode and a batch of two images of its size."""
    size = _small_size(name)
    return _build(name, **kwargs).eval(), torch.randn(2, 3, size, size)


def test_the_zoo_is_complete() -> None:
    alpha = {
        "crate_alpha_small_patch16_224",
        "crate_alpha_base_patch16_224",
        "crate_alpha_base_patch32_224",
        "crate_alpha_base_patch8_224",
        "crate_alpha_large_patch14_224",
        "crate_alpha_large_patch32_224",
        "crate_alpha_large_patch8_224",
        "crate_alpha_nano_patch4_32",
        "crate_alpha_micro_patch4_32",
    }
    variants = {f"vit_nano_patch4_32_{v}" for v in ("rbf", "poly2", "linear", "bn", "sh", "bnsh", "cbsa")}
    variants |= {"crate_nano_patch4_32_bn", "crate_nano_patch4_32_sh"}
    ablations = {f"crate_{size}_patch4_32_{a}" for size in ("nano", "micro") for a in ("mlp", "mhsa", "attn_only")}
    gpu_members = {"crate_tiny_patch4_32", "vit_tiny_patch4_32"}  # CRATE-T's width at 32 px and its ViT twin
    assert alpha | variants | ablations | gpu_members | TOST | MAE | CBT | COMPACT <= set(ZOO) and len(ZOO) == 54
    assert len(timm.list_models("tost_*")) == 13
    # four reference sizes at patch 16 and 8, the CPU-scale nano and the tokenizer member
    assert len(timm.list_models("cbt_*")) == 10


@pytest.mark.parametrize("name", ZOO)
def test_forward_backward_and_default_cfg(name: str) -> None:
    size = _small_size(name)
    model = _build(name, num_classes=5)
    x = torch.randn(2, 3, size, size)
    out = model(x)
    assert out.shape == (2, 5)
    out.sum().backward()
    # timm's rule: every parameter takes part in forward (fixed tables are buffers; CRATE-MAE's decoder is
    # built for masked pretraining only)
    assert not [n for n, p in model.named_parameters() if p.grad is None], "parameters without a gradient"

    cfg = model.pretrained_cfg
    state = model.state_dict()
    assert cfg["classifier"] + ".weight" in state
    assert cfg["first_conv"] + ".weight" in state
    assert model.get_classifier() is model.get_submodule(cfg["classifier"])
    features = model.forward_features(x)
    assert features.shape[-1] == model.num_features
    assert model.forward_head(features, pre_logits=True).shape == (2, model.num_features)

    model.reset_classifier(0)
    assert model(x).shape == (2, model.num_features)
    model.reset_classifier(7, global_pool="avg")
    assert model(x).shape == (2, 7)

    patterns = model.no_weight_decay()
    embeddings = [n for n, _ in model.named_parameters() if n.startswith(("pos_embed", "cls_token"))]
    assert embeddings and all(any(fnmatch.fnmatch(n, p) for p in patterns) for n in embeddings)
    groups = model.group_matcher()
    assert "stem" in groups and "blocks" in groups


@pytest.mark.parametrize(
    "name", sorted(COMPACT | {"crate_nano_patch4_32", "crate_alpha_nano_patch4_32", "tost_nano_patch4_32"})
)
def test_token_pooling_reads_the_class_token_and_is_refused_without_one(name: str) -> None:
    """``reset_classifier(n, "token")`` pools the class token; a model without one (the sequence-pooling members)
    refuses it and keeps its head, as building it with ``global_pool="token"`` does (it pooled the first patch's
    features without a word)."""
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=5).eval()
    x = torch.randn(2, *model.pretrained_cfg["input_size"])
    with torch.no_grad():
        if getattr(model, "cls_token", None) is None:
            head, before = model.head, model(x)
            with pytest.raises((ValueError, AssertionError), match="class token"):  # timm's own ViT: its assertion
                model.reset_classifier(3, "token")
            assert model.num_classes == 5 and model.head is head and torch.equal(model(x), before)
        else:
            model.reset_classifier(0, "token")
            assert torch.equal(model(x), model.fc_norm(model.forward_features(x)[:, 0]))


@pytest.mark.parametrize("name", ZOO)
def test_forward_intermediates_and_features_only(name: str) -> None:
    model, x = _model_and_input(name, num_classes=0)
    size = x.shape[-1]
    with torch.no_grad():
        final, intermediates = model.forward_intermediates(x)
        torch.testing.assert_close(final, model.forward_features(x))
        depth = len(model.blocks)
        assert len(intermediates) == depth
        grid = size // model.patch_embed.patch_size[0]
        assert intermediates[-1].shape == (2, model.num_features, grid, grid)
        nlc = model.forward_intermediates(x, indices=2, output_fmt="NLC", intermediates_only=True)
        assert len(nlc) == 2 and nlc[0].shape == (2, grid * grid, model.num_features)

    features = _build(name, features_only=True, out_indices=(0, -1)).eval()
    with torch.no_grad():
        maps = features(x)
    assert [m.shape[1] for m in maps] == features.feature_info.channels()
    assert all(m.shape[-2:] == (grid, grid) for m in maps)

    kept = model.prune_intermediate_layers(indices=1)
    assert kept == [depth - 1] and len(model.blocks) == depth


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("vit_cct2_3x2_32", {}),
        ("crate_nano_patch4_32", {"depth": 2}),
        ("vit_nano_patch4_32", {"depth": 1}),
        ("tost_nano_patch4_32", {"depth": 2}),
        ("cbt_nano_patch4_32", {"depth": 2}),
        ("crate_nano_patch4_32", {}),
    ],
)
def test_features_only_defaults_to_the_last_three_blocks_or_every_block_of_fewer(name: str, kwargs: dict) -> None:
    """``features_only=True`` on the registered 2-block ViT twin failed with timm's "last-n (3) is out of range
    (1 to 2)"; the default is now the last three blocks, all of them where there are fewer, each map the block's
    own output as ``forward_intermediates`` gives it."""
    torch.manual_seed(0)
    features = timm.create_model(name, features_only=True, **kwargs).eval()
    model = timm.create_model(name, num_classes=0, **kwargs).eval()
    loaded = model.load_state_dict(features.state_dict(), strict=False)  # the feature model lacks the final layers
    assert not loaded.unexpected_keys and all(not key.startswith("blocks.") for key in loaded.missing_keys)
    depth = len(model.blocks)
    taken = list(range(max(depth - 3, 0), depth))
    assert [info["index"] for info in features.feature_info.get_dicts()] == taken
    x = torch.randn(2, *model.pretrained_cfg["input_size"])
    with torch.no_grad():
        maps, expected = features(x), model.forward_intermediates(x, indices=taken, intermediates_only=True)
    assert len(maps) == len(expected)
    for got, want in zip(maps, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("name", ZOO)
def test_gradient_checkpointing_gives_the_same_outputs(name: str) -> None:
    model, x = _model_and_input(name, num_classes=3)
    reference = model(x)
    model.set_grad_checkpointing(True)
    checkpointed = model(x)
    torch.testing.assert_close(checkpointed, reference, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["crate_nano_patch4_32", "crate_alpha_nano_patch4_32", "vit_nano_patch4_32"])
def test_timm_data_config_and_layer_decay_optimizer(name: str) -> None:
    model = timm.create_model(name, num_classes=10)
    config = timm.data.resolve_data_config({}, model=model)
    assert config["input_size"] == (3, 32, 32)
    optimizer = timm.optim.create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05, layer_decay=0.75)
    scales = {group.get("lr_scale", 1.0) for group in optimizer.param_groups}
    assert len(scales) > 2 and max(scales) == 1.0  # earlier layers get smaller learning rates
    covered = sum(p.numel() for group in optimizer.param_groups for p in group["params"])
    assert covered == sum(p.numel() for p in model.parameters())


# timm's tests/test_models.py is not part of the installed package; its torchscript, fx and export checks
# are written out here as timm runs them: the model in eval mode, the compiled / traced / exported graph
# must give the eager model's outputs.


@pytest.mark.parametrize("name", ZOO)
def test_torchscript_fx_and_export_give_the_eager_outputs(name: str) -> None:
    from timm.models._features_fx import create_feature_extractor, get_graph_node_names

    model, x = _model_and_input(name, num_classes=5)
    size = x.shape[-1]
    with torch.no_grad():
        expected = model(x)
        scripted = torch.jit.script(model)
        torch.testing.assert_close(scripted(x), expected, atol=1e-5, rtol=1e-5)
        _, eval_nodes = get_graph_node_names(model)
        traced = create_feature_extractor(model, return_nodes=[eval_nodes[-1]])
        torch.testing.assert_close(traced(x)[eval_nodes[-1]], expected, atol=1e-5, rtol=1e-5)
        # traced, then scripted (timm's fx-torchscript check): the traced code must be valid TorchScript
        traced_scripted = torch.jit.script(traced)
        torch.testing.assert_close(traced_scripted(x)[eval_nodes[-1]], expected, atol=1e-5, rtol=1e-5)
        exported = torch.export.export(model, (x,)).module()
        torch.testing.assert_close(exported(x), expected, atol=1e-5, rtol=1e-5)
    # the input checks survive compilation with their message
    wrong = torch.randn(2, 1, size, size)
    for compiled in (scripted, traced):
        with pytest.raises((AssertionError, torch.jit.Error), match="built for 3-channel images"):
            compiled(wrong)
        with pytest.raises((AssertionError, torch.jit.Error), match="expected floating-point images"):
            compiled((x * 50).to(torch.uint8))


@pytest.mark.parametrize("name", ZOO)
def test_the_traced_training_graph_gives_every_parameter_a_gradient(name: str) -> None:
    # traced in training mode with timm's leaf modules and functions, as timm's fx backward check does
    from timm.models._features_fx import get_notrace_functions, get_notrace_modules
    from torchvision.models.feature_extraction import create_feature_extractor, get_graph_node_names

    tracer = dict(leaf_modules=get_notrace_modules(), autowrap_functions=get_notrace_functions())
    model = _build(name, num_classes=5).train()
    train_nodes, eval_nodes = get_graph_node_names(model, tracer_kwargs=tracer)
    traced = create_feature_extractor(
        model, train_return_nodes=[train_nodes[-1]], eval_return_nodes=[eval_nodes[-1]], tracer_kwargs=tracer
    )
    size = _small_size(name)
    traced.train()(torch.randn(2, 3, size, size))[train_nodes[-1]].mean().backward()
    assert not [n for n, p in traced.named_parameters() if p.grad is None], "parameters without a gradient"


def _resampled_to(model: torch.nn.Module, size: tuple[int, int]) -> torch.nn.Module:
    """A new model of ``model``'s name built for ``size``, holding ``model``'s weights with its learned position
    embedding resampled (timm's bicubic resampling) to that patch grid: what another input size should give."""
    from timm.layers import resample_abs_pos_embed

    name = model.pretrained_cfg["architecture"]
    resized = timm.create_model(name, num_classes=model.num_classes, img_size=size).eval()
    state = dict(model.state_dict())
    patch = model.patch_embed.patch_size
    table = state.get("pos_embed")
    if isinstance(getattr(model, "pos_embed", None), torch.nn.Parameter):
        prefix = table.shape[1] - model.patch_embed.num_patches
        grid = [size[0] // patch[0], size[1] // patch[1]]
        state["pos_embed"] = resample_abs_pos_embed(table, grid, list(model.patch_embed.grid_size), prefix)
    else:  # a table computed from the positions (CRATE-MAE's sine-cosine, ToST's Fourier): the new model's own
        state = {k: v for k, v in state.items() if k not in ("pos_embed", "decoder_pos_embed")}
    resized.load_state_dict(state, strict=False)
    return resized


@pytest.mark.parametrize(
    "name", ["crate_nano_patch4_32", "crate_alpha_nano_patch4_32", "crate_cct4_3x2_32", "vit_cct4_3x2_32"]
)
def test_dynamic_img_size_resamples_the_position_embedding(name: str) -> None:
    torch.manual_seed(0)
    static = timm.create_model(name, num_classes=5).eval()
    dynamic = timm.create_model(name, num_classes=5, dynamic_img_size=True).eval()
    dynamic.load_state_dict(static.state_dict())
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(dynamic(x), static(x))  # at the built size: the same model
        wide = torch.randn(2, 3, 48, 64)
        _, maps = dynamic.forward_intermediates(wide, indices=1)
        assert maps[0].shape == (2, static.embed_dim, 12, 16)
        # at another size: the static model with its position embedding resampled to that grid
        torch.testing.assert_close(dynamic(wide), _resampled_to(static, (48, 64))(wide), atol=1e-5, rtol=1e-5)
        if not name.startswith("vit_"):  # the zoo's own classes script; timm's ViT is timm's to test
            scripted = torch.jit.script(dynamic)
            torch.testing.assert_close(scripted(wide), dynamic(wide), atol=1e-5, rtol=1e-5)
    with pytest.raises(AssertionError, match="multiples of the patch size"):
        dynamic(torch.randn(1, 3, 30, 32))


@pytest.mark.parametrize(
    "name",
    [
        "crate_nano_patch4_32",
        "crate_alpha_nano_patch4_32",
        "cbt_nano_patch4_32",
        "tost_nano_patch4_32",
        "crate_mae_nano_patch4_32",
        "crate_cct4_3x2_32",
        "vit_cct4_3x2_32",
        "vit_nano_patch4_32",
    ],
)
def test_set_input_size_gives_the_model_built_for_that_size(name: str) -> None:
    """timm's ``set_input_size``: afterwards the model is the one built for the new size from its weights (the
    learned position embedding resampled as timm's ViT resamples its own), and records the size; a new patch
    size is refused where the patch embedding's weights fix it."""
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=5).eval()
    expected = _resampled_to(model, (48, 48))
    model.set_input_size(img_size=(48, 48))
    x = torch.randn(2, 3, 48, 48)
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected(x), atol=1e-5, rtol=1e-5)
    assert tuple(model.patch_embed.grid_size) == (12, 12) and model._traits["img_size"] == (48, 48)
    # timm's conv PatchEmbed resamples its kernel to another patch size, unless a decoder predicts the patches
    conv = isinstance(model.patch_embed, timm.layers.PatchEmbed) and not getattr(model, "decoder_depth", 0)
    if not conv:
        with pytest.raises(ValueError, match="changes the image size only"):
            model.set_input_size(patch_size=8)
