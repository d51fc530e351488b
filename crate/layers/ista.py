"""The ISTA block: the sparsification step of a CRATE layer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.fx._symbolic_trace import is_fx_symbolic_tracing

from .precision import cpu_autocast_dtype

__all__ = ["ISTA", "OvercompleteISTA", "nonnegative_part"]


def nonnegative_part(x: torch.Tensor) -> torch.Tensor:
    """max(x, 0), the proximal step of the non-negative L1 penalty: ``F.relu``, but (x + |x|) / 2 when
    traced by ``torch.compile``.

    The two agree exactly for every finite x below half the dtype's largest value (doubling and halving are
    exact, and x + (-x) is 0); their gradients agree everywhere except at x = 0 exactly, where the
    compiled form takes the subgradient 1/2 instead of 0. The reason is speed: for ReLU's backward,
    inductor's CPU code saves a boolean mask, and its boolean stores cost about ten times the ReLU itself
    (CRATE-alpha's compiled training step ran slower than its eager one); the backward of |x| recomputes
    the sign from x and fuses with its neighbours.
    """
    if not torch.jit.is_scripting() and torch.compiler.is_compiling():
        return (x + x.abs()) * 0.5
    return F.relu(x)


class ISTA(nn.Module):
    """One proximal-gradient step of non-negative LASSO, warm-started at the input.

    With a dictionary D in R^{d x d}, step size eta and sparsity weight lambda:

        ISTA(z) = ReLU(z + eta D^T (z - D z) - eta * lambda)

    which is one step of min_{x >= 0} lambda ||x||_1 + 1/2 ||z - D x||_2^2 from x = z.
    D is stored as ``weight`` (d x d). In row form, with tokens as rows, D^T (z - D z) is
    (z - z D^T) D: two matmuls instead of the three of D^T z - D^T D z.
    The CRATE block applies it without a residual: Z^{l+1} = ISTA(LN(Z^{l+1/2})).

    Under CPU autocast (bf16) the whole step runs in the autocast dtype, input and output included. Left to
    autocast, only the matmuls would: the subtraction, the update and the ReLU would mix a float32 input
    with bfloat16 matmul outputs, and those mixed elementwise passes cost more than the matmuls saved
    (about a fifth of CRATE-T's bf16 training step; ``benchmarks/throughput.py``). With no residual
    around ISTA, its output in bfloat16 is what any autocast layer's output is.
    """

    def __init__(self, dim: int, step_size: float = 0.1, lambd: float = 0.1) -> None:
        super().__init__()
        self.step_size = step_size
        self.lambd = lambd
        self.weight = nn.Parameter(torch.empty(dim, dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.weight)  # as the official CRATE initialises D

    @property
    def dictionary(self) -> torch.Tensor:
        """The dictionary D (d x d)."""
        return self.weight

    def _step(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        residual = x - F.linear(x, weight)  # z - D z, row form
        grad = torch.matmul(residual, weight)  # D^T (z - D z), row form
        return nonnegative_part(x + self.step_size * grad - self.step_size * self.lambd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():  # TorchScript skips this block; FX tracing takes the plain step
            dtype = None if is_fx_symbolic_tracing() else cpu_autocast_dtype(x)
            if dtype is not None:
                with torch.autocast("cpu", enabled=False):
                    return self._step(x.to(dtype), self.weight.to(dtype))
        return self._step(x, self.weight)

    def extra_repr(self) -> str:
        return f"dim={self.weight.shape[0]}, step_size={self.step_size}, lambd={self.lambd}"


class OvercompleteISTA(nn.Module):
    """CRATE-alpha's sparse coding block: two ISTA steps from zero on an overcomplete dictionary,
    decoded by a separate (decoupled) output dictionary.

    With D, D_hat in R^{d x C d} (C = 4), step size eta and sparsity weight lambda:

        a_1 = ReLU(eta D^T x - eta lambda)                     (one step from a_0 = 0)
        a_2 = ReLU(a_1 - eta D^T (D a_1 - x) - eta lambda)
        ODL(x) = D_hat a_2

    The CRATE-alpha block adds it residually: x = x + ODL(LN(x)).
    """

    def __init__(self, dim: int, ratio: int = 4, step_size: float = 0.1, lambd: float = 0.1) -> None:
        super().__init__()
        self.step_size = step_size
        self.lambd = lambd
        self.dictionary = nn.Parameter(torch.empty(dim, ratio * dim))
        self.output_dictionary = nn.Parameter(torch.empty(dim, ratio * dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.dictionary)
        nn.init.kaiming_uniform_(self.output_dictionary)

    def sparse_code(self, x: torch.Tensor) -> torch.Tensor:
        """a_2, the sparse code of x (rows are tokens): shape (..., C d)."""
        D = self.dictionary
        shrink = self.step_size * self.lambd
        a1 = nonnegative_part(self.step_size * torch.matmul(x, D) - shrink)
        residual = F.linear(a1, D) - x  # D a_1 - x, row form
        return nonnegative_part(a1 - self.step_size * torch.matmul(residual, D) - shrink)

    def decode(self, code: torch.Tensor) -> torch.Tensor:
        """D_hat a: the code mapped back to the token space."""
        return F.linear(code, self.output_dictionary)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.sparse_code(x))

    def extra_repr(self) -> str:
        dim, atoms = self.dictionary.shape
        return f"dim={dim}, atoms={atoms}, step_size={self.step_size}, lambd={self.lambd}"
