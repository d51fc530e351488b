"""Mixup and CutMix of a whole normalised batch on its device, each image's draws a function of its own seed.

Image ``i`` of a batch of ``B`` is mixed with its partner ``B - 1 - i`` (the batch reversed, as timm's ``Mixup``
pairs them; the partner contributes its unmixed pixels). From the image's seed ``s`` come five uniforms ``u_0..u_4``
(the counter-based draws of :mod:`crate.data.batch_augmentation`, keyed by ``s XOR`` :data:`MIX_SALT`, so they are
independent of the image's augmentation draws):

- the image is mixed when ``u_0 < prob``; it is CutMix when ``u_1 < switch_prob`` (with both on; else the one
  that is on), Mixup otherwise;
- ``lam = F^{-1}(u_2)``, with ``F`` the CDF of Beta(alpha, alpha) for the chosen kind's alpha, read from a table of
  its quantiles (scipy's, made once per alpha, 4,097 points, linear in between);
- Mixup: ``x_i <- lam x_i + (1 - lam) x_partner``;
- CutMix (timm's ``rand_bbox``): a box of ``floor(H sqrt(1 - lam))`` by ``floor(W sqrt(1 - lam))`` centred at
  ``(floor(u_3 H), floor(u_4 W))``, each edge at half the side (integer division) from the centre, clipped to the
  image, takes the partner's pixels; ``lam`` becomes the share of the image left, ``1 - box area / (H W)``;
- an image that is not mixed keeps ``lam = 1``.

The batch costs the same tensor operations whatever the draws, and nothing is read back to the host; the loss of
a mixed batch is ``crate.lit.mixed_loss``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .batch_augmentation import sample_uniforms

__all__ = ["MIX_SALT", "BatchMixing", "beta_quantiles"]

MIX_SALT = 0x6D69785F637574  # "mix_cut": the mixing draws' key, apart from the augmentation's
_APPLY, _SWITCH, _LAM, _CENTRE_Y, _CENTRE_X = range(5)
QUANTILE_POINTS = 4097


@functools.lru_cache(maxsize=16)
def _quantile_table(alpha: float) -> tuple[float, ...]:
    from scipy.stats import beta

    grid = np.linspace(0.0, 1.0, QUANTILE_POINTS)
    return tuple(float(q) for q in beta.ppf(grid, alpha, alpha))


def beta_quantiles(uniforms: torch.Tensor, alpha: float) -> torch.Tensor:
    """``F^{-1}(u)`` of Beta(alpha, alpha) for float64 uniforms in [0, 1), by linear interpolation in a table."""
    table = torch.tensor(_quantile_table(float(alpha)), dtype=torch.float64, device=uniforms.device)
    position = uniforms * (QUANTILE_POINTS - 1)
    low = position.floor().long().clamp(0, QUANTILE_POINTS - 2)
    weight = position - low
    return table[low] * (1 - weight) + table[low + 1] * weight


@dataclass(frozen=True)
class BatchMixing:
    """Settings of the batched Mixup and CutMix (the draws and steps: the module docstring).

    Args:
        mixup_alpha: Beta parameter of Mixup (0: no Mixup).
        cutmix_alpha: Beta parameter of CutMix (0: no CutMix).
        prob: the share of images that are mixed.
        switch_prob: with both on, the share of mixed images that get CutMix rather than Mixup.
        epochs: mixing in the first ``epochs`` epochs of a run only (None: every epoch), so that a run can end on
            unmixed images, as the published CIFAR recipes switch it off near their end.
    """

    mixup_alpha: float = 0.8
    cutmix_alpha: float = 1.0
    prob: float = 1.0
    switch_prob: float = 0.5
    epochs: int | None = None

    def __post_init__(self) -> None:
        if self.mixup_alpha < 0 or self.cutmix_alpha < 0:
            raise ValueError(f"mixup_alpha and cutmix_alpha must be >= 0, got {self.mixup_alpha}, {self.cutmix_alpha}")
        for name in ("prob", "switch_prob"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if self.epochs is not None and self.epochs < 0:
            raise ValueError(f"epochs must be >= 0 or None (every epoch), got {self.epochs}")

    def on(self, epoch: int) -> bool:
        """Whether the batches of this epoch (0-based) are mixed."""
        active = (self.mixup_alpha > 0 or self.cutmix_alpha > 0) and self.prob > 0
        return active and (self.epochs is None or epoch < self.epochs)

    def draws(self, seeds: Sequence[int] | torch.Tensor, height: int, width: int) -> dict[str, torch.Tensor]:
        """Per image: ``kind`` (0 none, 1 Mixup, 2 CutMix), ``lam`` as drawn, and the CutMix box (y0, y1, x0, x1)."""
        seeds = torch.as_tensor(seeds, dtype=torch.int64)
        u = sample_uniforms(seeds ^ MIX_SALT)
        mixed = u[:, _APPLY] < self.prob
        if self.mixup_alpha > 0 and self.cutmix_alpha > 0:
            cutmix = u[:, _SWITCH] < self.switch_prob
        else:
            cutmix = torch.full_like(mixed, self.cutmix_alpha > 0)
        lam_mixup = beta_quantiles(u[:, _LAM], self.mixup_alpha) if self.mixup_alpha > 0 else torch.ones_like(u[:, 0])
        lam_cut = beta_quantiles(u[:, _LAM], self.cutmix_alpha) if self.cutmix_alpha > 0 else torch.ones_like(u[:, 0])
        lam = torch.where(cutmix, lam_cut, lam_mixup)
        ratio = torch.sqrt(1 - lam)
        cut_h, cut_w = (height * ratio).floor().long(), (width * ratio).floor().long()
        cy, cx = (u[:, _CENTRE_Y] * height).floor().long(), (u[:, _CENTRE_X] * width).floor().long()
        y0, y1 = (cy - cut_h // 2).clamp(0, height), (cy + cut_h // 2).clamp(0, height)
        x0, x1 = (cx - cut_w // 2).clamp(0, width), (cx + cut_w // 2).clamp(0, width)
        kind = torch.where(mixed, torch.where(cutmix, 2, 1), 0)
        return {"kind": kind, "lam": lam, "y0": y0, "y1": y1, "x0": x0, "x1": x1}

    def __call__(self, images: torch.Tensor, seeds: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mixed images, ``lam`` per image as float32) of a normalised float batch (B, C, H, W)."""
        height, width = images.shape[-2:]
        device = images.device
        d = {k: v.to(device) for k, v in self.draws(torch.as_tensor(seeds).to(device), height, width).items()}
        partner = images.flip(0)
        ys = torch.arange(height, device=device)[None, :]
        xs = torch.arange(width, device=device)[None, :]
        rows = (ys >= d["y0"][:, None]) & (ys < d["y1"][:, None])
        cols = (xs >= d["x0"][:, None]) & (xs < d["x1"][:, None])
        box = rows[:, :, None] & cols[:, None, :] & (d["kind"] == 2)[:, None, None]
        area = ((d["y1"] - d["y0"]) * (d["x1"] - d["x0"])).double()
        lam = torch.where(d["kind"] == 2, 1 - area / (height * width), torch.where(d["kind"] == 1, d["lam"], 1.0))
        blend = torch.where(d["kind"] == 1, d["lam"], 1.0).to(images.dtype).view(-1, 1, 1, 1)
        out = images * blend + partner * (1 - blend)
        out = torch.where(box[:, None], partner, out)
        return out, lam.float()
