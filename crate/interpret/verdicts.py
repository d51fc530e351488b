"""The report's verdicts: each figure of a trained model read against what its controls reach.

A figure is a finding only where no control reaches it in the direction claimed: one function
(:func:`verdict`) turns (trained figure, control figures, direction) into the sentence, and each section of the
report's verdicts goes through it. A control with several draws (the architecture at initialisation under
several seeds) reaches as far as another draw of it could: the 95% prediction interval for one more draw
(:func:`draw_interval`). Its most favourable draw alone would not do: with three seeds, a fourth draw of the same
distribution lies outside their range half the time, so a model no different from its initialisation would read
as a finding in one report of two.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from scipy import stats

from .compression_table import layer_verdicts
from .objective_table import count_against_seeds, objective_counts, objective_verdict_lines

__all__ = ["draw_interval", "null_counts", "plain_verdicts", "verdict", "verdict_figures"]

Direction = Literal["higher", "lower"]
Limits = tuple[float, float]
SHARE: Limits = (0.0, 1.0)  # accuracies, IoUs, shares of zeros, attention mass, coherence
UNBOUNDED: Limits = (-np.inf, np.inf)


def draw_interval(
    values: float | Sequence[float], level: float = 0.95, limits: Limits = UNBOUNDED
) -> tuple[float, float]:
    """How far another draw of a control could lie: one value reaches itself; several draws give the ``level``
    prediction interval for one more draw of the same normal distribution, mean ± t s sqrt(1 + 1/n) (Student's t
    with n - 1 degrees of freedom, s the draws' standard deviation), which holds every draw, cut to the figure's
    own ``limits`` (an accuracy cannot pass 1)."""
    draws = np.atleast_1d(np.asarray(values, dtype=np.float64))
    low, high = float(draws.min()), float(draws.max())
    if draws.size < 2:
        return low, high
    half = stats.t.ppf(0.5 + level / 2, draws.size - 1) * draws.std(ddof=1) * np.sqrt(1 + 1 / draws.size)
    mean = float(draws.mean())
    return max(min(low, mean - half), limits[0]), min(max(high, mean + half), limits[1])


def _reach(values: float | Sequence[float], direction: Direction, limits: Limits = UNBOUNDED) -> float:
    """The control's reach towards the claim: the top of :func:`draw_interval` for a claim of 'higher', its bottom
    for 'lower'."""
    low, high = draw_interval(values, limits=limits)
    return high if direction == "higher" else low


def _range(values: Sequence[float], digits: int) -> str:
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if low == high else f"{low:.{digits}f}-{high:.{digits}f}"


def _span(values: list[float], digits: int = 3, limits: Limits = UNBOUNDED) -> str:
    """The draws' range and, for several, how far another draw could lie (:func:`draw_interval`)."""
    if len(values) < 2:
        return _range(values, digits)
    return f"{_range(values, digits)}, another draw {_range(draw_interval(values, limits=limits), digits)}"


def _beyond(values: float | Sequence[float], direction: Direction, digits: int, limits: Limits) -> str:
    """A control passed: its value, or its draws' range and how far another draw could go towards the claim."""
    if _draws(values) < 2:
        return f"{_reach(values, direction):.{digits}f}"
    towards = "up to" if direction == "higher" else "down to"
    reach = _reach(values, direction, limits)
    return f"{_range(list(values), digits)} (another draw {towards} {reach:.{digits}f})"


def _draws(values: float | Sequence[float]) -> int:
    return 1 if isinstance(values, (int, float)) else len(values)


def verdict(
    trained: float,
    controls: Mapping[str, float | Sequence[float]],
    direction: Direction,
    digits: int = 3,
    margin: float = 0.0,
    noise: str = "",
    limits: Limits = UNBOUNDED,
) -> tuple[bool, str]:
    """(finding?, words): whether ``trained`` lies beyond every control in ``direction``, and the words that say
    so: ``"0.981, beyond random init 0.950 and layer 0 0.930"``, or ``"0.981, not a finding (random init reaches
    0.990)"`` naming the first control that reaches or passes it. A control of several draws reaches as far as
    :func:`draw_interval` within the figure's ``limits`` (the words then name its draws); one within ``margin``
    of the figure (the figure's own noise, described by ``noise``) reaches it too."""

    def reaches(value: float) -> bool:
        return value + margin >= trained if direction == "higher" else value - margin <= trained

    for label, values in controls.items():
        draws = np.atleast_1d(np.asarray(values, dtype=np.float64))
        drawn = float(draws.max() if direction == "higher" else draws.min())  # the most favourable draw
        reached = _reach(values, direction, limits)
        if not reaches(reached):
            continue
        scattered = not reaches(drawn)  # no draw reaches the figure; another draw could
        reached = reached if scattered else drawn
        short = noise and (reached < trained if direction == "higher" else reached > trained)
        if scattered:  # the draws as they fell, then how far one more could lie: no draw is said to reach it
            towards = "up to" if direction == "higher" else "down to"
            said = f"{label}: its {_draws(values)} draws {_range(list(draws), digits)}, another draw {towards} "
            said += f"{reached:.{digits}f}" + (f", within {noise}" if short else "")
        else:
            said = f"{label} reaches {reached:.{digits}f}" + (f" within {noise}" if short else "")
        return False, f"{trained:.{digits}f}, not a finding ({said})"
    # as many decimals as show the figure apart from every control's reach it passes
    reach_of = [_reach(values, direction, limits) for values in controls.values()]
    digits = max([digits, *(_digits_apart(trained, (reach, reach), direction, digits) for reach in reach_of)])
    beyond = " and ".join(f"{label} {_beyond(v, direction, digits, limits)}" for label, v in controls.items())
    return True, f"{trained:.{digits}f}, beyond {beyond}"


def _layer_mean(attention: list[dict[str, Any] | None], key: str) -> float | None:
    values = [np.mean(layer[key]) for layer in attention if layer is not None and layer.get(key) is not None]
    return float(np.mean(values)) if values else None


def verdict_figures(result: Mapping[str, Any], probes: Sequence[float] | None = None) -> dict[str, Any]:
    """The scalars the verdicts read, from a model's figures (:func:`crate.interpret.evaluate.trace_figures`,
    with its per-layer probe accuracies): the codes' share of zeros, the attention maps' effective rank, row
    entropy and top-k mass (means over layers and heads), the best head's IoU and its chance per segmented
    layer, the last layer's head coherence and the probes."""
    code = result["layerwise"]["official"]["sparsity_of_code"]
    attention = result["attention"]
    segmentation = result.get("segmentation") or {}
    return {
        "code_zeros": float(np.mean(code)) if code and all(v is not None for v in code) else None,
        "effective_rank": _layer_mean(attention, "effective_rank"),
        "entropy": _layer_mean(attention, "entropy"),
        "top_k_mass": _layer_mean(attention, "top_k_mass"),
        "segmentation": {
            str(layer): [scores["best_head_iou"], scores["chance"]]
            for layer, scores in (segmentation.get("layers") or {}).items()
        },
        "head_coherence": result["geometry"]["mean_head_coherence"][-1],
        "probes": list(probes) if probes is not None else None,
    }


def _seeds(initial: Mapping[str, Any], key: str) -> list[float]:
    return [seed[key] for seed in initial.get("per_seed") or [] if seed.get(key) is not None]


def _either_way(trained: float, intervals: Sequence[tuple[float, float]]) -> Direction | None:
    """'higher' or 'lower' where the trained figure lies beyond every control's interval on that side (each
    control's :func:`draw_interval`, or a figure ± its own scatter), None within them."""
    if trained > max(high for _, high in intervals):
        return "higher"
    if trained < min(low for low, _ in intervals):
        return "lower"
    return None


def _digits_apart(trained: float, interval: tuple[float, float], side: Direction | None, digits: int = 2) -> int:
    """Decimals that show a figure said to lie beyond a control's interval apart from the bound it passes (at 2,
    0.5564 beyond 0.5553 read "0.56" beside "0.51-0.56"); ``digits`` where it lies within it."""
    bound = interval[1] if side == "higher" else interval[0]
    while side is not None and digits < 6 and f"{trained:.{digits}f}" == f"{bound:.{digits}f}":
        digits += 1
    return digits


def _beyond_shared_null(summary: Mapping[str, Any]) -> int:
    """How many layers' attention steps lower R^c beyond the shared-vector null (a compression summary)."""
    return sum(bool(v["beyond_shared_null"]) for v in layer_verdicts(summary))


def null_counts(controls: Mapping[str, Any]) -> dict[str, int | None]:
    """How many layers' steps beat their matched-norm nulls, the counts the verdicts read: the attention step's
    fall of R^c beyond the shared null (``compression``, official convention), and :func:`objective_counts`
    (R - R^c, its alignment, the ISTA step's LASSO objective). A count alone is no finding: it is read against
    the same counts of the untrained architecture under each seed."""
    summary = (controls.get("compression") or {}).get("official")
    counts: dict[str, int | None] = {"compression": _beyond_shared_null(summary) if summary else None}
    if controls.get("objective"):
        counts.update(objective_counts(dict(controls)))
    return counts


def _compression(summary: Mapping[str, Any], initial: Mapping[str, Any] | None) -> str:
    depth = len(summary["before"])
    beyond = _beyond_shared_null(summary)
    seeds = [c["compression"] for c in _seed_counts(initial) if c.get("compression") is not None]
    judged = "no layer compresses beyond" if beyond == 0 else f"{beyond} of {depth} layers compress beyond"
    line = f"- Compression: {judged} a random vector shared by all tokens at the same norm"
    return f"{line}{count_against_seeds(beyond, depth, seeds)}."


def _seed_counts(initial: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Each seed's :func:`null_counts`: every count seed's where the controls hold them, else those of the seeds
    with full figures (none where the controls were computed without them)."""
    counts = (initial or {}).get("null_counts_per_seed")
    if counts:
        return list(counts.values())
    return [seed["null_counts"] for seed in (initial or {}).get("per_seed") or [] if seed.get("null_counts")]


def _sparsity(mine: Mapping[str, Any], initial: Mapping[str, Any]) -> str | None:
    seeds = _seeds(initial, "code_zeros")
    if mine["code_zeros"] is None or not seeds:
        return None
    interval = draw_interval(seeds, limits=SHARE)
    side = _either_way(mine["code_zeros"], [interval])
    digits = _digits_apart(mine["code_zeros"], interval, side)
    said = (
        f"{mine['code_zeros']:.{digits}f} of entries zero; random init over {len(seeds)} seeds "
        f"{_span(seeds, digits, SHARE)}"
    )
    if side is None:
        return f"- Sparsity: not a finding: the codes' share of zeros lies within the random init's ({said})."
    return f"- Sparsity: the codes are {'sparser' if side == 'higher' else 'denser'} than at initialisation ({said})."


def _attention(mine: Mapping[str, Any], initial: Mapping[str, Any]) -> str | None:
    """Judged on the effective rank of the maps (lower: more focused); row entropy (lower: more focused) and
    top-k mass (higher: more focused) must agree, or the verdict says they do not."""
    ranks = _seeds(initial, "effective_rank")
    if mine["effective_rank"] is None or not ranks:
        return None
    interval = draw_interval(ranks)
    side = _either_way(mine["effective_rank"], [interval])
    digits = _digits_apart(mine["effective_rank"], interval, side)
    said = f"effective rank {mine['effective_rank']:.{digits}f}, random init {_span(ranks, digits)}"
    if side is None:
        return f"- Attention: not a finding: the maps' effective rank lies within the random init's ({said})."
    focused = side == "lower"
    others = []
    measures = (("entropy", "row entropy", "lower", UNBOUNDED), ("top_k_mass", "top-k mass", "higher", SHARE))
    for key, name, focused_when, limits in measures:
        seeds = _seeds(initial, key)
        if mine[key] is None or not seeds:
            continue
        other = _either_way(mine[key], [draw_interval(seeds, limits=limits)])
        says = None if other is None else (other == focused_when)
        others.append((name, says, f"{mine[key]:.3f} against {_span(seeds, 3, limits)}"))
    disagree = [f"{name} ({figures})" for name, says, figures in others if says != focused]
    trend = "more focused" if focused else "more spread"
    if disagree:
        return (
            f"- Attention: not a finding: by effective rank the maps are {trend} than at initialisation ({said}), "
            f"but {' and '.join(disagree)} {'does' if len(disagree) == 1 else 'do'} not agree."
        )
    return f"- Attention: maps {trend} than at initialisation ({said}); row entropy and top-k mass agree."


def _segmentation(mine: Mapping[str, Any], initial: Mapping[str, Any] | None) -> str | None:
    if not mine["segmentation"]:
        return None
    layer = max(mine["segmentation"], key=int)
    best, chance = mine["segmentation"][layer]
    controls: dict[str, float | list[float]] = {"chance": chance}
    init = [seed["segmentation"][layer][0] for seed in (initial or {}).get("per_seed") or [] if seed["segmentation"]]
    if init:
        controls["the random init's best head"] = init
    _, words = verdict(best, controls, "higher", limits=SHARE)
    return f"- Segmentation (layer {layer}): the best head's IoU: {words}."


def _coherence(mine: Mapping[str, Any], geometry: Mapping[str, Any], initial: Mapping[str, Any] | None) -> str | None:
    """The last layer's head coherence against random subspaces of the same shape and the random init. The
    random subspaces' draws scatter: a figure within two of their standard deviations of their mean reaches
    them; the random init reaches as far as :func:`draw_interval` of its seeds. Where the random subspaces'
    scatter reaches 1 (heads that fill the width), the measure cannot separate models at all, and the sentence
    says so."""
    coherence, random = mine["head_coherence"], geometry.get("random_head_coherence")
    if coherence is None or random is None:
        return None
    margin = 2.0 * (geometry.get("random_head_coherence_sd") or 0.0)
    seeds = _seeds(initial or {}, "head_coherence")
    intervals = [(random - margin, random + margin)] + ([draw_interval(seeds, limits=SHARE)] if seeds else [])
    side = _either_way(coherence, intervals)
    spread = f" ± {margin / 2:.3f}" if margin else ""
    said = f"{coherence:.3f}; random subspaces {random:.3f}{spread}" + (
        f", random init {_span(seeds, 3, SHARE)}" if seeds else ""
    )
    if side is None:
        saturated = (
            "; random subspaces of this shape are already this coherent, so the measure cannot tell heads apart here"
            if margin and random + margin >= 1.0
            else ""
        )
        return f"- Head subspaces: not a finding: coherence within its controls ({said}){saturated}."
    return f"- Head subspaces: {'more' if side == 'higher' else 'less'} coherent than every control ({said})."


def _probe(
    mine: Mapping[str, Any], initial: Mapping[str, Any] | None, classes: int | None, images: int | None
) -> str | None:
    """The last layer's probe against the random init's last layer, layer 0 and chance; a control within two
    binomial standard errors of the probe's accuracy on its ``images`` validation images reaches it."""
    probes = mine["probes"]
    if not probes:
        return None
    p = probes[-1]
    margin = 2 * float(np.sqrt(p * (1 - p) / images)) if images else 0.0
    controls: dict[str, float | list[float]] = {}
    init = [seed["probes"][-1] for seed in (initial or {}).get("per_seed") or [] if seed.get("probes")]
    if init:
        controls["the random init's last layer"] = init
    if len(probes) > 1:
        controls["layer 0"] = probes[0]
    if classes:
        controls["chance"] = 1 / classes
    _, words = verdict(p, controls, "higher", margin=margin, noise=f"the noise of {images} images", limits=SHARE)
    return f"- Linear probe of the last layer: {words}."


def plain_verdicts(label: str, result: Mapping[str, Any]) -> list[str]:
    """One sentence per figure family, each read against its controls by :func:`verdict` or the same rule."""
    lines = [f"**`{label}`**", ""]
    controls = result.get("controls") or {}
    initial = controls.get("random_init")
    mine = verdict_figures(result, result.get("linear_probe_accuracy"))
    summary = (controls.get("compression") or {}).get("official")
    sentences = [
        _compression(summary, initial) if summary else None,
        *objective_verdict_lines(controls, _seed_counts(initial)),
    ]
    if initial:
        sentences += [_sparsity(mine, initial), _attention(mine, initial)]
    sentences += [
        _segmentation(mine, initial),
        _coherence(mine, result["geometry"], initial),
        _probe(mine, initial, result.get("probe_classes"), (result.get("sampled_images") or {}).get("val")),
    ]
    return lines + [sentence for sentence in sentences if sentence] + [""]
