"""A training term that asks each CRATE layer to do what its theory derives it to do.

CRATE's attention step is derived as a step that raises the rate reduction R(Z) - R^c(Z | U) of the tokens it
reads (LN(Z)), and its ISTA step as one that makes them sparse; trained for classification alone, the layers
need not do either (the controls of ``crate.metrics.controls`` measure whether they do). With weight w > 0 the
training loss gains

    w * mean over layers of [ -(RR(LN_1(Z + Delta)) - RR(LN_1(Z))) / (||Delta||_F / ||Z||_F) / N
                              + ||code||_1 / (N d) ]

per image: the attention step's rate-reduction gain per unit of its relative size (so the term rewards the
step's direction, not its length; divided by the N tokens, a per-token figure like the loss), and the mean
absolute value of the ISTA step's code. RR is the controls' measurement (official convention: unit-norm tokens,
eps 0.01; equal to ``crate.metrics.coding_rate`` and ``compression_rate`` there), computed in float32 on the
N x N Gram matrices by a Cholesky factorisation, from the tensors the forward already computes (read by forward
hooks: no second forward pass), on the first ``max_images`` images of each batch (an unbiased estimate of the
batch's mean: the batches are shuffled), which keeps its cost a fraction of the step's. Off by default (w = 0):
nothing is hooked.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from crate.metrics.functional import OFFICIAL_EPS

__all__ = ["LayerObjective"]


def _rate(tokens: torch.Tensor, eps: float) -> torch.Tensor:
    """1/2 logdet(I + c/(N eps) Z Z^T) of unit-norm tokens Z (..., N, c), through a Cholesky factor of the N x N
    matrix (positive definite: the identity plus a Gram matrix)."""
    unit = tokens / tokens.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    count, width = tokens.shape[-2], tokens.shape[-1]
    gram = unit @ unit.transpose(-1, -2) * (width / (count * eps))
    factor = torch.linalg.cholesky(gram + torch.eye(count, device=tokens.device, dtype=tokens.dtype))
    return factor.diagonal(dim1=-2, dim2=-1).log().sum(dim=-1)


class LayerObjective:
    """Forward hooks on a CRATE-style model's blocks (``norm1``, ``attn`` with ``subspaces``, ``ista``) that
    keep what the term needs during a training forward; :meth:`term` turns them into the loss term and forgets
    them."""

    def __init__(self, model: nn.Module, eps: float = OFFICIAL_EPS, max_images: int = 8) -> None:
        self.eps = eps
        self.max_images = max_images
        self.records: list[dict[str, Any]] = []
        self.handles = []
        blocks = getattr(model, "blocks", None)
        usable = [b for b in blocks or [] if hasattr(b, "norm1") and hasattr(getattr(b, "attn", None), "subspaces")]
        if not usable:
            raise ValueError(
                f"{type(model).__name__} has no CRATE-style blocks (norm1, an attention with subspaces U): the layer "
                "objective term is for CRATE and CRATE-alpha"
            )
        for block in usable:
            self.handles.append(block.register_forward_pre_hook(self._block_input))
            self.handles.append(block.attn.register_forward_hook(self._attention_output))
            if hasattr(block, "ista"):
                self.handles.append(block.ista.register_forward_hook(self._code))
        self.blocks = usable

    def _block_input(self, block: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        if torch.is_grad_enabled():
            self.records.append({"block": block, "z": args[0]})

    def _attention_output(self, attn: nn.Module, args: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        if self.records and torch.is_grad_enabled():
            self.records[-1].update(attn_input=args[0], update=output)

    def _code(self, ista: nn.Module, args: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        if self.records and torch.is_grad_enabled():
            code = output if not hasattr(ista, "sparse_code") else None
            self.records[-1]["code"] = code

    def term(self) -> torch.Tensor:
        """The term of the module docstring for the forward just run (then forgotten); 0 if nothing was kept.
        Computed in float32 whatever autocast is active (bf16 Gram matrices need not be positive definite)."""
        records, self.records = self.records, []
        device = records[0]["z"].device.type if records else "cpu"
        with torch.autocast(device_type=device, enabled=False):
            return self._term(records)

    def _term(self, records: list[dict[str, Any]]) -> torch.Tensor:
        parts = []
        for record in records:
            if "update" not in record:
                continue
            keep = self.max_images
            block, z, update = record["block"], record["z"][:keep], record["update"][:keep]
            U = block.attn.subspaces
            before, after = record["attn_input"][:keep].float(), block.norm1(z + update).float()

            gain = self._rate_reduction(after, U) - self._rate_reduction(before, U)
            size = update.float().flatten(1).norm(dim=1) / z.float().flatten(1).norm(dim=1).clamp_min(1e-12)
            per_layer = -(gain / size.clamp_min(1e-6)) / z.shape[1]
            code = record.get("code")
            if code is not None:
                per_layer = per_layer + code[:keep].float().abs().mean(dim=(1, 2))
            parts.append(per_layer.mean())
        return torch.stack(parts).mean().float() if parts else torch.zeros(())

    def _rate_reduction(self, tokens: torch.Tensor, subspaces: torch.Tensor) -> torch.Tensor:
        """R(Z) - R^c(Z | U) per image (B,), official convention, for tokens (B, N, d) and U (K, d, p)."""
        projected = torch.einsum("bnd,kdp->bknp", tokens, subspaces.float())
        return _rate(tokens, self.eps) - _rate(projected, self.eps).sum(dim=-1)

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []
