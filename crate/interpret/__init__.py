"""Post-hoc interpretability evaluation: layerwise rates, attention lenses, geometry, probes, reports."""

from .attention import LayerAttention, layer_attention
from .evaluate import evaluate_model
from .loading import load_data, load_model
from .report import write_report

__all__ = ["LayerAttention", "evaluate_model", "layer_attention", "load_data", "load_model", "write_report"]
