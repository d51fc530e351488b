"""torchmetrics Metrics and functional forms of the sparse rate reduction objective (no Lightning here).

Per-layer quantities are read from one trace of the model (``trace_model``); ``layerwise_values`` and
``LayerwiseRates`` compute them, with the names of ``QUANTITIES``.
"""

from . import functional
from .coding_rate import CodingRate, CompressionRate, SparseRateReduction, Sparsity
from .controls import DIRECTIONS, compression_responses, full_step, summarise_responses
from .layerwise import MONITORED, QUANTITIES, LayerwiseRates, layerwise_values, series
from .simdino import simdino_loss
from .top1_accuracy import Top1Accuracy
from .trace import trace_model, transformer_blocks

__all__ = [
    "DIRECTIONS",
    "MONITORED",
    "QUANTITIES",
    "CodingRate",
    "CompressionRate",
    "LayerwiseRates",
    "SparseRateReduction",
    "Top1Accuracy",
    "compression_responses",
    "full_step",
    "summarise_responses",
    "Sparsity",
    "functional",
    "layerwise_values",
    "series",
    "simdino_loss",
    "trace_model",
    "transformer_blocks",
]
