"""XCiT's convolutional patch stem for any power-of-two patch size (ToST's patch embedding)."""

from __future__ import annotations

import torch
from timm.models.xcit import conv3x3
from torch import nn

from .patch_embed import check_image_input, resize_grid

__all__ = ["ConvStem", "ConvStemTokens"]


class ConvStem(nn.Module):
    """log2(p) 3x3 stride-2 convolutions, each followed by BatchNorm, with GELU between them; the widths
    double up to ``embed_dim`` (d/8, d/4, d/2, d for p = 16).

    For p = 16 and p = 8 this is timm's ``xcit.ConvPatchEmbed`` (same modules, same names, built from its
    ``conv3x3``), which the XCiT and ToST reference models use; p = 4 (two convolutions) serves the
    CPU-scale members. ``forward`` returns the tokens (B, N, d) and the patch grid (Hp, Wp), as timm's does,
    after the zoo's input check.
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        patch_size: int = 16,
        in_chans: int = 3,
        embed_dim: int = 768,
        act_layer: type[nn.Module] = nn.GELU,
    ) -> None:
        super().__init__()
        steps = patch_size.bit_length() - 1
        if patch_size < 2 or 2**steps != patch_size or embed_dim % 2 ** (steps - 1):
            raise ValueError(
                f"the convolutional stem needs a power-of-two patch size >= 2 and embed_dim divisible by "
                f"patch_size / 2; got patch_size={patch_size}, embed_dim={embed_dim}"
            )
        self.img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        self.patch_size = (patch_size, patch_size)
        self.in_chans = in_chans
        self.grid_size = (self.img_size[0] // patch_size, self.img_size[1] // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        layers: list[nn.Module] = []
        width = in_chans
        for step in range(steps):
            if step:
                layers.append(act_layer())
            out = embed_dim // 2 ** (steps - 1 - step)
            layers.append(conv3x3(width, out, 2))
            width = out
        self.proj = nn.Sequential(*layers)
        self.strict_img_size = True  # False: any size divisible by the patch size

    def set_input_size(self, img_size: int | tuple[int, int] | None = None, patch_size: object = None) -> None:
        """The grid of another image size (timm's ``PatchEmbed`` API); the stem's reduction stays."""
        resize_grid(self, img_size, patch_size)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        check_image_input(x, self.in_chans, self.img_size if self.strict_img_size else None)
        x = self.proj(x)
        grid = (x.shape[2], x.shape[3])
        return x.flatten(2).transpose(1, 2), grid


class ConvStemTokens(ConvStem):
    """The same stem returning the tokens (B, N, d) alone, as the CRATE class takes a patch embedding (CBT's
    stem)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        check_image_input(x, self.in_chans, self.img_size if self.strict_img_size else None)
        return self.proj(x).flatten(2).transpose(1, 2)
