"""The report's compression-controls table and the verdicts read from it (``crate.metrics.controls``).

Per model and layer: the trained attention step's change of R^c at full step and its slope at 0, the change
per unit step at each step fraction, and the same figures for the controls' directions. The verdicts count
layers; a null beats the trained step unless the step falls below the null's mean minus ``NULL_MARGIN``
spreads (standard deviations over its draws).
"""

from __future__ import annotations

from typing import Any

__all__ = ["NULL_MARGIN", "compression_controls_table", "compression_verdict", "layer_verdicts"]

NULL_MARGIN = 2.0


def _at(values: list[Any] | None, index: int) -> Any:
    return None if values is None else values[index]


def _full(entry: dict[str, Any], layer: int, fractions: list[float], key: str = "change") -> float | None:
    changes = entry[key][layer]
    return None if changes is None else changes[fractions.index(1.0)]


def _cell(value: float | None, spread: float | None = None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" + ("" if spread is None else f" ± {spread:.{digits}f}")


def layer_verdicts(summary: dict[str, Any]) -> list[dict[str, bool | None]]:
    """Per layer: does the trained step fall at full step, fall beyond the shared null (below its mean minus
    ``NULL_MARGIN`` spreads), fall at first order (slope < 0), fall without its token mean; does the
    theory's step fall at first order (None where the model has no theory's step)."""
    fractions = summary["fractions"]
    verdicts = []
    for layer in range(len(summary["before"])):
        trained = _full(summary["trained"], layer, fractions)
        null = _full(summary["shared_null"], layer, fractions)
        spread = _full(summary["shared_null"], layer, fractions, "change_spread") or 0.0
        theory = summary["theory_step"]["slope"][layer]
        verdicts.append(
            {
                "falls": trained < 0,
                "beyond_shared_null": trained < null - NULL_MARGIN * spread,
                "first_order": summary["trained"]["slope"][layer] < 0,
                "without_token_mean": _full(summary["mean_removed"], layer, fractions) < 0,
                "theory_first_order": None if theory is None else theory < 0,
            }
        )
    return verdicts


def compression_verdict(summary: dict[str, Any]) -> str:
    """One sentence of layer counts from :func:`layer_verdicts`."""
    verdicts = layer_verdicts(summary)
    depth = len(verdicts)

    def count(key: str) -> str:
        return f"{sum(bool(v[key]) for v in verdicts)}/{depth}"

    sentence = (
        f"the attention step lowers R^c in {count('falls')} layers, beyond the shared-vector null (its mean - "
        f"{NULL_MARGIN:g} sd) in {count('beyond_shared_null')}, at first order (slope < 0) in "
        f"{count('first_order')}, and without its token mean in {count('without_token_mean')}"
    )
    if all(v["theory_first_order"] is None for v in verdicts):
        return sentence + "; no theory's step (no shared subspaces U_[K])"
    return sentence + f"; the theory's MSSA step lowers it at first order in {count('theory_first_order')}"


def compression_controls_table(results: dict[str, dict[str, Any]], convention: str = "official") -> str:
    """Markdown: one row per model and layer of every direction's full-step change and slope at 0."""
    summaries = {label: r["controls"]["compression"][convention] for label, r in results.items() if r.get("controls")}
    if not summaries:
        return ""
    fractions = next(iter(summaries.values()))["fractions"]
    steps = " · ".join(f"{f:g}" for f in fractions)
    head = (
        "| model | layer | R^c before | ‖Δ‖/‖Z‖ | trained: full step (slope at 0) | trained: change / t at t = "
        f"{steps} | negated | without token mean | shared null | i.i.d. null | theory step: full (slope) "
        "[‖δ‖/‖Z‖] | heads through U_[K] |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, summary in summaries.items():
        for layer, before in enumerate(summary["before"]):
            trained = summary["trained"]
            per_unit = " · ".join(_cell(c / f) for c, f in zip(trained["change"][layer], fractions, strict=True))

            def full(name: str, spread: bool = False, layer: int = layer, summary: dict = summary) -> str:
                entry = summary[name]
                return _cell(
                    _full(entry, layer, fractions),
                    _full(entry, layer, fractions, "change_spread") if spread else None,
                )

            theory = summary["theory_step"]
            theory_cell = "-"
            if theory["slope"][layer] is not None:
                theory_cell = (
                    f"{full('theory_step')} ({_cell(theory['slope'][layer])}) [{theory['relative_norm'][layer]:.3f}]"
                )
            cells = [
                f"`{label}`",
                str(layer),
                f"{before:.1f}",
                f"{trained['relative_norm'][layer]:.2f}",
                f"{full('trained')} ({_cell(trained['slope'][layer])})",
                per_unit,
                full("negated"),
                full("mean_removed"),
                full("shared_null", spread=True),
                full("iid_null", spread=True),
                theory_cell,
                full("subspace_output"),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
