"""The timm model API shared by the zoo's transformer classifiers (CRATE and its families, ToST).

A subclass passes its classes, channels, width and pooling to ``__init__``, builds ``patch_embed`` and
``blocks`` (an ``nn.Sequential``), then ``_build_head`` (``norm``, ``fc_norm``, ``head_drop``, ``head``), and
defines ``_embed(images)`` (the token sequence the blocks take). Two hooks cover what differs between
families: ``blocks_prefix_tokens`` (how many prefix tokens the blocks' sequence carries: CRATE's class
token, none in ToST, whose class token joins after the blocks) and ``_after_blocks(x)`` (what turns the
blocks' output into the features: the final norm; ToST's class-attention stage and norm).
"""

# No ``from __future__ import annotations`` here: FX copies ``forward``'s annotations into the code it
# generates, and a string annotation there is a type TorchScript cannot resolve (FX, then scripting).
from typing import Any

import torch
from timm.layers import resample_abs_pos_embed
from timm.models import checkpoint_seq
from timm.models._features import feature_take_indices
from timm.models._input import update_model_input_size
from torch import nn
from torch.utils.checkpoint import checkpoint

from crate.layers import SeqPool

from .state_dict_loading import LoadsZooLayouts

__all__ = ["TransformerClassifier", "block_features_cfg", "check_pool", "forget_label_names"]


POOLS = ("", "token", "avg", "seq")


def block_features_cfg(kwargs: dict[str, Any]) -> dict[str, Any]:
    """timm's ``feature_cfg`` for a stack of blocks (``features_only=True``, read by timm's getter): the
    ``out_indices`` the call gives (taken out of ``kwargs``), else the last three blocks, or every block of a model
    with fewer (timm's "last 3" is out of range for a 2-block model)."""
    depth = kwargs.get("depth")
    default = min(3, depth) if isinstance(depth, int) and depth > 0 else 3
    return dict(out_indices=kwargs.pop("out_indices", default), feature_cls="getter")


def forget_label_names(model: nn.Module) -> None:
    """A new head no longer answers in the pretrained classes: drop their names (``label_names``) from the
    model's ``pretrained_cfg``, so that no caller reads the old names for the new head's outputs."""
    for attr in ("pretrained_cfg", "default_cfg"):
        cfg = getattr(model, attr, None)
        if isinstance(cfg, dict) and cfg.get("label_names") is not None:
            setattr(model, attr, {**cfg, "label_names": None})


def check_pool(global_pool: str, class_token: bool) -> None:
    """A pooling the zoo's classifiers know, and one that reads what the model has: ``token`` reads its class token
    (a model without one would answer with its first patch's features)."""
    if global_pool not in POOLS:
        raise ValueError(f"global_pool must be one of {POOLS} ('seq': sequence pooling), got {global_pool!r}")
    if global_pool == "token" and not class_token:
        raise ValueError("global_pool='token' reads the class token, and this model has none: pool 'avg' or 'seq'")


class TransformerClassifier(LoadsZooLayouts, nn.Module):
    """Base of the zoo's transformer classifiers: the timm API over ``_embed``, ``blocks`` and the hooks.

    ``__init__`` sets what timm reads of every classifier (classes, input channels, width, pooling, prefix
    tokens); a family builds its stem and blocks, then calls :meth:`_build_head` for the feature info, the
    final norms, the head dropout and the head, in that order (the order the parameters are drawn in).
    """

    blocks_prefix_tokens = 1

    def __init__(
        self,
        num_classes: int,
        in_chans: int,
        embed_dim: int,
        global_pool: str,
        num_prefix_tokens: int = 1,
        pool_include_prefix: bool = False,
    ) -> None:
        super().__init__()
        check_pool(global_pool, num_prefix_tokens > 0)
        self.num_classes = num_classes
        self.in_chans = in_chans  # timm reads the input channels of a model from this attribute
        self.global_pool = global_pool
        self.pool_include_prefix = pool_include_prefix
        self.num_features = self.head_hidden_size = self.embed_dim = embed_dim
        self.num_prefix_tokens = num_prefix_tokens
        self.blocks_prefix_tokens = min(self.blocks_prefix_tokens, num_prefix_tokens)
        self.grad_checkpointing = False

    def _build_head(self, depth: int, reduction: int, norm: nn.Module, fc_norm: nn.Module, drop_rate: float) -> None:
        """Feature info of the ``depth`` blocks (tokens at ``reduction`` of the image side), the norm after
        the blocks, the sequence pooling (``global_pool="seq"``), the norm of the pooled features, the head
        dropout and the classifier head."""
        self.feature_info = [
            dict(module=f"blocks.{i}", num_chs=self.embed_dim, reduction=reduction) for i in range(depth)
        ]
        self.norm = norm
        self.seq_pool = SeqPool(self.embed_dim) if self.global_pool == "seq" else None
        self.fc_norm = fc_norm
        self.head_drop = nn.Dropout(drop_rate)
        self.head = self._new_head()

    def _new_head(self) -> nn.Module:
        return nn.Linear(self.embed_dim, self.num_classes) if self.num_classes > 0 else nn.Identity()

    def _embed(self, images: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _after_blocks(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)

    @torch.jit.ignore
    def set_input_size(self, img_size: int | tuple[int, int] | None = None, patch_size: object = None) -> None:
        """timm's ViT API: the model for another image size, a learned position embedding resampled (bicubic)
        from the old patch grid to the new one as timm's ViT resamples its own; the patch size stays (it is
        built into the patch embedding's weights)."""
        previous = tuple(self.patch_embed.grid_size)
        self.patch_embed.set_input_size(img_size=img_size, patch_size=patch_size)
        if tuple(self.patch_embed.grid_size) != previous:
            self._resize_positions(previous)
        update_model_input_size(self, self.patch_embed.img_size)

    def _resize_positions(self, previous: tuple[int, int]) -> None:
        """The position embedding for the new grid (a table computed from positions, as ToST's, needs nothing)."""
        table = getattr(self, "pos_embed", None)
        if isinstance(table, nn.Parameter):
            prefix = table.shape[1] - previous[0] * previous[1]
            resampled = resample_abs_pos_embed(
                table.detach(), list(self.patch_embed.grid_size), list(previous), num_prefix_tokens=prefix
            )
            self.pos_embed = nn.Parameter(resampled, requires_grad=table.requires_grad)

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        if global_pool is not None:
            check_pool(global_pool, self.num_prefix_tokens > 0)  # before anything changes
        self.num_classes = num_classes
        if global_pool is not None:
            if global_pool == "seq" and self.seq_pool is None:
                self.seq_pool = SeqPool(self.embed_dim)
            self.global_pool = global_pool
        self.head = self._new_head()
        forget_label_names(self)

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | list[int] | None = None,
        return_prefix_tokens: bool = False,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
    ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """Outputs of the layers in ``indices`` (last n if an int, all if None), as timm's ViT gives them.

        ``output_fmt``: ``NCHW`` (patch tokens on their grid) or ``NLC`` (token sequence); ``norm`` applies
        the final norm to each; ``return_prefix_tokens`` pairs each with its class token (for a family whose
        blocks carry one).
        """
        if output_fmt not in ("NCHW", "NLC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        batch, height, width = x.shape[0], x.shape[-2], x.shape[-1]
        x = self._embed(x)
        blocks = self.blocks[: max_index + 1] if stop_early else self.blocks
        intermediates = []
        for index, block in enumerate(blocks):
            x = checkpoint(block, x, use_reentrant=False) if self.grad_checkpointing else block(x)
            if index in take_indices:
                intermediates.append(self.norm(x) if norm else x)
        prefix = [y[:, : self.blocks_prefix_tokens] for y in intermediates]
        intermediates = [y[:, self.blocks_prefix_tokens :] for y in intermediates]
        if output_fmt == "NCHW":
            patch = self.patch_embed.patch_size
            height, width = height // patch[0], width // patch[1]
            intermediates = [
                y.reshape(batch, height, width, -1).permute(0, 3, 1, 2).contiguous() for y in intermediates
            ]
        if return_prefix_tokens:
            intermediates = list(zip(intermediates, prefix, strict=True))
        if intermediates_only:
            return intermediates
        return self._after_blocks(x), intermediates

    def prune_intermediate_layers(
        self, indices: int | list[int] = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """Drop the layers after the last one in ``indices`` (and the norm and head if asked)."""
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[: max_index + 1]
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.fc_norm = nn.Identity()
            self.reset_classifier(0, "")
        return take_indices

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, C, H, W) -> normalised tokens (B, 1 + N, d), the class token first."""
        x = self._embed(x)
        if self.grad_checkpointing and not torch.jit.is_scripting():
            x = checkpoint_seq(self.blocks, x)
        else:
            x = self.blocks(x)
        return self._after_blocks(x)

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        if self.global_pool == "seq" and self.seq_pool is not None:
            return self.seq_pool(x[:, self.num_prefix_tokens :])
        if self.global_pool == "avg":
            return x.mean(dim=1) if self.pool_include_prefix else x[:, self.num_prefix_tokens :].mean(dim=1)
        if self.global_pool == "token":
            return x[:, 0]
        return x

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.head_drop(self.fc_norm(self.pool(x)))
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))
