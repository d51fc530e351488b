"""Post-hoc interpretability evaluation: layerwise rates, attention lenses, geometry, probes, reports.

Every number is read from one trace of the model per batch (``crate.metrics.trace_model``).
"""

from .evaluate import evaluate_model
from .loading import EvalData, load_data, load_model, load_run
from .report import write_report

__all__ = ["EvalData", "evaluate_model", "load_data", "load_model", "load_run", "write_report"]
