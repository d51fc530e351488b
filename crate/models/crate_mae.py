"""CRATE-MAE (Pai et al., ICLR 2024, "Masked Completion via Structured Diffusion with White-Box
Transformers"): a CRATE encoder and a decoder whose layers run the encoder's two steps backwards.

Encoder layer (CRATE, ISTA with lambda = 0.5):  z' = z + MSSA(LN z),  z_next = ISTA(LN z')
Decoder layer:                                    x' = A LN(x)  (A: d x d, no bias, no ReLU),
                                                  x_next = x' - MSSA(LN x')
The decoder's A undoes the sparsifying dictionary and its MSSA step *expands* (the minus sign) where the
encoder's compresses.

Masked pretraining follows the authors' released code (``model/crate_ae/crate_ae.py`` of
Ma-Lab-Berkeley/CRATE), so that its checkpoints give identical outputs here:
- the patches are embedded (conv), a random ``mask_ratio`` of them per image (0.75 by default: exactly
  ``int(N (1 - mask_ratio))`` kept) is replaced by the learned mask token, the class token is prepended
  and the fixed sine-cosine position embedding added: the encoder sees every position, masked ones as
  the mask token (the released code adds the decoder's position embedding here; both are the same fixed
  table at equal widths, and are not trained);
- the decoder runs on the encoder's normalised output, a linear layer predicts each patch's pixels;
- the loss is the mean squared error on the masked patches only, against per-patch normalised pixels
  (``norm_pix_loss``, as in MAE).
The fixed sine-cosine tables (``pos_embed``, ``decoder_pos_embed``) are buffers: saved under the released
names, never optimised, and no parameter without a gradient (timm's backward checks). ``decoder_embed``
exists in the released layout (and in its parameter count) but no computation uses it: it is not built
here, and a released file's ``decoder_embed`` is dropped on load. The released parameter counts (no head:
tiny 11,555,328, small 25,405,824, base 44,638,464, large 154,274,560) are this model's parameters plus
the two tables plus ``decoder_embed``'s d^2 + d.

As a timm model the encoder is the backbone, as timm's own MAE-pretrained ViTs are: ``forward_features``
embeds every patch (no masking) and runs the encoder, ``forward_head`` classifies the class token; the
full timm API is that of :class:`crate.models.CRATE`. The registered models are the encoder alone
(``decoder_depth=0``: every parameter takes part in ``forward``; the decoder weights of a pretraining
checkpoint are left out on load); ``decoder_depth=N`` adds the decoder for masked pretraining
(``forward_mae``). ``pretraining_decoder_depth`` is the released pretraining's decoder depth, which
``crate.lit.MaskedAutoencoder`` builds unless told otherwise.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

import torch
from timm.layers import build_sincos2d_pos_embed, to_2tuple
from timm.models import checkpoint_seq, generate_default_cfgs
from torch import nn

from crate.layers import MSSA, BlockTrace, ConvPatchEmbed

from .convert import CheckpointError
from .crate import CPU_SIZES, CRATE, _create_crate, cpu_cfg, crate_cfg
from .registry import register_model

__all__ = ["CrateMAE", "CrateMAEDecoderBlock", "sincos_pos_embed"]


def sincos_pos_embed(dim: int, grid: tuple[int, int], num_prefix_tokens: int = 1) -> torch.Tensor:
    """MAE's fixed 2-D sine-cosine table (1, prefix + H W, dim): for the patch in row i, column j,
    [sin(j w), cos(j w), sin(i w), cos(i w)] with w_k = 10000^(-k / (dim/4)); zeros for the prefix tokens.

    timm's ``build_sincos2d_pos_embed`` (interleaved) gives [sin(i w), cos(i w), sin(j w), cos(j w)];
    its halves are swapped."""
    table = build_sincos2d_pos_embed(list(grid), dim, interleave_sin_cos=True)
    table = torch.cat([table[:, dim // 2 :], table[:, : dim // 2]], dim=1)
    return torch.cat([torch.zeros(num_prefix_tokens, dim), table]).unsqueeze(0)


class CrateMAEDecoderBlock(nn.Module):
    """One decoder layer: x' = A LN_1(x) (``dictionary``, bias-free), then x' - MSSA(LN_2(x'))."""

    def __init__(
        self, dim: int, num_heads: int, head_dim: int | None = None, norm_layer: type[nn.Module] = nn.LayerNorm
    ) -> None:
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.dictionary = nn.Linear(dim, dim, bias=False)
        nn.init.kaiming_uniform_(self.dictionary.weight)  # as the released code initialises A
        self.norm2 = norm_layer(dim)
        self.attn = MSSA(dim, num_heads, head_dim=head_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.dictionary(self.norm1(x))
        return x - self.attn(self.norm2(x))

    def forward_trace(self, x: torch.Tensor, attention: bool = True) -> tuple[torch.Tensor, BlockTrace]:
        """``forward`` with the layer's trace. The steps run in the encoder's reverse order: the trace's
        ``mlp_input`` is the input of the A step (LN_1 x, which comes first), ``attn_input`` what MSSA sees
        (LN_2 x'), ``z_half`` = ``z_out`` the layer output; there is no sparse code."""
        mlp_input = self.norm1(x)
        lifted = self.dictionary(mlp_input)
        attn_input = self.norm2(lifted)
        if attention:
            update, heads = self.attn.forward_trace(attn_input)
        else:
            update, heads = self.attn(attn_input), None
        out = lifted - update
        trace = BlockTrace.record(x, attn_input, self.attn.subspaces, heads, out, self.norm2(out), mlp_input, None, out)
        return out, trace


class CrateMAE(CRATE):
    """CRATE encoder (timm backbone) with the CRATE-MAE decoder and masked pretraining (module docstring)."""

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        patch_size: int = 16,
        in_chans: int = 3,
        embed_dim: int = 384,
        depth: int = 12,
        num_heads: int = 6,
        decoder_depth: int = 0,
        pretraining_decoder_depth: int = 12,
        decoder_num_heads: int | None = None,
        mask_ratio: float = 0.75,
        norm_pix_loss: bool = True,
        lambd: float = 0.5,
        **kwargs: Any,
    ) -> None:
        if not 0.0 <= mask_ratio < 1.0:
            raise ValueError(f"mask_ratio must lie in [0, 1), got {mask_ratio}")
        super().__init__(
            img_size=img_size,
            patch_size=patch_size,
            in_chans=in_chans,
            embed_dim=embed_dim,
            depth=depth,
            num_heads=num_heads,
            lambd=lambd,
            embed_layer=ConvPatchEmbed,
            final_norm_layer=partial(nn.LayerNorm, eps=1e-6),
            **kwargs,
        )
        if self.dynamic_img_size:
            raise ValueError("CRATE-MAE's fixed sine-cosine table is built for one grid: dynamic_img_size=False")
        self.mask_ratio = mask_ratio
        self.norm_pix_loss = norm_pix_loss
        grid = tuple(self.patch_embed.grid_size)
        del self.pos_embed  # CRATE's learned table: here a fixed one
        self.register_buffer("pos_embed", sincos_pos_embed(embed_dim, grid))
        self.decoder_depth = decoder_depth
        self.pretraining_decoder_depth = pretraining_decoder_depth  # the released pretraining's decoder
        if decoder_depth > 0:
            heads = decoder_num_heads or num_heads
            patch = self.patch_embed.patch_size
            self.mask_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
            self.register_buffer("decoder_pos_embed", sincos_pos_embed(embed_dim, grid))
            self.decoder_blocks = nn.Sequential(*[CrateMAEDecoderBlock(embed_dim, heads) for _ in range(decoder_depth)])
            self.decoder_norm = nn.LayerNorm(embed_dim, eps=1e-6)
            self.decoder_pred = nn.Linear(embed_dim, patch[0] * patch[1] * in_chans)
        self._init_weights()

    def set_input_size(self, img_size: int | tuple[int, int] | None = None, patch_size: object = None) -> None:
        """The model for another image size (timm's API); a decoder predicts its patches' pixels, so with one the
        patch size stays."""
        keeps = patch_size is None or to_2tuple(patch_size) == tuple(self.patch_embed.patch_size)
        if self.decoder_depth > 0 and not keeps:
            raise ValueError(
                f"CRATE-MAE's decoder predicts the pixels of {self.patch_embed.patch_size[0]}-pixel patches: "
                f"set_input_size changes the image size only here (got patch_size={patch_size})"
            )
        super().set_input_size(img_size=img_size, patch_size=patch_size)

    def _resize_positions(self, previous: tuple[int, int]) -> None:
        """The fixed sine-cosine tables computed for the new grid (encoder's, and the decoder's where it has one)."""
        grid = tuple(self.patch_embed.grid_size)
        self.pos_embed = sincos_pos_embed(self.embed_dim, grid).to(self.pos_embed)
        if hasattr(self, "decoder_pos_embed"):
            self.decoder_pos_embed = sincos_pos_embed(self.embed_dim, grid).to(self.decoder_pos_embed)

    def _init_weights(self) -> None:
        """The released code's initialisation: Linear layers xavier-uniform with zero biases, the patch
        embedding as a Linear, class and mask tokens normal(0.02); dictionaries kaiming-uniform."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for block in self.decoder_blocks if self.decoder_depth else []:
            nn.init.kaiming_uniform_(block.dictionary.weight)
        weight = self.patch_embed.proj.weight.data
        nn.init.xavier_uniform_(weight.view(weight.shape[0], -1))
        nn.init.normal_(self.cls_token, std=0.02)
        if self.decoder_depth:
            nn.init.normal_(self.mask_token, std=0.02)

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        return {"pos_embed", "cls_token", "mask_token", "decoder_pos_embed"}

    # ---------------------------------------------------------------- masked pretraining
    @torch.jit.ignore
    def patchify(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, N, p p C), each patch flattened in (row, column, channel) order."""
        p, q = self.patch_embed.patch_size
        batch, channels, height, width = images.shape
        x = images.reshape(batch, channels, height // p, p, width // q, q)
        return torch.einsum("bchpwq->bhwpqc", x).reshape(batch, (height // p) * (width // q), p * q * channels)

    @torch.jit.ignore
    def unpatchify(self, patches: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`patchify`."""
        p, q = self.patch_embed.patch_size
        rows, cols = self.patch_embed.grid_size
        channels = patches.shape[-1] // (p * q)
        x = patches.reshape(patches.shape[0], rows, cols, p, q, channels)
        return torch.einsum("bhwpqc->bchpwq", x).reshape(patches.shape[0], channels, rows * p, cols * q)

    @staticmethod
    def random_masking(
        x: torch.Tensor, mask_ratio: float, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Keep ``int(N (1 - mask_ratio))`` tokens per sample, those with the smallest ``noise`` (uniform
        by default): (kept tokens (B, N_keep, d), mask (B, N) with 1 = masked, the order that restores)."""
        batch, tokens, dim = x.shape
        keep = int(tokens * (1 - mask_ratio))
        if noise is None:
            noise = torch.rand(batch, tokens, device=x.device)
        shuffle = torch.argsort(noise, dim=1)
        restore = torch.argsort(shuffle, dim=1)
        kept = torch.gather(x, 1, shuffle[:, :keep, None].expand(-1, -1, dim))
        mask = torch.ones(batch, tokens, device=x.device)
        mask[:, :keep] = 0
        return kept, torch.gather(mask, 1, restore), restore

    @torch.jit.ignore
    def forward_masked_encoder(
        self, images: torch.Tensor, mask_ratio: float | None = None, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The encoder on the masked image (masked patches replaced by the mask token): (latent, mask)."""
        self._require_decoder()
        x = self.patch_embed(images)
        ratio = self.mask_ratio if mask_ratio is None else mask_ratio
        kept, mask, restore = self.random_masking(x, ratio, noise)
        filled = torch.cat([kept, self.mask_token.expand(x.shape[0], x.shape[1] - kept.shape[1], -1)], dim=1)
        filled = torch.gather(filled, 1, restore[..., None].expand(-1, -1, x.shape[2]))
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), filled], dim=1) + self.decoder_pos_embed
        return self.norm(self._run_blocks(self.blocks, x)), mask

    @torch.jit.ignore
    def forward_decoder(self, latent: torch.Tensor) -> torch.Tensor:
        """Decoder on the encoder's output: predicted pixels of every patch (B, N, p p C)."""
        self._require_decoder()
        x = self.decoder_norm(self._run_blocks(self.decoder_blocks, latent))
        return self.decoder_pred(x)[:, self.num_prefix_tokens :]

    @torch.jit.ignore
    def _run_blocks(self, blocks: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
        """The blocks, each recomputed in the backward pass when gradient checkpointing is on (as in
        ``forward_features``)."""
        return checkpoint_seq(blocks, x) if self.grad_checkpointing else blocks(x)

    @torch.jit.ignore
    def reconstruction_loss(self, images: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Mean squared error per patch, averaged over the masked patches; the target pixels normalised
        per patch (mean 0, variance 1) when ``norm_pix_loss``."""
        target = self.patchify(images)
        if self.norm_pix_loss:
            target = (target - target.mean(-1, keepdim=True)) / (target.var(-1, keepdim=True) + 1e-6).sqrt()
        per_patch = (pred - target).pow(2).mean(dim=-1)
        return (per_patch * mask).sum() / mask.sum()

    @torch.jit.ignore
    def forward_mae(
        self, images: torch.Tensor, mask_ratio: float | None = None, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Masked pretraining: (loss, predicted patches (B, N, p p C), mask (B, N), 1 = masked)."""
        latent, mask = self.forward_masked_encoder(images, mask_ratio, noise)
        pred = self.forward_decoder(latent)
        return self.reconstruction_loss(images, pred, mask), pred, mask

    @torch.jit.ignore
    def reconstruct(self, images: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
        """Predicted patches as images, the per-patch normalisation undone with the true patches' statistics
        (what the loss compares; MAE's way of showing a normalised-pixel reconstruction)."""
        if self.norm_pix_loss:
            target = self.patchify(images)
            pred = pred * (target.var(-1, keepdim=True) + 1e-6).sqrt() + target.mean(-1, keepdim=True)
        return self.unpatchify(pred)

    @torch.jit.ignore
    def masked_views(
        self, images: torch.Tensor, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(masked input with the masked patches zeroed, reconstruction with the visible patches pasted in),
        as images, for figures."""
        _, pred, mask = self.forward_mae(images, noise=noise)
        patches, hidden = self.patchify(images), mask[..., None].bool()
        masked = self.unpatchify(torch.where(hidden, torch.zeros_like(patches), patches))
        predicted = self.patchify(self.reconstruct(images, pred))
        return masked, self.unpatchify(torch.where(hidden, predicted, patches))

    def _require_decoder(self) -> None:
        if not self.decoder_depth:
            raise RuntimeError(
                "this CRATE-MAE was built without a decoder (decoder_depth=0): it only encodes; build it with "
                f"decoder_depth={self.pretraining_decoder_depth} (the released pretraining's) for masked pretraining"
            )


_RELEASED_LAYER = {
    # encoder layer: [PreNorm(MSSA), PreNorm(ISTA)]
    "blocks": {
        "layers.0.0.norm": "norm1",
        "layers.0.0.fn.qkv": "attn.qkv",
        "layers.0.0.fn.to_out.0": "attn.proj",
        "layers.0.1.norm": "norm2",
        "layers.0.1.fn": "ista",
    },
    # decoder layer: [PreNorm(A), PreNorm(MSSA)]
    "decoder_blocks": {
        "layers.0.0.norm": "norm1",
        "layers.0.0.fn": "dictionary",
        "layers.0.1.norm": "norm2",
        "layers.0.1.fn.qkv": "attn.qkv",
        "layers.0.1.fn.to_out.0": "attn.proj",
    },
}
_RELEASED_KEY = re.compile(
    r"(blocks|decoder_blocks)\.(\d+)\.(layers\.0\.[01]\.(?:norm|fn(?:\.qkv|\.to_out\.0)?))\.(weight|bias)"
)


def checkpoint_filter_mae(
    state_dict: dict[str, torch.Tensor], model: nn.Module, lambd_given: bool = True
) -> dict[str, torch.Tensor]:
    """The released CRATE-MAE layout (``blocks.{i}.layers.0.{0,1}.{norm,fn...}``) to the zoo's names; an
    encoder-only model (``decoder_depth=0``) takes a pretraining checkpoint's encoder. A file in the released
    layout does not record ISTA's lambda, which its training chose (the authors' demo file
    ``crate-mae-base-lmd5.0-checkpoint-799.pth``: 5.0; the code's default: 0.5): unless the model was built
    with an explicit ``lambd`` (``lambd_given``), it is refused rather than loaded with a guessed one."""
    released = any(_RELEASED_KEY.fullmatch(key) for key in state_dict)
    if released and not lambd_given:
        raise CheckpointError(
            "this file is in the released CRATE-MAE layout, which does not record the ISTA lambda it was "
            "trained with (the authors' files differ: 5.0 for crate-mae-base-lmd5.0-checkpoint-799.pth, 0.5 the "
            "code's default); build the model with lambd=<its value>, e.g. timm.create_model(..., lambd=5.0)"
        )
    renamed = {}
    for key, value in state_dict.items():
        match = _RELEASED_KEY.fullmatch(key)
        if match and match.group(3) in _RELEASED_LAYER[match.group(1)]:
            part, index, module, kind = match.groups()
            key = f"{part}.{index}.{_RELEASED_LAYER[part][module]}.{kind}"
        renamed[key] = value
    state_dict = {k: v for k, v in renamed.items() if not k.startswith("decoder_embed.")}  # unused, not built
    if getattr(model, "decoder_depth", 0) == 0:
        decoder = ("decoder_", "mask_token")
        state_dict = {k: v for k, v in state_dict.items() if not k.startswith(decoder)}
    return state_dict


def _create_crate_mae(variant: str, pretrained: bool = False, **kwargs: Any) -> CrateMAE:
    family_filter = partial(checkpoint_filter_mae, lambd_given="lambd" in kwargs)
    return _create_crate(variant, pretrained, model_cls=CrateMAE, family_filter=family_filter, **kwargs)


default_cfgs = generate_default_cfgs(
    {
        "crate_mae_tiny_patch16_224": crate_cfg(),
        "crate_mae_small_patch16_224": crate_cfg(),
        "crate_mae_base_patch16_224": crate_cfg(),
        "crate_mae_large_patch16_224": crate_cfg(),
        "crate_mae_nano_patch4_32": cpu_cfg(),
    }
)


def _mae(variant: str, pretrained: bool, args: dict[str, Any], kwargs: dict[str, Any]) -> CrateMAE:
    return _create_crate_mae(variant, pretrained, **dict(args, **kwargs))


@register_model
def crate_mae_tiny_patch16_224(pretrained: bool = False, **kwargs: Any) -> CrateMAE:
    """CRATE-MAE-T/16: d=384, K=6, 12 layers; pretrained with 12 decoder layers (released: 11,555,328 parameters)."""
    args = dict(patch_size=16, embed_dim=384, depth=12, num_heads=6, pretraining_decoder_depth=12)
    return _mae("crate_mae_tiny_patch16_224", pretrained, args, kwargs)


@register_model
def crate_mae_small_patch16_224(pretrained: bool = False, **kwargs: Any) -> CrateMAE:
    """CRATE-MAE-S/16: d=576, K=12, 12 layers; pretrained with 12 decoder layers (released: 25,405,824)."""
    args = dict(patch_size=16, embed_dim=576, depth=12, num_heads=12, pretraining_decoder_depth=12)
    return _mae("crate_mae_small_patch16_224", pretrained, args, kwargs)


@register_model
def crate_mae_base_patch16_224(pretrained: bool = False, **kwargs: Any) -> CrateMAE:
    """CRATE-MAE-B/16: d=768, K=12, 12 layers; pretrained with 12 decoder layers (released: 44,638,464)."""
    args = dict(patch_size=16, embed_dim=768, depth=12, num_heads=12, pretraining_decoder_depth=12)
    return _mae("crate_mae_base_patch16_224", pretrained, args, kwargs)


@register_model
def crate_mae_large_patch16_224(pretrained: bool = False, **kwargs: Any) -> CrateMAE:
    """CRATE-MAE-L/16: d=1024, K=16, 24 layers; pretrained with 24 decoder layers (released: 154,274,560)."""
    args = dict(patch_size=16, embed_dim=1024, depth=24, num_heads=16, pretraining_decoder_depth=24)
    return _mae("crate_mae_large_patch16_224", pretrained, args, kwargs)


@register_model
def crate_mae_nano_patch4_32(pretrained: bool = False, **kwargs: Any) -> CrateMAE:
    """CPU-scale CRATE-MAE for 32x32 inputs: ``CPU_SIZES['nano']`` encoder; pretrained with 4 decoder layers."""
    args = dict(patch_size=4, pretraining_decoder_depth=CPU_SIZES["nano"]["depth"], **CPU_SIZES["nano"])
    return _mae("crate_mae_nano_patch4_32", pretrained, args, kwargs)
