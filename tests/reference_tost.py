"""An independent re-implementation of the ToST reference layout (RobinWu218/ToST ``tost_vision/tost.py``),
module for module, so that its state dict carries the reference's key names: ``pos_embeder``, class
attention with one ``qkv``, TSSA's ``qkv``/``temp``/``to_out.0``, LayerScale ``gamma1``/``gamma2``. Written
from the paper's formulas and the reference's module structure; used only by the tests."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def _conv_bn(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(cout))


class Stem(nn.Module):
    def __init__(self, dim: int, patch: int) -> None:
        super().__init__()
        widths = {16: [dim // 8, dim // 4, dim // 2, dim], 8: [dim // 4, dim // 2, dim]}[patch]
        layers, cin = [], 3
        for i, width in enumerate(widths):
            if i:
                layers.append(nn.GELU())
            layers.append(_conv_bn(cin, width))
            cin = width
        self.proj = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        x = self.proj(x)
        return x.flatten(2).transpose(1, 2), x.shape[2], x.shape[3]


class Fourier(nn.Module):
    """Sine/cosine features of the normalised patch coordinates (y, x) * 2 pi, projected by a 1x1 conv."""

    def __init__(self, dim: int, hidden: int = 32, temperature: float = 10000.0) -> None:
        super().__init__()
        self.token_projection = nn.Conv2d(2 * hidden, dim, 1)
        self.hidden, self.temperature = hidden, temperature

    def forward(self, batch: int, height: int, width: int) -> torch.Tensor:
        ys = torch.arange(1, height + 1, dtype=torch.float32) / (height + 1e-6) * 2 * math.pi
        xs = torch.arange(1, width + 1, dtype=torch.float32) / (width + 1e-6) * 2 * math.pi
        freq = self.temperature ** (2 * (torch.arange(self.hidden) // 2) / self.hidden)

        def features(coord: torch.Tensor) -> torch.Tensor:  # (L,) -> (L, hidden): sin, cos interleaved
            angles = coord[:, None] / freq
            return torch.stack([angles[:, 0::2].sin(), angles[:, 1::2].cos()], dim=-1).flatten(1)

        fy = features(ys)[:, None, :].expand(height, width, self.hidden)
        fx = features(xs)[None, :, :].expand(height, width, self.hidden)
        grid = torch.cat([fy, fx], dim=-1).permute(2, 0, 1)[None]  # (1, 2 hidden, H, W)
        return self.token_projection(grid).expand(batch, -1, -1, -1)


class TokenStatistics(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim, bias=True)
        self.temp = nn.Parameter(torch.ones(heads, 1))
        self.to_out = nn.Sequential(nn.Linear(dim, dim), nn.Dropout(0.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        w = self.qkv(x).view(b, n, self.heads, d // self.heads).permute(0, 2, 1, 3)  # (B, K, N, p)
        w_bar = w / w.norm(dim=2, keepdim=True).clamp_min(1e-12)
        pi = torch.softmax((w_bar**2).sum(-1) * self.temp, dim=1)  # (B, K, N)
        share = pi / (pi.sum(-1, keepdim=True) + 1e-8)
        moment = torch.einsum("bkn,bknp->bkp", share, w**2)
        out = -pi[..., None] * w / (1 + moment[:, :, None, :])
        return self.to_out(out.permute(0, 2, 1, 3).reshape(b, n, d))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Layer(nn.Module):
    def __init__(self, dim: int, heads: int, eta: float) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.attn = TokenStatistics(dim, heads)
        self.mlp = Mlp(dim, 4 * dim)
        self.gamma1 = nn.Parameter(eta * torch.ones(dim))
        self.gamma2 = nn.Parameter(eta * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.gamma1 * self.attn(self.norm1(x))
        return x + self.gamma2 * self.mlp(self.norm2(x))


class ClassAttention(nn.Module):
    """The class token attends to every token; the other tokens pass through unchanged."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=True)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = torch.einsum("bhp,bhnp->bhn", q[:, :, 0], k) / math.sqrt(d // self.heads)
        cls = torch.einsum("bhn,bhnp->bhp", scores.softmax(-1), v).reshape(b, 1, d)
        return torch.cat([self.proj(cls), x[:, 1:]], dim=1)


class ClassLayer(nn.Module):
    """With the reference's tokens_norm=True: every token normalised after the attention step, and the
    patch tokens added to themselves by the residual of the MLP step (which updates the class token only)."""

    def __init__(self, dim: int, heads: int, eta: float) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.attn = ClassAttention(dim, heads)
        self.mlp = Mlp(dim, 4 * dim)
        self.gamma1 = nn.Parameter(eta * torch.ones(dim))
        self.gamma2 = nn.Parameter(eta * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.gamma1 * self.attn(self.norm1(x))
        x = self.norm2(x)
        update = torch.cat([self.gamma2 * self.mlp(x[:, :1]), x[:, 1:]], dim=1)
        return x + update


class ReferenceToST(nn.Module):
    def __init__(self, dim: int, depth: int, heads: int, patch: int, classes: int, eta: float) -> None:
        super().__init__()
        self.patch_embed = Stem(dim, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embeder = Fourier(dim)
        self.blocks = nn.ModuleList([Layer(dim, heads, eta) for _ in range(depth)])
        self.cls_attn_blocks = nn.ModuleList([ClassLayer(dim, heads, eta) for _ in range(2)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x, height, width = self.patch_embed(images)
        x = x + self.pos_embeder(x.shape[0], height, width).flatten(2).transpose(1, 2)
        for block in self.blocks:
            x = block(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        for block in self.cls_attn_blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])
