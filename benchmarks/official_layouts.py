"""Independent re-implementations of the official CRATE (Ma-Lab-Berkeley/CRATE ``model/crate.py``) and
CRATE-alpha PyTorch inference (UCSC-VLAA/CRATE-alpha ``torch_inference/model/crate_alpha.py``) layouts,
module for module, so that their state dicts carry the official key names. Used only by the tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class UnfoldPatches(nn.Module):
    """(B, C, H, W) -> (B, N, p*p*C) with each patch in (p1 p2 c) order, via F.unfold (c p1 p2 order)."""

    def __init__(self, patch: int) -> None:
        super().__init__()
        self.patch = patch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c = x.shape[:2]
        cols = F.unfold(x, kernel_size=self.patch, stride=self.patch)  # (B, C*p*p, N), c-major
        cols = cols.reshape(b, c, self.patch, self.patch, -1)
        return cols.permute(0, 4, 2, 3, 1).reshape(b, cols.shape[-1], -1)


class PreNorm(nn.Module):
    def __init__(self, dim: int, fn: nn.Module, eps: float = 1e-5) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=eps)
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(self.norm(x))


class SharedQKVAttention(nn.Module):
    def __init__(self, dim: int, heads: int, out_bias: bool) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim, bias=False)
        self.to_out = nn.Sequential(nn.Linear(dim, dim, bias=out_bias), nn.Dropout(0.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        w = self.qkv(x).reshape(b, n, self.heads, d // self.heads).permute(0, 2, 1, 3)
        attn = torch.softmax(torch.einsum("bhid,bhjd->bhij", w, w) * (d // self.heads) ** -0.5, dim=-1)
        out = torch.einsum("bhij,bhjd->bhid", attn, w).permute(0, 2, 1, 3).reshape(b, n, d)
        return self.to_out(out)


class OfficialISTA(nn.Module):
    """relu(x + eta (D^T x - D^T D x) - eta lambda), row form, three matmuls."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, dim))
        nn.init.kaiming_uniform_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        D = self.weight
        grad = x @ D - (x @ D.T) @ D
        return F.relu(x + 0.1 * grad - 0.1 * 0.1)


def perturb_(module: nn.Module, seed: int = 0, scale: float = 0.2) -> nn.Module:
    """Move every parameter off its initial value (LayerNorm weights off 1 and biases off 0 too), so a
    conversion that swaps or drops any tensor changes the outputs."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.add_(scale * torch.randn(param.shape, generator=generator))
    return module


class OfficialCRATE(nn.Module):
    def __init__(
        self,
        image: int,
        patch: int,
        classes: int,
        dim: int,
        depth: int,
        heads: int,
        chans: int = 3,
        pool: str = "cls",
    ):
        super().__init__()
        self.pool = pool
        patch_dim = chans * patch * patch
        self.to_patch_embedding = nn.Sequential(
            UnfoldPatches(patch), nn.LayerNorm(patch_dim), nn.Linear(patch_dim, dim), nn.LayerNorm(dim)
        )
        self.pos_embedding = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim))
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.transformer = nn.Module()
        self.transformer.layers = nn.ModuleList(
            nn.ModuleList(
                [PreNorm(dim, SharedQKVAttention(dim, heads, out_bias=True)), PreNorm(dim, OfficialISTA(dim))]
            )
            for _ in range(depth)
        )
        self.mlp_head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, classes))

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.to_patch_embedding(img)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embedding
        for attn, ff in self.transformer.layers:
            x = ff(attn(x) + x)
        return self.mlp_head(x.mean(dim=1) if self.pool == "mean" else x[:, 0])


class OfficialOvercompleteISTA(nn.Module):
    def __init__(self, dim: int, ratio: int = 4) -> None:
        super().__init__()
        self.D = nn.Parameter(nn.init.kaiming_uniform_(torch.empty(dim, ratio * dim)))
        self.D1 = nn.Parameter(nn.init.kaiming_uniform_(torch.empty(dim, ratio * dim)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        eta, lam = 0.1, 0.1
        z1 = F.relu(eta * torch.einsum("dp,nld->nlp", self.D, x) - eta * lam)
        dz1 = torch.einsum("dp,nlp->nld", self.D, z1)
        z2 = F.relu(z1 - eta * torch.einsum("dp,nld->nlp", self.D, dz1 - x) - eta * lam)
        return torch.einsum("dp,nlp->nld", self.D1, z2)


class OfficialCrateAlpha(nn.Module):
    def __init__(
        self,
        image: int,
        patch: int,
        classes: int,
        dim: int,
        depth: int,
        heads: int,
        conv_bias: bool = True,
        chans: int = 3,
    ):
        super().__init__()
        self.conv1 = nn.Conv2d(chans, dim, kernel_size=patch, stride=patch, bias=conv_bias)
        self.pos_embedding = nn.Parameter(torch.randn((image // patch) ** 2 + 1, dim))
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.transformer = nn.Module()
        self.transformer.layers = nn.ModuleList(
            nn.ModuleList(
                [
                    PreNorm(dim, SharedQKVAttention(dim, heads, out_bias=False), eps=1e-6),
                    PreNorm(dim, OfficialOvercompleteISTA(dim), eps=1e-6),
                ]
            )
            for _ in range(depth)
        )
        # the inference file's head: LayerNorm with PyTorch's default eps, Linear with a bias
        self.mlp_head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, classes))

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.conv1(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embedding
        for attn, ff in self.transformer.layers:
            x = attn(x) + x
            x = ff(x) + x
        return self.mlp_head(x[:, 0])
