"""The report's compression-controls table and the verdicts read from it (``crate.metrics.controls``).

Per model and layer: the trained attention step's change of R^c at full step and its slope at 0, the change
per unit step at each step fraction, and the same figures for the controls' directions. The verdicts count
layers; a null beats the trained step unless the step falls below the null's mean minus ``NULL_MARGIN``
spreads (standard deviations over its draws).
"""

from __future__ import annotations

from typing import Any

from crate.metrics.controls import DIRECTIONS, NULLS, full_step

__all__ = ["NULL_MARGIN", "compression_controls_table", "compression_verdict", "layer_verdicts"]

NULL_MARGIN = 2.0


def _cell(value: float | None, spread: float | None = None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" + ("" if spread is None else f" ± {spread:.{digits}f}")


def layer_verdicts(summary: dict[str, Any]) -> list[dict[str, bool | None]]:
    """Per layer: does the trained step fall at full step, fall beyond the shared null (below its mean minus
    ``NULL_MARGIN`` spreads), fall at first order (slope < 0), fall without its token mean; does the
    theory's step fall at first order (None where the model has no theory's step)."""
    trained, null = full_step(summary, "trained"), full_step(summary, "shared_null")
    spreads, without_mean = full_step(summary, "shared_null", "change_spread"), full_step(summary, "mean_removed")
    verdicts = []
    for layer, theory in enumerate(summary["theory_step"]["slope"]):
        verdicts.append(
            {
                "falls": trained[layer] < 0,
                "beyond_shared_null": trained[layer] < null[layer] - NULL_MARGIN * (spreads[layer] or 0.0),
                "first_order": summary["trained"]["slope"][layer] < 0,
                "without_token_mean": without_mean[layer] < 0,
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
        full = {name: full_step(summary, name) for name in DIRECTIONS if name in summary}
        spread = {name: full_step(summary, name, "change_spread") for name in NULLS}
        trained, theory = summary["trained"], summary["theory_step"]
        for layer, before in enumerate(summary["before"]):
            per_unit = " · ".join(_cell(c / f) for c, f in zip(trained["change"][layer], fractions, strict=True))
            theory_cell = "-"
            if theory["slope"][layer] is not None:
                theory_cell = (
                    f"{_cell(full['theory_step'][layer])} ({_cell(theory['slope'][layer])})"
                    f" [{theory['relative_norm'][layer]:.3f}]"
                )
            cells = [
                f"`{label}`",
                str(layer),
                f"{before:.1f}",
                f"{trained['relative_norm'][layer]:.2f}",
                f"{_cell(full['trained'][layer])} ({_cell(trained['slope'][layer])})",
                per_unit,
                _cell(full["negated"][layer]),
                _cell(full["mean_removed"][layer]),
                _cell(full["shared_null"][layer], spread["shared_null"][layer]),
                _cell(full["iid_null"][layer], spread["iid_null"][layer]),
                theory_cell,
                _cell(full["subspace_output"][layer]),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def representatives_table(results: dict[str, dict[str, Any]]) -> str:
    """Markdown: per model with CBSA and layer, the representatives' R^c before their contraction step and
    its change along the trained step and the step negated, beside the random init's (``controls``); empty
    where no model has CBSA."""
    head = "| model | layer | R^c(reps) before | trained step | negated | random init: step (negated) | ‖step‖/‖reps‖ |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for label, result in results.items():
        trained = result.get("representatives")
        if not trained:
            continue
        initial = ((result.get("controls") or {}).get("random_init") or {}).get("representatives") or []
        for index, layer in enumerate(trained):
            init_cell = "-"
            if index < len(initial):
                start = initial[index]["before"]
                init_cell = f"{_cell(initial[index]['after'] - start)} ({_cell(initial[index]['negated'] - start)})"
            lines.append(
                f"| `{label}` | {layer['layer']} | {layer['before']:.1f} | {_cell(layer['after'] - layer['before'])} "
                f"| {_cell(layer['negated'] - layer['before'])} | {init_cell} | {layer['relative_step']:.2f} |"
            )
    return "\n".join(lines) if len(lines) > 2 else ""
