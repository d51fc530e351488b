"""torchmetrics Metrics and functional forms of the sparse rate reduction objective (no Lightning here).

Per-layer quantities are read from one trace of the model (``trace_model``); ``layerwise_values`` and
``LayerwiseRates`` compute them, with the names of ``QUANTITIES``.
"""

from . import functional
from .coding_rate import CodingRate, CompressionRate, SparseRateReduction, Sparsity
from .controls import COMPRESSION_CONTROLS, compression_controls
from .layerwise import MONITORED, QUANTITIES, LayerwiseRates, layerwise_values, series
from .top1_accuracy import Top1Accuracy
from .trace import trace_model, transformer_blocks

__all__ = [
    "COMPRESSION_CONTROLS",
    "MONITORED",
    "QUANTITIES",
    "CodingRate",
    "CompressionRate",
    "LayerwiseRates",
    "SparseRateReduction",
    "Top1Accuracy",
    "compression_controls",
    "Sparsity",
    "functional",
    "layerwise_values",
    "series",
    "trace_model",
    "transformer_blocks",
]
