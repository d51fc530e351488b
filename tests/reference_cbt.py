"""The authors' CBT image classifier (QishuaiWen/CBSA, ``CBSA_image_classification/models.py`` and
``attn_layers.py``), written out independently in their module layout and parameter names, for the
faithfulness tests: a state dict of this module is what their training code saves.

Their layout: ``to_patch_embedding.proj`` (XCiT's stem: [conv3x3 + BatchNorm] blocks with GELU between),
``pos_embedding`` (1, N + 1, d), ``cls_token``, ``transformer.layers.{i}`` = [PreNorm(CBSA), PreNorm(ISTA)] with
PreNorm's ``norm`` and ``fn``, the attention's ``proj`` (no bias), ``step_x``, ``step_rep``, ``to_out``, the
ISTA's square ``weight``, and ``mlp_head`` = [LayerNorm, Linear]. The pooling onto 8 x 8 representatives is
written here with explicit bins (not ``adaptive_avg_pool2d``), per head, token by token where it matters.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def pool_bins(grid: torch.Tensor, out: int) -> torch.Tensor:
    """(B, S, S, C) -> (B, out * out, C): the mean of each bin [floor(i S / out), ceil((i + 1) S / out))."""
    side = grid.shape[1]
    cells = []
    for i in range(out):
        top, bottom = (i * side) // out, -(-((i + 1) * side) // out)
        for j in range(out):
            left, right = (j * side) // out, -(-((j + 1) * side) // out)
            cells.append(grid[:, top:bottom, left:right].mean(dim=(1, 2)))
    return torch.stack(cells, dim=1)


class ReferenceCBSA(nn.Module):
    def __init__(self, dim: int, heads: int, dim_head: int, grid: int = 8, patches_only: bool = False) -> None:
        super().__init__()
        self.heads, self.dim_head, self.grid, self.patches_only = heads, dim_head, grid, patches_only
        self.proj = nn.Linear(dim, heads * dim_head, bias=False)
        self.step_x = nn.Parameter(torch.randn(heads, 1, 1))
        self.step_rep = nn.Parameter(torch.randn(heads, 1, 1))
        self.to_out = nn.Linear(heads * dim_head, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = x.shape
        w = self.proj(x)
        if self.patches_only:  # the corrected pooling: the patch tokens after the class token
            side = math.isqrt(tokens - 1)
            grid = w[:, 1:]
        else:  # the authors': the first tokens, class token included, the last patch token left out
            side = math.isqrt(tokens)
            grid = w[:, : tokens - 1]
        reps = pool_bins(grid.reshape(batch, side, side, -1), self.grid)
        outputs = []
        scale = self.dim_head**-0.5
        for k in range(self.heads):
            cols = slice(k * self.dim_head, (k + 1) * self.dim_head)
            wk, rk = w[..., cols], reps[..., cols]
            read = F.softmax(rk @ wk.transpose(1, 2) * scale, dim=-1)  # representatives over tokens
            rk = rk + self.step_rep[k] * (read @ wk)
            mix = F.softmax(rk @ rk.transpose(1, 2) * scale, dim=-1) @ rk
            outputs.append(self.step_x[k] * (read.transpose(1, 2) @ mix))
        return self.to_out(torch.cat(outputs, dim=-1))


class ReferenceISTA(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim, dim) / dim**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x - x @ self.weight.T  # x - D x, D acting on rows
        return F.relu(x + 0.1 * (residual @ self.weight) - 0.1 * 0.1)


class PreNorm(nn.Module):
    def __init__(self, dim: int, fn: nn.Module) -> None:
        super().__init__()
        self.norm, self.fn = nn.LayerNorm(dim), fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(self.norm(x))


def _conv_bn(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, 2, 1, bias=False), nn.BatchNorm2d(cout))


class Stem(nn.Module):
    def __init__(self, dim: int, patch: int, in_chans: int = 3) -> None:
        super().__init__()
        steps = int(math.log2(patch))
        widths = [in_chans] + [dim // 2 ** (steps - 1 - s) for s in range(steps)]
        layers: list[nn.Module] = []
        for s in range(steps):
            if s:
                layers.append(nn.GELU())
            layers.append(_conv_bn(widths[s], widths[s + 1]))
        self.proj = nn.Sequential(*layers)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.proj(images).flatten(2).transpose(1, 2)


class ReferenceCBT(nn.Module):
    def __init__(
        self, dim: int, depth: int, heads: int, patch: int, img: int, classes: int, grid: int = 8, patches_only=False
    ) -> None:
        super().__init__()
        self.to_patch_embedding = Stem(dim, patch)
        self.pos_embedding = nn.Parameter(torch.randn(1, (img // patch) ** 2 + 1, dim))
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.transformer = nn.Module()
        self.transformer.layers = nn.ModuleList(
            nn.ModuleList(
                [
                    PreNorm(dim, ReferenceCBSA(dim, heads, dim // heads, grid, patches_only)),
                    PreNorm(dim, ReferenceISTA(dim)),
                ]
            )
            for _ in range(depth)
        )
        self.mlp_head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, classes))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.to_patch_embedding(images)
        x = torch.cat([self.cls_token.expand(len(x), -1, -1), x], dim=1) + self.pos_embedding
        for attn, ista in self.transformer.layers:
            x = ista(attn(x) + x)
        return self.mlp_head(x[:, 0])
