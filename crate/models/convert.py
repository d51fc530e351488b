"""Checkpoint conversion for the zoo's ``checkpoint_filter_fn``: every CRATE checkpoint layout in the wild
to the zoo's timm layout, detected from the keys.

Layouts:
- official CRATE (Ma-Lab-Berkeley/CRATE): ``to_patch_embedding.{1,2,3}``, ``pos_embedding``, ``cls_token``,
  ``transformer.layers.{i}.0.{norm,fn.qkv,fn.to_out.0}``, ``transformer.layers.{i}.1.{norm,fn.weight}``,
  ``mlp_head.{0,1}``. Patches are flattened in (p1 p2 c) order, as in :class:`crate.layers.PatchEmbed`.
  The authors' demo file (``crate-demo.pth``) has one more ``head`` (768 -> 21,842) which its model's
  ``forward`` never calls (it returns ``mlp_head``'s 768 outputs): it is left out.
- CBT (QishuaiWen/CBSA, ``CBSA_image_classification``): ``to_patch_embedding.proj.*`` (XCiT's stem),
  ``transformer.layers.{i}.0.fn.{proj,step_x,step_rep,to_out}``, otherwise the official CRATE names;
- CRATE-alpha PyTorch (UCSC-VLAA/CRATE-alpha): ``conv1``, ``pos_embedding`` (with or without the batch
  axis), ``transformer.layers.{i}.0.fn.{qkv,to_out.0}``, ``transformer.layers.{i}.1.fn.{D,D1}``, ``mlp_head``.
- a Lightning checkpoint of :class:`crate.lit.ImageClassifier` (keys under ``model.``);
- the zoo's own timm layout (state dict or safetensors).
Weights may sit under ``state_dict`` or ``model`` and keys may carry a ``module.`` or ``_orig_mod.`` prefix.

Files are read by ``crate.models.checkpoint`` (the one reader); this module only converts what it read.
The filter also adapts the patch embedding to the model's input channels with timm's ``adapt_input_conv``
convention (1 -> C: repeat and scale by 1/C; C -> 1: sum), for conv and for flat (p1 p2 c) embeddings, so
a grayscale checkpoint gives the same outputs on gray images replicated to C channels, and a colour one built gray
gives on gray images what it gives on them replicated (a flat embedding's patch LayerNorm folded in exactly).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
from timm.layers import resample_abs_pos_embed
from timm.models import adapt_input_conv
from torch import nn

__all__ = [
    "CheckpointError",
    "checkpoint_filter_fn",
    "detect_layout",
    "differences",
    "settings_that_differ",
    "to_zoo_layout",
    "unwrap_state_dict",
]


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded into the model it was given to, with what to do about it."""


# a Lightning module's weights that only training uses: a loss's buffers, and self-distillation's student and
# heads (its teacher backbone is ``model.``, the encoder it yields)
_TRAINING_ONLY = ("criterion", "student.", "student_head.", "teacher_head.")


def unwrap_state_dict(state_dict: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The weights of a loaded file: out of ``state_dict``/``model`` wrappers, without ``module.``, ``_orig_mod.``
    (a compiled model's) and (for a Lightning module's keys) ``model.`` prefixes, training-only modules left out
    (a self-distillation run's student and heads: its ``model.`` is the teacher); a Lightning run with a moving
    average of the weights (``model_ema.module.``) gives the average, which is what its validation measured."""
    for key in ("state_dict", "model"):
        if key in state_dict and isinstance(state_dict[key], Mapping):
            state_dict = state_dict[key]
    for prefix in ("module.", "_orig_mod."):  # DataParallel / DDP, and torch.compile's wrapper
        state_dict = {k[len(prefix) :] if k.startswith(prefix) else k: v for k, v in state_dict.items()}
    if any(k.startswith("model_ema.module.") for k in state_dict):
        # a Lightning run with a moving average of the weights: the average is what validation measured
        return {k[len("model_ema.module.") :]: v for k, v in state_dict.items() if k.startswith("model_ema.module.")}
    tensors = [k for k in state_dict if torch.is_tensor(state_dict[k])]
    if tensors and all(k.startswith("model.") for k in tensors if not k.startswith(_TRAINING_ONLY)):
        state_dict = {k[len("model.") :]: v for k, v in state_dict.items() if k.startswith("model.")}
    return dict(state_dict)


def detect_layout(state_dict: Mapping[str, Any]) -> str:
    """``cbt_official``, ``crate_official``, ``crate_alpha_official`` or ``timm`` (the zoo's own)."""
    if any(k.startswith("to_patch_embedding.proj.") for k in state_dict):
        return "cbt_official"
    if any(k.startswith("to_patch_embedding.") for k in state_dict):
        return "crate_official"
    if "conv1.weight" in state_dict and any(re.match(r"transformer\.layers\.\d+\.1\.fn\.D1?$", k) for k in state_dict):
        return "crate_alpha_official"
    return "timm"


_LAYER_KEY = re.compile(r"transformer\.layers\.(\d+)\.(.+)")

_OFFICIAL_CRATE_LAYER = {
    "0.norm.weight": "norm1.weight",
    "0.norm.bias": "norm1.bias",
    "0.fn.qkv.weight": "attn.qkv.weight",
    "0.fn.to_out.0.weight": "attn.proj.weight",
    "0.fn.to_out.0.bias": "attn.proj.bias",
    "1.norm.weight": "norm2.weight",
    "1.norm.bias": "norm2.bias",
    "1.fn.weight": "ista.weight",
}
_OFFICIAL_CRATE_TOP = {
    "to_patch_embedding.1.weight": "patch_embed.norm_in.weight",
    "to_patch_embedding.1.bias": "patch_embed.norm_in.bias",
    "to_patch_embedding.2.weight": "patch_embed.proj.weight",
    "to_patch_embedding.2.bias": "patch_embed.proj.bias",
    "to_patch_embedding.3.weight": "patch_embed.norm_out.weight",
    "to_patch_embedding.3.bias": "patch_embed.norm_out.bias",
}
_OFFICIAL_ALPHA_LAYER = {
    "0.norm.weight": "norm1.weight",
    "0.norm.bias": "norm1.bias",
    "0.fn.qkv.weight": "attn.qkv.weight",
    "0.fn.to_out.0.weight": "attn.proj.weight",
    "1.norm.weight": "norm2.weight",
    "1.norm.bias": "norm2.bias",
    "1.fn.D": "ista.dictionary",
    "1.fn.D1": "ista.output_dictionary",
}
_OFFICIAL_CBT_LAYER = {
    **{k: v for k, v in _OFFICIAL_CRATE_LAYER.items() if not k.startswith("0.fn.")},
    "0.fn.proj.weight": "attn.qkv.weight",
    "0.fn.step_x": "attn.step_x",
    "0.fn.step_rep": "attn.step_rep",
    "0.fn.to_out.weight": "attn.proj.weight",
    "0.fn.to_out.bias": "attn.proj.bias",
}
_OFFICIAL_ALPHA_TOP = {"conv1.weight": "patch_embed.proj.weight", "conv1.bias": "patch_embed.proj.bias"}
_SHARED_TOP = {
    "pos_embedding": "pos_embed",
    "cls_token": "cls_token",
    "mlp_head.0.weight": "norm.weight",
    "mlp_head.0.bias": "norm.bias",
    "mlp_head.1.weight": "head.weight",
    "mlp_head.1.bias": "head.bias",
}


def _rename(state_dict: Mapping[str, torch.Tensor], top: dict[str, str], layer: dict[str, str]) -> dict:
    out: dict[str, torch.Tensor] = {}
    unknown = []
    for key, value in state_dict.items():
        match = _LAYER_KEY.fullmatch(key)
        if match and match.group(2) in layer:
            out[f"blocks.{match.group(1)}.{layer[match.group(2)]}"] = value
        elif key in top or key in _SHARED_TOP:
            out[top.get(key, _SHARED_TOP.get(key))] = value
        else:
            unknown.append(key)
    if unknown:
        raise CheckpointError(f"unrecognised keys in an official-layout checkpoint: {unknown[:8]}")
    if out.get("pos_embed") is not None and out["pos_embed"].ndim == 2:
        out["pos_embed"] = out["pos_embed"].unsqueeze(0)
    return out


def _fill_absent_biases(state_dict: dict[str, torch.Tensor], model: nn.Module) -> None:
    """Layers whose official version has no bias (CRATE-alpha's conv and head) get a zero bias."""
    own = model.state_dict()
    for name in ("patch_embed.proj.bias", "head.bias"):
        weight = name.replace(".bias", ".weight")
        if name in own and name not in state_dict and weight in state_dict:
            state_dict[name] = torch.zeros(state_dict[weight].shape[0], dtype=state_dict[weight].dtype)


def _head_is_kept(model: nn.Module) -> bool:
    """Whether the model keeps the checkpoint's classifier (built with the cfg's ``num_classes``), rather
    than a new head that ``num_classes`` asked for."""
    return getattr(model, "pretrained_cfg", {}).get("num_classes", model.num_classes) == model.num_classes


def _place_final_norm(state_dict: dict[str, torch.Tensor], model: nn.Module) -> bool:
    """The official head LayerNorm acts after pooling; with average pooling the zoo calls it ``fc_norm``.
    Returns whether the checkpoint's ``norm`` was moved there."""
    own = model.state_dict()
    if "norm.weight" in state_dict and "norm.weight" not in own and "fc_norm.weight" in own:
        state_dict["fc_norm.weight"] = state_dict.pop("norm.weight")
        state_dict["fc_norm.bias"] = state_dict.pop("norm.bias")
        return True
    return False


SEQUENCE_POOLING = ("pool.attention_pool.weight", "pool.attention_pool.bias")  # seq_pool's, or the attn_pool slot's


def _drop_other_pooling(state_dict: dict[str, torch.Tensor], model: nn.Module) -> bool:
    """A sequence-pooling file read into a model built with another pooling (``global_pool='avg'`` or ``''``):
    the file's pooling weights have no place in it and are left out, as a new head leaves the file's head out.
    Returns whether they were. A model that pools by sequence pooling keeps the file's (in whichever slot)."""
    own = model.state_dict()
    if any(k.endswith(SEQUENCE_POOLING) for k in own):
        return False
    pooling = [k for k in state_dict if k.endswith(SEQUENCE_POOLING)]
    for key in pooling:
        del state_dict[key]
    return bool(pooling)


def _warn_head_reads_other_features(model: nn.Module, trained_on: str) -> None:
    """Said of a file of the zoo's own layout whose head was trained on a pooled vector this model does not form
    (the ``norm`` of a class-token run moved to the ``fc_norm`` of an average-pooling model, or a sequence
    pooling left out): a model that keeps the file's head predicts other classes than the file's run did. That
    starts a fine-tuning well, but as the file's classifier it is a wrong model."""
    warnings.warn(
        f"the checkpoint's head was trained on {trained_on}, but this {type(model).__name__} was built with "
        f"global_pool={getattr(model, 'global_pool', 'avg')!r}: the checkpoint's head now reads other "
        "features, so its predictions are not the checkpoint's. Leave global_pool (and fc_norm) out to get the "
        "model it was trained as, or fine-tune, or give num_classes for a new head (num_classes=0: features).",
        stacklevel=3,
    )


def _resample_pos_embed(state_dict: dict[str, torch.Tensor], model: nn.Module) -> None:
    pos = state_dict.get("pos_embed")
    target = getattr(model, "pos_embed", None)
    if pos is None or target is None or pos.shape == target.shape:
        return
    prefix = getattr(model, "num_prefix_tokens", 1)
    if int((pos.shape[1] - prefix) ** 0.5) ** 2 != pos.shape[1] - prefix or pos.shape[-1] != target.shape[-1]:
        return  # not a square grid of the same width: left to the shape check
    state_dict["pos_embed"] = resample_abs_pos_embed(
        pos, new_size=list(model.patch_embed.grid_size), num_prefix_tokens=prefix
    )


def _check_fits(state_dict: Mapping[str, torch.Tensor], model: nn.Module) -> None:
    own = model.state_dict()
    head_reset = not _head_is_kept(model)
    if "head.weight" in state_dict and "head.weight" in own and not head_reset:
        theirs, ours = state_dict["head.weight"].shape[0], own["head.weight"].shape[0]
        if theirs != ours:
            raise CheckpointError(
                f"the checkpoint's head has {theirs} classes but the model was built with "
                f"num_classes={ours}. Build it with num_classes={theirs}, or reset the head: pass "
                f"pretrained_cfg_overlay=dict(file=..., num_classes={theirs}) with num_classes={ours}."
            )
    detail = differences(state_dict, own, skip="head.")
    if detail:
        settings = settings_that_differ(state_dict, own)
        advice = "Was it trained for another architecture or size? Pick the matching model name"
        if settings:  # name the arguments too: a tag built with another depth or pooling than its own
            advice += (
                f", or build the model with the checkpoint's {', '.join(settings)} (leave such arguments out to "
                "get the model name's own)"
            )
        advice += "."
        raise CheckpointError(
            f"the checkpoint does not fit {type(model).__name__} "
            f"({getattr(model, 'pretrained_cfg', {}).get('architecture', '?')}): {detail}. {advice}"
        )


def differences(state_dict: Mapping[str, Any], own: Mapping[str, torch.Tensor], skip: str | None = None) -> str:
    """Where a zoo-layout state dict is not ``own`` (a model's state): the tensors of other shapes, the missing
    and the extra keys, in one line; empty where none. Keys under ``skip`` (a prefix) are left out."""
    kept = {k: v for k, v in state_dict.items() if not (skip and k.startswith(skip))}
    own = {k: v for k, v in own.items() if not (skip and k.startswith(skip))}
    wrong = [
        f"{k}: checkpoint {tuple(v.shape)}, model {tuple(own[k].shape)}"
        for k, v in kept.items()
        if k in own and torch.is_tensor(v) and tuple(v.shape) != tuple(own[k].shape)
    ]
    missing = sorted(k for k in own if k not in kept)
    unexpected = sorted(k for k in kept if k not in own)
    return "; ".join(
        wrong[:4]
        + ([f"missing {missing[:6]}"] if missing else [])
        + ([f"not in the model {unexpected[:6]}"] if unexpected else [])
    )


def _build_settings(state_dict: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """What a zoo-layout state dict says of the arguments it was built with: depth (the number of
    ``blocks.N``), embed_dim (the position embedding's width), class_token, and sequence pooling (timm's
    ``attn_pool`` slot, or ``seq_pool``) as ``global_pool='seq'``."""
    settings: dict[str, Any] = {}
    blocks = {int(m.group(1)) for k in state_dict if (m := re.match(r"blocks\.(\d+)\.", k))}
    if blocks:
        settings["depth"] = max(blocks) + 1
    if "pos_embed" in state_dict:
        settings["embed_dim"] = int(state_dict["pos_embed"].shape[-1])
    settings["class_token"] = "cls_token" in state_dict
    # the zoo's sequence pooling (its own slot, or timm's attn_pool slot) is one linear map, attention_pool;
    # timm's MAP pooling in the attn_pool slot is another head, not this one
    settings["global_pool='seq'"] = any(k.endswith("pool.attention_pool.weight") for k in state_dict)
    # a norm after pooling (fc_norm) is what average pooling builds; a norm of every token, the other poolings
    settings["global_pool='avg'"] = "fc_norm.weight" in state_dict
    return settings


def settings_that_differ(state_dict: Mapping[str, torch.Tensor], own: Mapping[str, torch.Tensor]) -> list[str]:
    """The build arguments on which the checkpoint and the model differ, as the checkpoint has them
    (e.g. ``depth=4``, ``class_token=False``), for an error that says which argument to change."""
    theirs, ours = _build_settings(state_dict), _build_settings(own)
    differ = []
    for name, value in theirs.items():
        if name not in ours or ours[name] == value:
            continue
        if name == "global_pool='seq'":
            differ.append("global_pool='seq'" if value else "global_pool='token' or 'avg'")
        elif name == "global_pool='avg'":
            differ.append("global_pool='avg'" if value else "global_pool='token' (or fc_norm=False)")
        else:
            differ.append(f"{name}={value}")
    return differ


def to_zoo_layout(state_dict: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Unwrapped weights, with the official CRATE / CRATE-alpha names converted to the zoo's."""
    state_dict = unwrap_state_dict(state_dict)
    layout = detect_layout(state_dict)
    if layout == "crate_official":
        unused = ("head.weight", "head.bias") if "mlp_head.1.weight" in state_dict else ()  # the demo's
        state_dict = {k: v for k, v in state_dict.items() if k not in unused}
        return _rename(state_dict, _OFFICIAL_CRATE_TOP, _OFFICIAL_CRATE_LAYER)
    if layout == "crate_alpha_official":
        return _rename(state_dict, _OFFICIAL_ALPHA_TOP, _OFFICIAL_ALPHA_LAYER)
    if layout == "cbt_official":  # the stem's modules keep their names under patch_embed
        stem = {k: "patch_embed." + k[len("to_patch_embedding.") :] for k in state_dict if k.startswith("to_patch_")}
        return _rename(state_dict, stem, _OFFICIAL_CBT_LAYER)
    return state_dict


def _adapt_channels(values: torch.Tensor, source: int, target: int) -> torch.Tensor:
    """Per-feature vectors over (..., c): repeat (1 -> C), average (C -> 1), or tile and cut."""
    if target == 1:
        return values.mean(dim=-1, keepdim=True)
    repeat = -(-target // source)
    return values.repeat(*([1] * (values.ndim - 1)), repeat)[..., :target]


def _fold_norm_in_to_gray(
    state_dict: dict[str, torch.Tensor], key: str, weight: torch.Tensor, pixels: tuple[int, int, int]
) -> bool:
    """C -> 1 for a flat patch embedding that normalises its patches first (``norm_in``): a gray image replicated
    to C channels has the same LayerNorm statistics as the gray patch, so the C channels' affine weights fold
    into the projection exactly (its weight sums each pixel's channels times their scales, its bias takes the
    shifts) and the gray ``norm_in`` keeps no affine part. Summing the weights and averaging the scales instead
    computes another function wherever the channels' scales differ."""
    names = ("patch_embed.norm_in.weight", "patch_embed.norm_in.bias", key.removesuffix(".weight") + ".bias")
    if any(name not in state_dict for name in names) or state_dict[names[0]].numel() != math.prod(pixels):
        return False
    scale, shift = (state_dict[name].to(weight.dtype).reshape(pixels) for name in names[:2])
    per_pixel = weight.reshape(weight.shape[0], *pixels)
    state_dict[key] = (per_pixel * scale).sum(dim=-1).reshape(weight.shape[0], -1)
    state_dict[names[2]] = state_dict[names[2]].to(weight.dtype) + (per_pixel * shift).sum(dim=(1, 2, 3))
    state_dict[names[0]] = torch.ones(pixels[:2], dtype=weight.dtype).reshape(-1)
    state_dict[names[1]] = torch.zeros(pixels[:2], dtype=weight.dtype).reshape(-1)
    return True


def _adapt_in_chans(state_dict: dict[str, torch.Tensor], model: nn.Module) -> None:
    """Adapt the checkpoint's first layer (the cfg's ``first_conv``: a patch embedding, conv or flat
    (p1 p2 c), or the first conv of a stem) to the model's input channels."""
    key = f"{getattr(model, 'pretrained_cfg', {}).get('first_conv') or 'patch_embed.proj'}.weight"
    own = model.state_dict().get(key)
    weight = state_dict.get(key)
    if own is None or weight is None or weight.shape == own.shape or weight.shape[0] != own.shape[0]:
        return
    weight = weight.to(own.dtype)  # adapt in the model's precision (stored weights may be float16)
    if weight.ndim == 4 and own.ndim == 4 and weight.shape[2:] == own.shape[2:]:
        state_dict[key] = adapt_input_conv(own.shape[1], weight, base_chans=weight.shape[1])
        return
    patch = getattr(model.patch_embed, "patch_size", None)
    if weight.ndim != 2 or own.ndim != 2 or patch is None:
        return
    area = patch[0] * patch[1]
    if weight.shape[1] % area or own.shape[1] % area:
        return
    source, target = weight.shape[1] // area, own.shape[1] // area
    if target == 1 and _fold_norm_in_to_gray(state_dict, key, weight, (patch[0], patch[1], source)):
        return
    kernel = weight.reshape(weight.shape[0], patch[0], patch[1], source).permute(0, 3, 1, 2)
    kernel = adapt_input_conv(target, kernel, base_chans=source)
    state_dict[key] = kernel.permute(0, 2, 3, 1).reshape(weight.shape[0], -1)
    for name in ("patch_embed.norm_in.weight", "patch_embed.norm_in.bias"):
        if name in state_dict and state_dict[name].numel() == area * source:
            values = state_dict[name].to(own.dtype).reshape(patch[0], patch[1], source)
            state_dict[name] = _adapt_channels(values, source, target).reshape(-1)


def checkpoint_filter_fn(
    state_dict: Mapping[str, Any],
    model: nn.Module,
    family_filter: Callable[[dict[str, torch.Tensor], nn.Module], dict[str, torch.Tensor]] | None = None,
) -> dict[str, torch.Tensor]:
    """Convert any supported checkpoint layout to ``model``'s and check that it fits.

    ``family_filter`` is a family's own conversion run after the layout conversion (the ViT twins use
    timm's ViT filter); everything else is shared by every family of the zoo. timm hands a file's weights over
    in the model's ``pretrained_cfg``; once they are here, the cfg lets them go, so that the model (and any
    copy of it, such as an EMA) does not hold the file a second time.
    """
    cfg = getattr(model, "pretrained_cfg", None)
    if isinstance(cfg, dict):
        cfg.pop("state_dict", None)
    state_dict = unwrap_state_dict(state_dict)
    own_layout = detect_layout(state_dict) == "timm"
    state_dict = to_zoo_layout(state_dict)
    if family_filter is not None:
        state_dict = dict(family_filter(state_dict, model))
    _fill_absent_biases(state_dict, model)
    pooling_dropped = _drop_other_pooling(state_dict, model)
    norm_moved = _place_final_norm(state_dict, model)
    _resample_pos_embed(state_dict, model)
    _adapt_in_chans(state_dict, model)
    _check_fits(state_dict, model)
    if own_layout and "head.weight" in state_dict and _head_is_kept(model):
        if pooling_dropped:
            _warn_head_reads_other_features(model, "its sequence pooling's weighted mean of the tokens (left out here)")
        elif norm_moved:
            _warn_head_reads_other_features(
                model, "tokens normalised before pooling (its norm; this model normalises after pooling, fc_norm)"
            )
    return state_dict
