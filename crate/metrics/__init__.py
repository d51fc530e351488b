"""torchmetrics Metrics and functional forms of the sparse rate reduction objective (no Lightning here)."""

from . import functional
from .coding_rate import CodingRate, CompressionRate, SparseRateReduction, Sparsity
from .representations import LayerRepresentation, layer_representations, layer_subspaces

__all__ = [
    "CodingRate",
    "CompressionRate",
    "LayerRepresentation",
    "SparseRateReduction",
    "Sparsity",
    "functional",
    "layer_representations",
    "layer_subspaces",
]
