"""An independent re-implementation of the released CRATE-MAE layout (Ma-Lab-Berkeley/CRATE
``model/crate_ae/``), module for module, so that its state dict carries the released key names
(``blocks.{i}.layers.0.{0,1}.{norm,fn...}``) and its forward computes what the released code computes.
Used only by the tests."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def mae_sincos_table(dim: int, grid: int) -> np.ndarray:
    """MAE's 2-D table, float64, (1 + grid^2, dim) with a zero class-token row: per patch (row i, col j)
    the 1-D sin/cos of j on the first half and of i on the second, frequencies 10000^(-k / (dim / 4))."""
    omega = 1.0 / 10000 ** (np.arange(dim // 4, dtype=np.float64) / (dim / 4))
    rows, cols = np.meshgrid(np.arange(grid), np.arange(grid), indexing="ij")

    def one(pos: np.ndarray) -> np.ndarray:
        angles = np.outer(pos.reshape(-1), omega)
        return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)

    return np.concatenate([np.zeros((1, dim)), np.concatenate([one(cols), one(rows)], axis=1)])


class PreNorm(nn.Module):
    def __init__(self, dim: int, fn: nn.Module) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(self.norm(x))


class SharedAttention(nn.Module):
    """softmax(w w^T / sqrt(p)) w per head, w = U^T x; output Linear with bias."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim, bias=False)
        self.to_out = nn.Sequential(nn.Linear(dim, dim), nn.Dropout(0.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        w = self.qkv(x).view(b, n, self.heads, d // self.heads).transpose(1, 2)
        attn = torch.softmax(w @ w.transpose(-1, -2) / math.sqrt(d // self.heads), dim=-1)
        return self.to_out((attn @ w).transpose(1, 2).reshape(b, n, d))


class Sparsify(nn.Module):
    """ReLU(x + eta (D^T x - D^T D x) - eta lambda), the weight D stored as F.linear expects."""

    def __init__(self, dim: int, lambd: float = 0.5, eta: float = 0.1) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, dim))
        nn.init.kaiming_uniform_(self.weight)
        self.lambd, self.eta = lambd, eta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtdx = F.linear(F.linear(x, self.weight), self.weight.t())
        dtx = F.linear(x, self.weight.t())
        return F.relu(x + self.eta * (dtx - dtdx) - self.eta * self.lambd)


class Lift(nn.Module):
    """x -> A x, bias-free."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, dim))
        nn.init.kaiming_uniform_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [nn.ModuleList([PreNorm(dim, SharedAttention(dim, heads)), PreNorm(dim, Sparsify(dim))])]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attn, sparsify = self.layers[0]
        return sparsify(attn(x) + x)


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [nn.ModuleList([PreNorm(dim, Lift(dim)), PreNorm(dim, SharedAttention(dim, heads))])]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lift, attn = self.layers[0]
        lifted = lift(x)
        return lifted - attn(lifted)


class ConvPatches(nn.Module):
    def __init__(self, patch: int, chans: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(chans, dim, patch, stride=patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class ReleasedCrateMAE(nn.Module):
    def __init__(self, img: int, patch: int, chans: int, dim: int, depth: int, heads: int, decoder_depth: int) -> None:
        super().__init__()
        self.patch, self.grid = patch, img // patch
        self.patch_embed = ConvPatches(patch, chans, dim)
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, dim))
        table = torch.from_numpy(mae_sincos_table(dim, self.grid)).float()[None]
        self.pos_embed = nn.Parameter(table.clone(), requires_grad=False)
        self.blocks = nn.ModuleList([EncoderLayer(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.decoder_embed = nn.Linear(dim, dim)
        self.mask_token = nn.Parameter(0.02 * torch.randn(1, 1, dim))
        self.decoder_pos_embed = nn.Parameter(table.clone(), requires_grad=False)
        self.decoder_blocks = nn.ModuleList([DecoderLayer(dim, heads) for _ in range(decoder_depth)])
        self.decoder_norm = nn.LayerNorm(dim, eps=1e-6)
        self.decoder_pred = nn.Linear(dim, patch * patch * chans)

    def forward(self, images: torch.Tensor, mask_ratio: float, norm_pix: bool = True):
        """(loss, pred, mask) as the released forward computes them; the noise drawn with torch.rand."""
        x = self.patch_embed(images)
        n, length, d = x.shape
        keep = int(length * (1 - mask_ratio))
        noise = torch.rand(n, length)
        order = noise.argsort(dim=1)
        back = order.argsort(dim=1)
        visible = torch.stack([x[i, order[i, :keep]] for i in range(n)])
        mask = torch.ones(n, length)
        mask[:, :keep] = 0
        mask = torch.stack([mask[i, back[i]] for i in range(n)])
        seq = torch.cat([visible, self.mask_token.repeat(n, length - keep, 1)], dim=1)
        seq = torch.stack([seq[i, back[i]] for i in range(n)])
        x = torch.cat([self.cls_token.repeat(n, 1, 1), seq], dim=1) + self.decoder_pos_embed
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        for block in self.decoder_blocks:
            x = block(x)
        pred = self.decoder_pred(self.decoder_norm(x))[:, 1:]
        # patches in (row, col, channel) order
        p, g, c = self.patch, self.grid, images.shape[1]
        target = images.reshape(n, c, g, p, g, p).permute(0, 2, 4, 3, 5, 1).reshape(n, g * g, p * p * c)
        if norm_pix:
            target = (target - target.mean(-1, keepdim=True)) / (target.var(-1, keepdim=True) + 1e-6) ** 0.5
        loss = ((pred - target) ** 2).mean(-1)
        return (loss * mask).sum() / mask.sum(), pred, mask
