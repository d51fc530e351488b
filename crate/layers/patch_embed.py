"""Patch embeddings: the official CRATE layout (LayerNorm -> Linear -> LayerNorm over flat patches) and the
strided convolution of CRATE-alpha, CRATE-MAE and the ViT twins (timm's, with the zoo's input check)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.layers import Format, _assert, nchw_to
from timm.layers import PatchEmbed as TimmPatchEmbed
from torch import nn

__all__ = ["ConvPatchEmbed", "PatchEmbed", "check_image_input", "patch_embed_in_chans", "resize_grid"]


def patch_embed_in_chans(embed: nn.Module) -> int:
    """Input channels of a patch embedding: the zoo's (``in_chans``) or timm's conv ``PatchEmbed``."""
    return int(getattr(embed, "in_chans", None) or embed.proj.in_channels)


def _pair(value: int | tuple[int, int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))


def check_image_input(x: torch.Tensor, in_chans: int, img_size: tuple[int, int] | None) -> None:
    """Assert that ``x`` is a batch of images the model was built for, with a message that says what to do.

    Written with timm's ``_assert`` (``torch._assert``) and no Python branching on tensor shapes, so the
    models stay TorchScript-scriptable, FX-traceable and ``torch.export``-able; a failed check raises an
    ``AssertionError`` (a ``torch.jit.Error`` that names it under TorchScript).
    """
    _assert(
        x.dim() == 4,
        f"expected a batch of images of shape (B, C, H, W), got a {x.dim()}-dimensional tensor "
        "(one image: x.unsqueeze(0))",
    )
    _assert(
        x.is_floating_point(),
        "expected floating-point images, scaled and normalised as the model's data config says (from PIL images: "
        "timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))); got an integer tensor",
    )
    _assert(
        x.shape[1] == in_chans,
        f"the model was built for {in_chans}-channel images but got {x.shape[1]}-channel ones; "
        f"convert the images to {in_chans}-channel ones or build the model with in_chans={x.shape[1]}",
    )
    if img_size is not None:
        message = (
            f"the model was built for {img_size[0]}x{img_size[1]} images but got {x.shape[2]}x{x.shape[3]}; "
            f"resize the images or build the model with img_size=({x.shape[2]}, {x.shape[3]})"
        )
        _assert(x.shape[2] == img_size[0], message)
        _assert(x.shape[3] == img_size[1], message)


def _size_refused(embed: nn.Module, size: tuple[int, int]) -> ValueError:
    """The refusal of an image size the embedding's grid does not divide, in the words of what divides it (its
    ``divisor_words``: a tokenizer's reduction is no patch size), and the sizes it takes."""
    step = tuple(embed.patch_size)
    words = embed.divisor_words() if hasattr(embed, "divisor_words") else f"patch_size={step}"
    sides = f"sides that are multiples of {step[0]}"
    if step[0] != step[1]:
        sides = f"a height that is a multiple of {step[0]} and a width that is a multiple of {step[1]}"
    return ValueError(f"img_size={size} is not divisible by {words}: give {sides}")


def resize_grid(embed: nn.Module, img_size: int | tuple[int, int] | None, patch_size: object = None) -> None:
    """timm's ``PatchEmbed.set_input_size`` for an embedding whose weights fix its patch size (flat patches, a
    tokenizer's or a stem's reduction): the grid of another image size; a new patch size is refused."""
    current = tuple(embed.patch_size)
    if patch_size is not None and _pair(patch_size) != current:  # type: ignore[arg-type]
        raise ValueError(
            f"this patch embedding's weights are built for {current[0]}x{current[1]} patches: set_input_size "
            f"changes the image size only (got patch_size={patch_size})"
        )
    if img_size is None:
        return
    size = _pair(img_size)
    if size[0] % current[0] or size[1] % current[1]:
        raise _size_refused(embed, size)
    embed.img_size = size
    embed.grid_size = (size[0] // current[0], size[1] // current[1])
    embed.num_patches = embed.grid_size[0] * embed.grid_size[1]


class _PatchGrid(nn.Module):
    """The grid of p x p patches over an image of a fixed size, shared by the patch embeddings."""

    def __init__(self, img_size: int | tuple[int, int], patch_size: int | tuple[int, int], in_chans: int) -> None:
        super().__init__()
        self.img_size = _pair(img_size)
        self.patch_size = _pair(patch_size)
        self.in_chans = in_chans
        if self.img_size[0] % self.patch_size[0] or self.img_size[1] % self.patch_size[1]:
            raise _size_refused(self, self.img_size)
        self.grid_size = (self.img_size[0] // self.patch_size[0], self.img_size[1] // self.patch_size[1])
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.strict_img_size = True  # False: any size divisible by the patch size (dynamic image size)

    def set_input_size(self, img_size: int | tuple[int, int] | None = None, patch_size: object = None) -> None:
        """The grid of another image size (timm's ``PatchEmbed`` API); the patch size stays."""
        resize_grid(self, img_size, patch_size)

    def check(self, x: torch.Tensor) -> None:
        """The input check: the built size, or (not strict) a size divisible by the patch size."""
        check_image_input(x, self.in_chans, self.img_size if self.strict_img_size else None)
        if not self.strict_img_size:
            message = f"image sides must be multiples of the patch size {self.patch_size[0]}x{self.patch_size[1]}"
            _assert(x.shape[2] % self.patch_size[0] == 0, message)
            _assert(x.shape[3] % self.patch_size[1] == 0, message)


class PatchEmbed(_PatchGrid):
    """Cut an image into p x p patches, flatten each in (p1 p2 c) order, and embed it.

    x_i = LN_out(W LN_in(vec(patch_i)) + b), as in the official CRATE ``to_patch_embedding``.
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        patch_size: int | tuple[int, int] = 16,
        in_chans: int = 3,
        embed_dim: int = 768,
    ) -> None:
        super().__init__(img_size, patch_size, in_chans)
        patch_dim = in_chans * self.patch_size[0] * self.patch_size[1]
        self.norm_in = nn.LayerNorm(patch_dim)
        self.proj = nn.Linear(patch_dim, embed_dim)
        self.norm_out = nn.LayerNorm(embed_dim)

    def patchify(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, N, p1 * p2 * C), patches in row-major order, pixels in (p1 p2 c) order."""
        batch, chans, height, width = x.shape
        ph, pw = self.patch_size
        x = x.reshape(batch, chans, height // ph, ph, width // pw, pw)
        x = x.permute(0, 2, 4, 3, 5, 1)  # B, h, w, p1, p2, c
        return x.reshape(batch, (height // ph) * (width // pw), ph * pw * chans)

    def _channel_major_order(self, device: torch.device) -> torch.Tensor:
        """Index that maps (c p1 p2) patch order to the (p1 p2 c) order of ``norm_in`` and ``proj``."""
        ph, pw = self.patch_size
        order = torch.arange(ph * pw * self.in_chans, device=device).reshape(ph, pw, self.in_chans)
        return order.permute(2, 0, 1).reshape(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``norm_out(proj(norm_in(patchify(x))))``, computed with the patch pixels in (c p1 p2) order.

        LayerNorm's mean and variance do not depend on the order of the features, so permuting the
        pixels of every patch and, with them, ``norm_in``'s and ``proj``'s per-pixel weights gives the same
        tokens. In (c p1 p2) order each run of p2 pixels is contiguous in the image, which makes the
        gather several times cheaper than the (p1 p2 c) order's stride-C reads (the largest elementwise
        pass of CRATE-T's step); the weights are permuted instead, a few hundred thousand elements.
        """
        self.check(x)
        if torch.jit.is_scripting():
            return self._permuted(x)
        return self._eager(x)

    @torch.jit.unused
    def _eager(self, x: torch.Tensor) -> torch.Tensor:
        """Where ``norm_in`` or ``proj`` computes its weight in a forward hook (torch's pruning, which Lightning's
        ModelPruning applies, sets ``weight`` from ``weight_orig`` and its mask there), the modules are called, in
        the (p1 p2 c) order: the permuted-weight path reads ``weight`` without calling them."""
        if self.norm_in._forward_pre_hooks or self.proj._forward_pre_hooks:
            return self.norm_out(self.proj(self.norm_in(self.patchify(x))))
        return self._permuted(x)

    def _permuted(self, x: torch.Tensor) -> torch.Tensor:
        batch, chans, height, width = x.shape
        ph, pw = self.patch_size
        patches = x.reshape(batch, chans, height // ph, ph, width // pw, pw).permute(0, 2, 4, 1, 3, 5)
        patches = patches.reshape(batch, (height // ph) * (width // pw), chans * ph * pw)
        order = self._channel_major_order(x.device)
        norm_in = self.norm_in
        weight, bias = norm_in.weight[order], norm_in.bias[order]
        patches = F.layer_norm(patches, norm_in.normalized_shape, weight, bias, norm_in.eps)
        return self.norm_out(F.linear(patches, self.proj.weight[:, order], self.proj.bias))


class ConvPatchEmbed(TimmPatchEmbed):
    """timm's strided-convolution ``PatchEmbed`` (x_i = W * patch_i + b, tokens in row-major order; same
    arguments, parameters and outputs) with the zoo's clear error for images of the wrong size or channel
    count: the patch embedding of CRATE-alpha, CRATE-MAE and the ViT twins (scriptable, traceable)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_image_input(x, self.proj.in_channels, self.img_size if self.strict_img_size else None)
        if not self.strict_img_size and not self.dynamic_img_pad:
            message = f"image sides must be multiples of the patch size {self.patch_size[0]}x{self.patch_size[1]}"
            _assert(x.shape[2] % self.patch_size[0] == 0, message)
            _assert(x.shape[3] % self.patch_size[1] == 0, message)
        if self.dynamic_img_pad:
            pad_h = (self.patch_size[0] - x.shape[2] % self.patch_size[0]) % self.patch_size[0]
            pad_w = (self.patch_size[1] - x.shape[3] % self.patch_size[1]) % self.patch_size[1]
            x = F.pad(x, (0, pad_w, 0, pad_h))
        x = self.proj(x)
        if self.flatten:
            x = x.flatten(2).transpose(1, 2)  # NCHW -> NLC
        elif self.output_fmt != Format.NCHW:
            x = nchw_to(x, self.output_fmt)
        return self.norm(x)
