"""The projection head of self-distillation (DINO's MLP without its prototype layer, as SimDINO uses it)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.layers import trunc_normal_
from torch import nn

__all__ = ["ProjectionHead"]


class ProjectionHead(nn.Module):
    """``in_dim -> hidden_dim -> ... -> bottleneck_dim`` linear layers with GELU between them, the output
    L2-normalised: the features SimDINO's coding-rate loss compares.

    Args:
        in_dim: the backbone's feature width.
        hidden_dim: width of the hidden layers.
        bottleneck_dim: width of the output features.
        layers: number of linear layers (at least 1).
    """

    def __init__(self, in_dim: int, hidden_dim: int = 2048, bottleneck_dim: int = 256, layers: int = 3) -> None:
        super().__init__()
        if layers < 1:
            raise ValueError(f"a projection head has at least one layer; got {layers}")
        widths = [in_dim] + [hidden_dim] * (layers - 1) + [bottleneck_dim]
        modules: list[nn.Module] = []
        for index, (width_in, width_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
            modules.append(nn.Linear(width_in, width_out))
            if index < layers - 1:
                modules.append(nn.GELU())
        self.mlp = nn.Sequential(*modules)
        for module in self.mlp:
            if isinstance(module, nn.Linear):
                trunc_normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.mlp(x), dim=-1)
