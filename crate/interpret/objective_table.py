"""The report's whole-objective table and its verdicts: each attention step on R, R^c and R - R^c, each ISTA step
on its LASSO objective, beside nulls of the same size and the theory's and the objective's own steps.

A trained step beats a null on a term when its full-step change lies beyond the null's mean by ``NULL_MARGIN``
spreads (standard deviations over the draws) in the improving direction, and on alignment when its cosine with
the term's improving direction lies beyond the null's mean by the same margin.
"""

from __future__ import annotations

from typing import Any

from crate.metrics.controls import NULLS, full_step

from .compression_table import NULL_MARGIN

__all__ = [
    "SEEDS_TO_DECIDE",
    "count_against_seeds",
    "objective_counts",
    "objective_layer_verdicts",
    "objective_table",
    "objective_verdict_lines",
]


def _cell(value: float | None, spread: float | None = None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" + ("" if spread is None else f" ± {spread:.{digits}f}")


def _beats(value: float | None, null: float | None, spread: float | None, sign: float) -> bool:
    if value is None or null is None:
        return False
    return sign * (value - null) > NULL_MARGIN * (spread or 0.0)


def objective_layer_verdicts(controls: dict[str, Any]) -> list[dict[str, bool | None]]:
    """Per layer: does the trained attention step raise R - R^c beyond both nulls; is its alignment with
    grad (R - R^c) beyond both nulls'; does the ISTA step lower its LASSO objective beyond both nulls (None
    without a sparse code)."""
    rate = controls["objective"]["rate_reduction"]
    sparse = controls.get("sparse_coding")
    trained = full_step(rate, "trained")
    verdicts = []
    for layer in range(len(trained)):
        gain = all(
            _beats(trained[layer], full_step(rate, n)[layer], full_step(rate, n, "change_spread")[layer], 1.0)
            for n in NULLS
        )
        aligned = all(
            _beats(
                rate["trained"]["alignment"][layer],
                rate[n]["alignment"][layer],
                rate[n]["alignment_spread"][layer],
                1.0,
            )
            for n in NULLS
        )
        ista = None
        if sparse is not None and sparse["trained"]["change"][layer] is not None:
            ista = all(
                _beats(
                    sparse["trained"]["change"][layer],
                    sparse[n]["change"][layer],
                    sparse[n]["change_spread"][layer],
                    -1.0,
                )
                for n in NULLS
            )
        verdicts.append({"rate_reduction": gain, "alignment": aligned, "ista": ista})
    return verdicts


def objective_counts(controls: dict[str, Any]) -> dict[str, int | None]:
    """How many layers beat both nulls: on R - R^c (``rate_reduction``), on alignment with its ascent direction
    (``alignment``) and, for the ISTA step, on its LASSO objective (``ista``, None without sparse codes)."""
    verdicts = objective_layer_verdicts(controls)
    ista = None if all(v["ista"] is None for v in verdicts) else sum(bool(v["ista"]) for v in verdicts)
    return {
        "rate_reduction": sum(bool(v["rate_reduction"]) for v in verdicts),
        "alignment": sum(bool(v["alignment"]) for v in verdicts),
        "ista": ista,
    }


SEEDS_TO_DECIDE = 19
"""Seeds of the untrained architecture a count of layers is read against. Were the trained count only another
draw of the untrained one, it would pass every one of n seeds with a chance of at most 1 in n + 1: with 19, 1 in
20. With 3 it is 1 in 4, and it happened: crate_micro's 3 of 6 layers passed three seeds' 1-2 of 6, and 3 of the
first 20 seeds reach 3 of 6."""


def count_against_seeds(count: int, depth: int, seeds: list[int]) -> str:
    """The words after a count of layers that beat their nulls: ": not a finding" where no layer does, where
    the untrained architecture reaches the count under one of its seeds, or where fewer than
    :data:`SEEDS_TO_DECIDE` seeds were measured (the count passes them all, but chance could); else the seeds'
    counts beside it."""
    if count == 0:
        return ": not a finding"
    if not seeds:
        return ""
    if max(seeds) >= count:
        under = f" under one of its {len(seeds)} seeds" if len(seeds) > 1 else ""
        return f": not a finding (the untrained architecture reaches {max(seeds)} of {depth}{under})"
    span = str(max(seeds)) if min(seeds) == max(seeds) else f"{min(seeds)}-{max(seeds)}"
    over = f" over {len(seeds)} seeds" if len(seeds) > 1 else " under its one seed"
    if len(seeds) < SEEDS_TO_DECIDE:
        return (
            f": not a finding at {len(seeds)} seed{'s' if len(seeds) > 1 else ''} (beyond the untrained "
            f"architecture's {span} of {depth}{over}, which another untrained draw passes up to one time in "
            f"{len(seeds) + 1}; {SEEDS_TO_DECIDE} seeds decide)"
        )
    return f", beyond the untrained architecture's {span} of {depth}{over}"


def objective_verdict_lines(controls: dict[str, Any], seeds: list[dict[str, Any]] | None = None) -> list[str]:
    """The verdict sentences on the whole objective (empty where the controls do not hold it), each count read
    against the untrained architecture's under each seed (``seeds``: :func:`objective_counts` per seed)."""
    if not controls.get("objective"):
        return []
    depth = len(objective_layer_verdicts(controls))
    counts = objective_counts(controls)
    seeds = seeds or []

    def said(key: str) -> str:
        return count_against_seeds(counts[key], depth, [c[key] for c in seeds if c.get(key) is not None])

    lines = [
        f"- Rate reduction R - R^c: the attention step raises it beyond both matched-norm nulls in "
        f"{counts['rate_reduction']} of {depth} layers{said('rate_reduction')}; its alignment with the objective's "
        f"ascent direction is beyond both nulls' in {counts['alignment']} of {depth}{said('alignment')}."
    ]
    if counts["ista"] is not None:
        lines.append(
            f"- Sparse coding: the ISTA step lowers its LASSO objective beyond both matched-norm nulls in "
            f"{counts['ista']} of {depth} layers{said('ista')}. It is a proximal-gradient step of that objective by "
            "construction, trained or not: what training adds is read against the LASSO's own descent step."
        )
    return lines


def _change(summary: dict[str, Any], name: str, layer: int) -> str:
    spread = full_step(summary, name, "change_spread")[layer] if name in NULLS else None
    return _cell(full_step(summary, name)[layer], spread)


def _cosine(summary: dict[str, Any], name: str, layer: int) -> str:
    spread = summary[name]["alignment_spread"][layer] if name in NULLS else None
    return _cell(summary[name]["alignment"][layer], spread, 3)


def _lasso(sparse: dict[str, Any] | None, name: str, layer: int) -> str:
    if sparse is None or sparse[name]["change"][layer] is None:
        return "-"
    spread = sparse[name]["change_spread"][layer] if name in NULLS else None
    return _cell(sparse[name]["change"][layer], spread, 3)


def objective_table(results: dict[str, dict[str, Any]]) -> str:
    """Markdown: per model and layer, the full-step change of R^c, R and R - R^c along the trained step, the
    nulls, the theory's step and the gradient step of R - R^c, the alignments with grad (R - R^c), and the ISTA
    step's change of its LASSO objective beside its nulls and its descent step."""
    head = (
        "| model | layer | ΔR^c trained | ΔR trained | Δ(R - R^c): trained | shared null | i.i.d. null | theory step "
        "| gradient step | cos with ∇(R - R^c): trained | shared null | i.i.d. null | theory step | ISTA ΔL: trained "
        "| shared null | i.i.d. null | descent step |"
    )
    lines = [head, "|" + "---|" * 17]
    for label, result in results.items():
        controls = result.get("controls") or {}
        if not controls.get("objective"):
            continue
        rc = controls["compression"]["official"]
        r, rr = controls["objective"]["expansion"], controls["objective"]["rate_reduction"]
        sparse = controls.get("sparse_coding")
        for layer in range(len(rr["before"])):
            cells = [
                f"`{label}`",
                str(layer),
                _change(rc, "trained", layer),
                _change(r, "trained", layer),
                *[_change(rr, name, layer) for name in ("trained", "shared_null", "iid_null", "theory_step")],
                _change(rr, "gradient_step", layer),
                *[_cosine(rr, name, layer) for name in ("trained", "shared_null", "iid_null", "theory_step")],
                *[_lasso(sparse, name, layer) for name in ("trained", "shared_null", "iid_null", "descent_step")],
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""
