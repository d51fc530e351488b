"""CRATE's own ablations at the CPU sizes, as the emergence paper ran them at ImageNet scale (Yu et al. 2023,
"Emergence of Segmentation with Minimalistic White-Box Transformers", Table 2): each keeps CRATE's layout
(patch embedding, class token, pre-norms, head) and swaps one step of the layer.

- ``crate_<size>_patch4_32_mlp`` (CRATE-MLP): MSSA, then ViT's MLP with its residual in place of ISTA,
      Z_half = Z + MSSA(LN(Z)),  Z_next = Z_half + MLP(LN(Z_half)),  MLP(y) = W_2 GELU(W_1 y + b_1) + b_2;
- ``crate_<size>_patch4_32_mhsa`` (CRATE-MHSA): multi-head self-attention with separate query, key and
  value projections (timm's ``Attention``) in place of MSSA, then ISTA without residual,
      Z_half = Z + MHSA(LN(Z)),  Z_next = ISTA(LN(Z_half));
- ``crate_<size>_patch4_32_attn_only``: the MSSA step alone with its residual, no second step,
      Z_next = Z + MSSA(LN(Z)).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from timm.layers import DropPath, Mlp
from timm.models import generate_default_cfgs
from torch import nn

from crate.layers import AttentionTrace

from .crate import CPU_SIZES, CRATE, CrateBlock, _create_crate, cpu_cfg
from .registry import register_model
from .vit import TwinAttention, query_subspaces

__all__ = ["CrateAttentionOnlyBlock", "CrateMLPBlock", "MHSA"]


class CrateMLPBlock(CrateBlock):
    """CRATE-MLP's layer: MSSA with its residual, then an MLP (ratio 4, GELU) with its residual."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, **kwargs: Any) -> None:
        super().__init__(dim, num_heads, **kwargs)
        del self.ista
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop=kwargs.get("proj_drop", 0.0))
        drop_path = kwargs.get("drop_path", 0.0)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path1(self.attn(self.norm1(x)))
        return x + self.drop_path2(self.mlp(self.norm2(x)))

    def sparse_step(self, z_half: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, None]:
        """(Z^{l+1}, no sparse code): the MLP's residual update."""
        return z_half + self.drop_path2(self.mlp(y)), None


class CrateAttentionOnlyBlock(CrateBlock):
    """The MSSA step alone: Z_next = Z + MSSA(LN(Z)) (no second norm, no ISTA)."""

    def __init__(self, dim: int, num_heads: int, **kwargs: Any) -> None:
        super().__init__(dim, num_heads, **kwargs)
        del self.ista
        self.norm2 = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop_path1(self.attn(self.norm1(x)))

    def sparse_step(self, z_half: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, None]:
        """(Z^{l+1}, no sparse code): the layer ends after the attention step."""
        return z_half, None


class MHSA(TwinAttention):
    """Softmax multi-head self-attention with separate query, key and value projections (timm's
    ``Attention``, query/key/value biases on as in ViT), taking the arguments of MSSA. For the measurement
    trace its subspaces U_[K] are the query projection, as for the ViT twins."""

    __jit_unused_properties__ = ["subspaces"]  # read by the measurement trace only

    def __init__(
        self,
        dim: int,
        num_heads: int,
        head_dim: int | None = None,
        proj_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
    ) -> None:
        super().__init__(
            dim,
            num_heads,
            attn_head_dim=head_dim,
            qkv_bias=True,
            proj_bias=proj_bias,
            attn_drop=attn_drop,
            proj_drop=proj_drop,
        )

    @property
    def subspaces(self) -> torch.Tensor:
        return query_subspaces(self)

    @torch.jit.ignore
    def forward_trace(self, x: torch.Tensor) -> tuple[torch.Tensor, AttentionTrace]:
        out, logits, attention, values = self.explicit(x)
        return out, AttentionTrace(logits, attention, values)


ABLATIONS: dict[str, Any] = {
    "mlp": CrateMLPBlock,
    "mhsa": partial(CrateBlock, attn_layer=MHSA),
    "attn_only": CrateAttentionOnlyBlock,
}

default_cfgs = generate_default_cfgs(
    {f"crate_{size}_patch4_32_{ablation}": cpu_cfg() for size in CPU_SIZES for ablation in ABLATIONS}
)


def _create(size: str, ablation: str, pretrained: bool, kwargs: dict[str, Any]) -> CRATE:
    args = dict(patch_size=4, block_fn=ABLATIONS[ablation], **CPU_SIZES[size])
    return _create_crate(f"crate_{size}_patch4_32_{ablation}", pretrained, **dict(args, **kwargs))


@register_model
def crate_nano_patch4_32_mlp(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-MLP at ``crate_nano_patch4_32``'s size: MSSA, then an MLP with residual."""
    return _create("nano", "mlp", pretrained, kwargs)


@register_model
def crate_nano_patch4_32_mhsa(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-MHSA at ``crate_nano_patch4_32``'s size: softmax MHSA, then ISTA."""
    return _create("nano", "mhsa", pretrained, kwargs)


@register_model
def crate_nano_patch4_32_attn_only(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """``crate_nano_patch4_32`` with MSSA alone in each layer (no ISTA)."""
    return _create("nano", "attn_only", pretrained, kwargs)


@register_model
def crate_micro_patch4_32_mlp(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-MLP at ``crate_micro_patch4_32``'s size: MSSA, then an MLP with residual."""
    return _create("micro", "mlp", pretrained, kwargs)


@register_model
def crate_micro_patch4_32_mhsa(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-MHSA at ``crate_micro_patch4_32``'s size: softmax MHSA, then ISTA."""
    return _create("micro", "mhsa", pretrained, kwargs)


@register_model
def crate_micro_patch4_32_attn_only(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """``crate_micro_patch4_32`` with MSSA alone in each layer (no ISTA)."""
    return _create("micro", "attn_only", pretrained, kwargs)
