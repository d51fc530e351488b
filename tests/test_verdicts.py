"""The report's verdicts read each figure against its controls: cases built so that a control wins must read
"not a finding", and cases where the trained figure is beyond every control must say so."""

from __future__ import annotations

from typing import Any

import pytest

from crate.interpret.verdicts import plain_verdicts, verdict, verdict_figures


def _figures(
    zeros: float = 0.5,
    rank: float = 10.0,
    entropy: float = 3.0,
    top_k: float = 0.3,
    iou: float = 0.3,
    chance: float = 0.1,
    coherence: float = 0.85,
    probes: tuple[float, ...] = (0.5, 0.9),
) -> dict[str, Any]:
    """The figures of a two-layer model, as ``trace_figures`` and the probes give them."""
    layer = {"effective_rank": [rank, rank], "entropy": [entropy, entropy], "top_k_mass": [top_k, top_k]}
    return {
        "layerwise": {"official": {"sparsity_of_code": [zeros, zeros]}},
        "attention": [layer, layer],
        "segmentation": {"layers": {"1": {"best_head_iou": iou, "chance": chance}}},
        "geometry": {"mean_head_coherence": [coherence, coherence], "random_head_coherence": 0.84},
        "linear_probe_accuracy": list(probes),
    }


def _result(trained: dict[str, Any], seeds: list[dict[str, Any]]) -> dict[str, Any]:
    per_seed = [verdict_figures(seed, seed["linear_probe_accuracy"]) for seed in seeds]
    return dict(
        trained, probe_classes=10, sampled_images={"val": 360}, controls={"random_init": {"per_seed": per_seed}}
    )


def _line(lines: list[str], start: str) -> str:
    return next(line for line in lines if line.startswith(start))


def test_verdict_names_the_first_control_that_reaches_the_figure() -> None:
    assert verdict(0.9, {"random init": [0.85, 0.95], "chance": 0.1}, "higher") == (
        False,
        "not a finding (random init reaches 0.950)",
    )
    assert verdict(0.9, {"random init": [0.85, 0.88], "chance": 0.1}, "higher") == (
        True,
        "0.900, beyond random init 0.880 and chance 0.100",
    )
    assert verdict(2.0, {"random init": [2.5, 1.5]}, "lower")[0] is False  # a seed as low: chance reaches it
    assert verdict(0.9, {"layer 0": 0.9}, "higher")[0] is False  # reaching is enough, passing is not needed


def test_a_probe_that_layer_0_or_the_random_init_reaches_is_not_a_finding() -> None:
    seeds = [_figures(probes=(0.5, 0.6)), _figures(probes=(0.5, 0.62))]
    lines = plain_verdicts("m", _result(_figures(probes=(0.97, 0.98)), seeds))
    # 0.98 against 0.97: two standard errors of 0.98 on 360 images are 0.015
    assert "not a finding (layer 0 reaches 0.970 within the noise of 360 images)" in _line(lines, "- Linear probe")
    lines = plain_verdicts("m", _result(_figures(probes=(0.5, 0.7)), [*seeds, _figures(probes=(0.5, 0.75))]))
    assert "not a finding (the random init's last layer reaches 0.750)" in _line(lines, "- Linear probe")
    lines = plain_verdicts("m", _result(_figures(probes=(0.5, 0.9)), seeds))
    assert _line(lines, "- Linear probe") == (
        "- Linear probe of the last layer: 0.900, beyond the random init's last layer 0.620 and layer 0 0.500 "
        "and chance 0.100."
    )


def test_segmentation_above_chance_but_below_the_random_inits_best_head_is_not_a_finding() -> None:
    seeds = [_figures(iou=0.342, chance=0.292), _figures(iou=0.30, chance=0.29)]
    lines = plain_verdicts("m", _result(_figures(iou=0.169, chance=0.111), seeds))
    assert "not a finding (the random init's best head reaches 0.342)" in _line(lines, "- Segmentation")
    lines = plain_verdicts("m", _result(_figures(iou=0.5, chance=0.111), seeds))
    assert "0.500, beyond chance 0.111 and the random init's best head 0.342" in _line(lines, "- Segmentation")


def test_attention_spread_judged_on_effective_rank_and_the_other_measures_must_agree() -> None:
    seeds = [_figures(rank=28.0, entropy=4.0, top_k=0.19), _figures(rank=28.9, entropy=4.05, top_k=0.2)]
    # rank says more spread; entropy and top-k mass say more concentrated: the measures disagree
    line = _line(plain_verdicts("m", _result(_figures(rank=31.9, entropy=3.58, top_k=0.34), seeds)), "- Attention")
    assert line.startswith("- Attention: not a finding: by effective rank the maps are more spread")
    assert "row entropy (3.580 against 4.000-4.050) and top-k mass (0.340 against 0.190-0.200) do not agree" in line
    line = _line(plain_verdicts("m", _result(_figures(rank=20.0, entropy=3.0, top_k=0.4), seeds)), "- Attention")
    assert line.startswith("- Attention: maps more focused than at initialisation") and "agree" in line
    line = _line(plain_verdicts("m", _result(_figures(rank=28.5, entropy=3.0, top_k=0.4), seeds)), "- Attention")
    assert line.startswith("- Attention: not a finding: the maps' effective rank lies within the random init's")


@pytest.mark.parametrize("trained, finding", [(0.855, False), (0.9, True), (0.8, True)])
def test_head_coherence_against_random_subspaces_and_the_random_init(trained: float, finding: bool) -> None:
    seeds = [_figures(coherence=0.845), _figures(coherence=0.86)]
    line = _line(plain_verdicts("m", _result(_figures(coherence=trained), seeds)), "- Head subspaces")
    assert ("not a finding" not in line) is finding, line


def test_head_coherence_within_the_random_subspaces_scatter_is_not_a_finding() -> None:
    """Two heads of 64 in a width of 128 (the 0.48 M tokenizer members): random subspaces of that shape have
    coherence 0.99995 with a standard deviation of 6e-5 over their draws, so a trained 0.99990, below the random
    mean and both seeds by less than that scatter, must not read as 'less coherent'; a figure beyond the scatter
    still does."""
    seeds = [_figures(coherence=0.99996), _figures(coherence=0.99997)]
    saturated = _figures(coherence=0.99990)
    saturated["geometry"].update(random_head_coherence=0.99995, random_head_coherence_sd=6e-5)
    line = _line(plain_verdicts("m", _result(saturated, seeds)), "- Head subspaces")
    assert "not a finding" in line and "cannot tell heads apart" in line, line
    saturated["geometry"].pop("random_head_coherence_sd")  # without the scatter, the bare difference decides
    assert "less coherent" in _line(plain_verdicts("m", _result(saturated, seeds)), "- Head subspaces")
    seeds = [_figures(coherence=0.845), _figures(coherence=0.86)]
    for trained, words in ((0.87, "not a finding"), (0.9, "more coherent"), (0.81, "less coherent")):
        figures = _figures(coherence=trained)
        figures["geometry"]["random_head_coherence_sd"] = 0.009  # 4 heads of 24 in 96: margin 0.018 either side
        line = _line(plain_verdicts("m", _result(figures, seeds)), "- Head subspaces")
        assert words in line and "cannot tell" not in line, line


def test_sparsity_within_the_seeds_is_not_a_finding() -> None:
    seeds = [_figures(zeros=0.55), _figures(zeros=0.63)]
    assert "not a finding" in _line(plain_verdicts("m", _result(_figures(zeros=0.6), seeds)), "- Sparsity")
    assert "denser" in _line(plain_verdicts("m", _result(_figures(zeros=0.4), seeds)), "- Sparsity")


def _term_summary(trained: float, shared: float, iid: float, aligned: float, null_aligned: float) -> dict[str, Any]:
    """A one-layer summary of one term as ``summarise_responses`` gives it (full step only)."""

    def entry(change: float, spread: float | None, cosine: float, cosine_spread: float | None) -> dict[str, Any]:
        return {
            "change": [[change]],
            "change_spread": [[spread]],
            "alignment": [cosine],
            "alignment_spread": [cosine_spread],
        }

    return {
        "fractions": [1.0],
        "before": [10.0],
        "trained": entry(trained, None, aligned, None),
        "shared_null": entry(shared, 0.1, null_aligned, 0.01),
        "iid_null": entry(iid, 0.1, 0.0, 0.01),
    }


def _sparse(trained: float, null: float) -> dict[str, Any]:
    entry = {"change": [trained], "change_spread": [None]}
    nulls = {"change": [null], "change_spread": [0.01]}
    return {"trained": entry, "shared_null": nulls, "iid_null": nulls}


@pytest.mark.parametrize(
    "trained, shared, aligned, ista, finding",
    [(2.0, 22.8, 0.01, -0.5, False), (9.0, 3.0, 0.40, -0.5, True)],
)
def test_the_whole_objective_verdict_reads_the_step_against_its_nulls(trained, shared, aligned, ista, finding) -> None:
    from crate.interpret.objective_table import objective_layer_verdicts, objective_verdict_lines

    controls = {
        "objective": {"rate_reduction": _term_summary(trained, shared, 1.0, aligned, 0.0)},
        "sparse_coding": _sparse(ista, -0.1),
    }
    verdicts = objective_layer_verdicts(controls)
    assert verdicts == [{"rate_reduction": finding, "alignment": finding, "ista": True}]
    lines = objective_verdict_lines(controls)
    assert ("not a finding" in lines[0]) is not finding and "1 of 1 layers" in lines[1]


@pytest.mark.parametrize(
    ("count", "seeds", "words"),
    [
        (0, [0, 1], ": not a finding"),
        (2, [0, 2, 1], ": not a finding (the untrained architecture reaches 2 of 4 under one of its 3 seeds)"),
        (3, [0, 2, 1], ", beyond the untrained architecture's 0-2 of 4 over 3 seeds"),
        (1, [0, 0], ", beyond the untrained architecture's 0 of 4 over 2 seeds"),
        (1, [], ""),  # no seed counts (controls computed without them): the count alone, no claim either way
        (2, [2], ": not a finding (the untrained architecture reaches 2 of 4)"),  # one seed: no "one of its 1"
        (3, [1], ", beyond the untrained architecture's 1 of 4"),
    ],
)
def test_a_count_of_layers_beating_their_nulls_is_read_against_every_seed(count: int, seeds, words: str) -> None:
    from crate.interpret.objective_table import count_against_seeds

    assert count_against_seeds(count, 4, seeds) == words


def test_the_compression_and_objective_counts_are_no_finding_where_an_untrained_seed_reaches_them() -> None:
    """One layer whose trained step beats both nulls on R - R^c and on alignment, and falls beyond the shared
    null on R^c: a finding beside seeds that reach 0 layers, not one beside a seed that reaches 1."""
    rate = _term_summary(9.0, 3.0, 1.0, 0.40, 0.0)
    compression = {
        "before": [10.0],
        "fractions": [1.0],
        "trained": {"change": [[-5.0]], "slope": [-1.0]},
        "shared_null": {"change": [[-1.0]], "change_spread": [[0.1]]},
        "mean_removed": {"change": [[-2.0]]},
        "theory_step": {"slope": [None]},
    }

    def lines(seed_counts: list[dict[str, int]]) -> list[str]:
        seeds = [dict(verdict_figures(_figures(), (0.5, 0.9)), null_counts=c) for c in seed_counts]
        controls = {
            "random_init": {"per_seed": seeds},
            "compression": {"official": compression},
            "objective": {"rate_reduction": rate},
        }
        return plain_verdicts("m", dict(_figures(), probe_classes=10, sampled_images={"val": 360}, controls=controls))

    none = {"compression": 0, "rate_reduction": 0, "alignment": 0, "ista": None}
    beaten = lines([none, none])
    assert _line(beaten, "- Compression").endswith(", beyond the untrained architecture's 0 of 1 over 2 seeds.")
    assert "in 1 of 1 layers, beyond the untrained architecture's 0 of 1 over 2 seeds;" in _line(beaten, "- Rate")
    reached = lines([none, {"compression": 1, "rate_reduction": 1, "alignment": 0, "ista": None}])
    overturned = ": not a finding (the untrained architecture reaches 1 of 1 under one of its 2 seeds)"
    assert _line(reached, "- Compression").endswith(overturned + ".")
    assert f"in 1 of 1 layers{overturned};" in _line(reached, "- Rate")
    assert _line(reached, "- Rate").endswith("in 1 of 1, beyond the untrained architecture's 0 of 1 over 2 seeds.")
