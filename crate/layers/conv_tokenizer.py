"""The convolutional tokenizer and sequence pooling of the Compact Convolutional Transformers (Hassani et al.,
"Escaping the Big Data Paradigm with Compact Transformers", 2021), as modules any zoo family can take.

The tokenizer replaces a linear patch projection with ``n`` blocks of a 3x3 convolution (stride 1, no bias),
ReLU and a 3x3 max-pool of stride 2: the tokens are the cells of a grid ``2^n`` times smaller than the image,
each seeing a neighbourhood wider than a patch. Sequence pooling replaces the class token: a learned score
per token, softmax over the tokens, and the features are the tokens' weighted mean.
"""

from __future__ import annotations

import torch
from torch import nn

from .patch_embed import _PatchGrid

__all__ = ["ConvTokenizer", "SeqPool"]


class ConvTokenizer(_PatchGrid):
    """``conv_layers`` blocks of Conv3x3 (no bias) -> ReLU -> MaxPool(3, stride 2, padding 1); the widths are
    ``hidden_chans`` for every block but the last, which gives ``embed_dim``.

    Takes the arguments of a patch embedding (``patch_size`` is the grid's reduction, ``2^conv_layers``: pass
    either) and returns the tokens (B, N, d) in row-major order, as the zoo's patch embeddings do, or with
    ``output_fmt="NHWC"`` (what timm's ViT asks for with ``dynamic_img_size``) the grid (B, H, W, d). The first
    layer is ``proj.0`` (the cfg's ``first_conv``).
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 32,
        patch_size: int | tuple[int, int] | None = None,
        in_chans: int = 3,
        embed_dim: int = 128,
        conv_layers: int = 2,
        hidden_chans: int = 64,
        strict_img_size: bool = True,
        output_fmt: str | None = None,
        **_: object,  # timm's VisionTransformer passes its patch-embedding options (bias, padding): not used here
    ) -> None:
        reduction = 2**conv_layers
        if patch_size is not None and tuple(patch_size if isinstance(patch_size, tuple) else (patch_size,) * 2) != (
            reduction,
            reduction,
        ):
            raise ValueError(
                f"a tokenizer of {conv_layers} conv blocks reduces the image {reduction}x; got patch_size={patch_size}"
            )
        super().__init__(img_size, reduction, in_chans)
        self.strict_img_size = strict_img_size  # False: any size divisible by the reduction (timm's dynamic size)
        self.channels_last = output_fmt == "NHWC"  # timm's ViT asks for (B, H, W, d) with dynamic_img_size
        widths = [in_chans] + [hidden_chans] * (conv_layers - 1) + [embed_dim]
        blocks: list[nn.Module] = []
        for width_in, width_out in zip(widths[:-1], widths[1:], strict=True):
            blocks += [
                nn.Conv2d(width_in, width_out, 3, stride=1, padding=1, bias=False),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(3, stride=2, padding=1),
            ]
        self.proj = nn.Sequential(*blocks)
        for module in self.proj:
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight)

    def divisor_words(self) -> str:
        """What divides the image, for the refusal of a size it does not divide."""
        return f"the tokenizer's reduction {self.patch_size[0]} (each of its conv blocks halves the image)"

    def feat_ratio(self, as_scalar: bool = True) -> int | tuple[int, int]:
        """How many times smaller the token grid is than the image (timm's ``PatchEmbed`` API)."""
        return self.patch_size[0] if as_scalar else self.patch_size

    def dynamic_feat_size(self, img_size: tuple[int, int]) -> tuple[int, int]:
        """The token grid of an image of ``img_size`` (timm's ``PatchEmbed`` API)."""
        return img_size[0] // self.patch_size[0], img_size[1] // self.patch_size[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.check(x)
        x = self.proj(x)
        return x.permute(0, 2, 3, 1) if self.channels_last else x.flatten(2).transpose(1, 2)


class SeqPool(nn.Module):
    """Sequence pooling: ``softmax_n(x W + b)^T x``, (B, N, d) -> (B, d)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.attention_pool = nn.Linear(dim, 1)

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """Each token's share of the pooled features, (B, N), summing to one over the tokens."""
        return self.attention_pool(x).squeeze(-1).softmax(dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.weights(x).unsqueeze(1) @ x).squeeze(1)
