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
smaller of the N x N and d x d (p x p for a subspace) Gram matrices by Cholesky factorisations batched over all
layers, from the tensors the forward already computes (read by forward hooks: no second forward pass), on the
first ``max_images`` images of each batch (an unbiased estimate of the batch's mean: the batches are shuffled),
which keeps its cost a fraction of the step's. Off by default (w = 0): nothing is hooked.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from crate.metrics.functional import OFFICIAL_EPS, identity_plus_gram

__all__ = ["LayerObjective"]


def _rate(tokens: torch.Tensor, eps: float) -> torch.Tensor:
    """1/2 logdet(I + c/(N eps) Z^T Z) of unit-norm tokens Z (..., N, c), through a Cholesky factor of the smaller
    of the c x c and N x N matrices (positive definite: the identity plus a Gram matrix). In the tokens' dtype,
    with no check read back to the host (the metrics' ``logdet_identity_plus_gram`` is float64 with a fallback)."""
    unit = tokens / tokens.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    count, width = tokens.shape[-2], tokens.shape[-1]
    factor = torch.linalg.cholesky(identity_plus_gram(unit, width / (count * eps)))
    return factor.diagonal(dim1=-2, dim2=-1).log().sum(dim=-1)


class LayerObjective:
    """Forward hooks on a CRATE-style model's blocks (``norm1``, ``attn`` with ``subspaces``, ``ista``) that
    keep what the term needs during a training forward; :meth:`term` turns them into the loss term and forgets
    them."""

    def __init__(self, model: nn.Module, eps: float = OFFICIAL_EPS, max_images: int = 2) -> None:
        self.eps = eps
        self.max_images = max_images
        self.records: list[dict[str, Any]] = []
        self.handles = []
        blocks = getattr(model, "blocks", None)
        usable = [b for b in blocks or [] if hasattr(b, "norm1") and hasattr(getattr(b, "attn", None), "subspaces")]
        if not usable:
            raise ValueError(
                f"{type(model).__name__} has no CRATE-style blocks (norm1, an attention with subspaces U): the layer "
                "objective term is for CRATE, CRATE-alpha, ToST and CBT"
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
        """All layers at once: their kept tensors are stacked (L, B, N, d), so the term is two batched Cholesky
        factorisations however deep the model, not four per layer (on a small step their fixed cost dominates)."""
        records = [record for record in records if "update" in record]
        if not records:
            return torch.zeros(())
        keep = self.max_images
        # each kept tensor sliced once: a slice's backward writes a zero-filled tensor of the whole batch
        z_kept = [record["z"][:keep] for record in records]
        update_kept = [record["update"][:keep] for record in records]
        z, update = torch.stack(z_kept).float(), torch.stack(update_kept).float()
        before = torch.stack([record["attn_input"][:keep] for record in records]).float()
        kept = zip(records, z_kept, update_kept, strict=True)
        after = torch.stack([record["block"].norm1(zk + uk) for record, zk, uk in kept]).float()
        U = torch.stack([record["block"].attn.subspaces for record in records]).float()  # (L, K, d, p)

        tokens = torch.stack([before, after])  # (2, L, B, N, d)
        projected = torch.einsum("slbnd,lkdp->slbknp", tokens, U)
        rate_reduction = _rate(tokens, self.eps) - _rate(projected, self.eps).sum(dim=-1)  # (2, L, B)
        gain = rate_reduction[1] - rate_reduction[0]
        size = update.flatten(2).norm(dim=2) / z.flatten(2).norm(dim=2).clamp_min(1e-12)  # (L, B)
        per_layer = -(gain / size.clamp_min(1e-6)) / z.shape[2]
        codes = [record.get("code") for record in records]
        zero = torch.zeros_like(gain[0])
        sparsity = [code[:keep].float().abs().mean(dim=(1, 2)) if code is not None else zero for code in codes]
        per_layer = per_layer + torch.stack(sparsity)
        return per_layer.mean(dim=1).mean().float()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []
