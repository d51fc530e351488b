"""Controls every figure of the report is read against, so that a figure can come out otherwise.

- **random init**: the same architecture, built with the same arguments (and the build settings its file
  records) at its initialisation, under
  seeds 0, 1, 2 (seed 0 with the zoo's recipes is the very initialisation training started from: the model
  is the first thing built after ``seed_everything``); every figure of :func:`evaluate_model` but accuracy
  and probes, averaged over the seeds. A figure that a random model reaches as well says nothing about what
  training learned. The counts of layers whose steps beat their nulls, cheap to measure, are read against
  seeds 0-18 (:data:`~crate.interpret.objective_table.SEEDS_TO_DECIDE` says why).
- **compression controls** (``crate.metrics.controls``): the change of R^c along the trained attention update,
  the update negated, without its token mean, two matched-norm nulls (a random vector shared by all tokens,
  i.i.d. noise per token), the heads' outputs through U_[K] and the theory's MSSA step with its shrink term,
  each at step fractions 1%, 5%, 25% and 100% and as a slope at 0 (the first-order effect).
- **uniform map**: head redundancy and top-k mass of a uniform attention map (each row 1/N), what those two
  lenses give for a model that attends to nothing in particular.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import timm
import torch
from torch import nn

from crate.layers.trace import BlockTrace
from crate.metrics import compression_responses, summarise_responses, transformer_blocks
from crate.metrics.controls import NULL_DRAWS, NULL_SEED, STEP_FRACTIONS, THEORY_STEP_SIZE
from crate.metrics.functional import PAPER_EPS, default_eps
from crate.metrics.sparse_controls import sparse_coding_responses, summarise_sparse
from crate.models import settings_built_from_file

from .lenses import head_redundancy, top_k_mass

__all__ = ["INIT_SEEDS", "compression_control_curves", "initialised", "mean_of", "remember_build", "uniform_map"]

INIT_SEEDS = (0, 1, 2)
_BUILDS: weakref.WeakKeyDictionary[nn.Module, tuple[str, dict[str, Any]]] = weakref.WeakKeyDictionary()


def remember_build(model: nn.Module, name: str, kwargs: dict[str, Any]) -> None:
    """Record the ``timm.create_model`` call that built ``model`` (without weights), for :func:`initialised`,
    with the build settings the file it read records (a tag's ``lambd=1.0``, say): the call leaves them out,
    and a control built without them has the same shapes but computes another function."""
    recorded = settings_built_from_file(name, kwargs)
    built = {k: v for k, v in {**kwargs, **recorded}.items() if k not in ("pretrained", "pretrained_cfg_overlay")}
    _BUILDS[model] = (name, built)


def _build_of(model: nn.Module) -> tuple[str, dict[str, Any]]:
    if model in _BUILDS:
        return _BUILDS[model]
    cfg = getattr(model, "pretrained_cfg", None) or {}
    if "architecture" not in cfg:
        raise ValueError(f"{type(model).__name__}: no record of how it was built, so no random-init control")
    kwargs: dict[str, Any] = {"num_classes": getattr(model, "num_classes", 0)}
    if hasattr(model, "in_chans"):
        kwargs["in_chans"] = model.in_chans
    img_size = getattr(getattr(model, "patch_embed", None), "img_size", None)
    if img_size is not None:
        kwargs["img_size"] = tuple(img_size)
    return cfg["architecture"], kwargs


# what a model's pretrained cfg says of the images it reads (timm's data config): a control reads them as it does
_IMAGE_SETTINGS = ("input_size", "mean", "std", "interpolation", "crop_pct", "crop_mode")


def initialised(model: nn.Module, seed: int) -> nn.Module:
    """``model``'s architecture at its initialisation under ``seed`` (eval mode), reading images as ``model`` does
    (its pretrained cfg's size, mean, std and crop); refused when the rebuilt model's parameters do not have the
    trained model's names and shapes."""
    name, kwargs = _build_of(model)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = timm.create_model(name, **kwargs).eval()
    read = getattr(model, "pretrained_cfg", None) or {}
    fresh.pretrained_cfg = {**fresh.pretrained_cfg, **{key: read[key] for key in _IMAGE_SETTINGS if key in read}}
    own = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    rebuilt = {k: tuple(v.shape) for k, v in fresh.state_dict().items()}
    if own != rebuilt:
        differ = sorted(set(own.items()) ^ set(rebuilt.items()))[:3]
        raise ValueError(f"the rebuilt {name} differs from the model measured ({differ}); no random-init control")
    return fresh


def mean_of(results: list[Any]) -> Any:
    """The element-wise mean of results of one structure (dicts, lists, numbers). Integers are counts or
    indices: kept where all agree, None otherwise; a leaf that is not a number in all of them (a name, None)
    is kept from the first."""
    first = results[0]
    if isinstance(first, dict):
        return {key: mean_of([r[key] for r in results]) for key in first}
    if isinstance(first, list) and all(isinstance(r, list) and len(r) == len(first) for r in results):
        return [mean_of([r[i] for r in results]) for i in range(len(first))]
    if all(isinstance(r, int) and not isinstance(r, bool) for r in results):  # counts, sizes, indices
        return first if len(set(results)) == 1 else None  # the mean of indices (a best head) means nothing
    if all(isinstance(r, (int, float)) and not isinstance(r, bool) for r in results):
        return float(np.mean(results))
    return first


@torch.no_grad()
def compression_control_curves(
    model: nn.Module,
    traces: list[BlockTrace],
    eps: dict[str, float],
    conventions: tuple[str, ...] = ("official", "paper"),
    terms: tuple[str, ...] = ("expansion", "rate_reduction"),
    fractions: tuple[float, ...] = STEP_FRACTIONS,
) -> dict[str, Any]:
    """Per convention, the summary of :func:`crate.metrics.controls.summarise_responses` (per direction, per
    layer: the change of R^c at each step fraction, its spread over the nulls' draws, the slope at 0, the
    alignment with -grad R^c), from the model's traces (with attention maps) that its own figures were read
    from; ``objective``: the same for R and R - R^c (``terms``, official convention), and ``sparse_coding``:
    the ISTA step on its LASSO objective (:mod:`crate.metrics.sparse_controls`; None without sparse codes).
    The verdicts read the official convention, R - R^c and the ISTA step at the full step only:
    ``conventions=("official",), terms=("rate_reduction",), fractions=(1.0,)`` computes those (for the untrained
    architecture's counts)."""
    blocks = transformer_blocks(model)
    curves: dict[str, Any] = {}
    settings = {"draws": NULL_DRAWS, "seed": NULL_SEED, "theory_step_size": THEORY_STEP_SIZE, "theory_eps": PAPER_EPS}
    for convention in conventions:
        layers = compression_responses(
            blocks, traces, eps.get(convention, default_eps(convention)), convention, fractions=fractions
        )
        curves[convention] = dict(summarise_responses(layers), **settings)
    official = eps.get("official", default_eps("official"))
    curves["objective"] = {
        term: dict(
            summarise_responses(
                compression_responses(blocks, traces, official, "official", fractions=fractions, term=term)
            ),
            **settings,
        )
        for term in terms
    }
    curves["sparse_coding"] = summarise_sparse(sparse_coding_responses(blocks, traces))
    return curves


def uniform_map(heads: int, tokens: int, top_k: int) -> dict[str, float]:
    """Head redundancy and top-k mass of a uniform attention map, by the lenses themselves."""
    uniform = torch.full((1, heads, tokens, tokens), 1.0 / tokens, dtype=torch.float64)
    redundancy = float(head_redundancy(uniform).mean()) if heads > 1 else None
    return {"redundancy": redundancy, "top_k_mass": float(top_k_mass(uniform, top_k).mean())}
