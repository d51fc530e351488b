"""``make controls-table``: the compression controls of every shipped CIFAR-10 classifier, beside its random init.

    .venv/bin/python -m benchmarks.controls_table                  # docs/controls_cifar10.md and .json
    .venv/bin/python -m benchmarks.controls_table --tags crate_nano_patch4_32.cifar10 --images 32 --out /tmp/c.md

For each tag: the weights through timm (``pretrained=True``), ``--images`` validation images of the data its
run held out (a class-mixed seeded sample, the tag's own evaluation transform; ``--data.root`` where the
folder has moved), one trace, and ``crate.metrics.controls``: the change of R^c across each attention step
along the trained update, the update negated and without its token mean, the matched-norm nulls (a vector
shared by all tokens, i.i.d. noise; 8 draws), the theory's MSSA step with its shrink term and the heads'
outputs through U_[K], at step fractions 1%, 5%, 25%, 100% and as slopes at 0; the same for the architecture
at the initialisation its recipe trains from (seed 0); and under seeds 0-18 (``--count-seeds``) the counts of
layers whose steps beat their nulls, against which the trained counts are read (the report's rule). No training:
the shipped files are what is measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

import crate  # noqa: F401  (registers the zoo)
from benchmarks.common import REPO
from crate.interpret import load_data, load_run
from crate.interpret.compression_table import compression_controls_table, compression_verdict, representatives_table
from crate.interpret.controls import compression_control_curves, initialised
from crate.interpret.evaluate import untrained_null_counts
from crate.interpret.objective_table import (
    SEEDS_TO_DECIDE,
    count_against_seeds,
    objective_table,
    objective_verdict_lines,
)
from crate.interpret.verdicts import null_counts
from crate.metrics import trace_model
from crate.metrics.representatives import representative_compression
from crate.results import shipped_tags
from crate.run import resolve_data

EPS = {"official": 0.01, "paper": 0.5}


def cifar10_tags() -> list[str]:
    """Every shipped CIFAR-10 classifier's tag (``NAME.cifar10`` and its variants ``NAME.cifar10_*``)."""
    return [tag for tag in shipped_tags() if tag.partition(".")[2].startswith("cifar10")]


def controls_of(model: torch.nn.Module, images: torch.Tensor) -> dict[str, Any]:
    """The compression-control summaries (both conventions) of ``model`` on ``images``, and where the model has
    CBSA, its representatives around their contraction step (paper convention)."""
    with torch.no_grad():
        traces = trace_model(model.eval(), images)
    summary = compression_control_curves(model, traces, EPS)
    representatives = representative_compression(model, images, EPS["paper"], traces=traces)
    if representatives:
        summary["representatives"] = [asdict(r) for r in representatives]
    return summary


def measure_tag(tag: str, images: int, overrides: dict[str, Any], count_seeds: int = SEEDS_TO_DECIDE) -> dict[str, Any]:
    model, recorded = load_run(tag, None)
    data = load_data(resolve_data(None, recorded, overrides), model, limit=images)
    sample = data.val_images[:images]
    random_init = controls_of(initialised(model, 0), sample)
    seed_0 = null_counts(_as_controls(random_init))  # from its full controls
    seed_counts = untrained_null_counts(model, sample, EPS, range(count_seeds), known={0: seed_0})
    return {
        "data": data.name,
        "images": len(sample),
        "trained": controls_of(model, sample),
        "random_init": random_init,
        "seed_counts": seed_counts,
    }


def _as_controls(measured: dict[str, Any]) -> dict[str, Any]:
    """A tag's measurements in the shape of a report's ``controls`` (what the report's tables read)."""
    return {
        "compression": measured,
        "objective": measured.get("objective"),
        "sparse_coding": measured.get("sparse_coding"),
    }


def markdown(results: dict[str, dict[str, Any]], command: str, minutes: float, date: str) -> str:
    first = next(iter(results.values()))
    verdicts, objective = [], []
    for tag, result in results.items():
        # the trained counts are read against the untrained architecture's under every seed measured
        init_counts = list(result["seed_counts"].values())
        for which in ("trained", "random_init"):
            label = tag if which == "trained" else f"{tag} (random init)"
            sentence = compression_verdict(result[which]["official"])
            seeds = init_counts if which == "trained" else []
            if seeds:
                count = null_counts(_as_controls(result[which]))["compression"]
                depth = len(result[which]["official"]["before"])
                against = count_against_seeds(count, depth, [c["compression"] for c in seeds])
                sentence += f"; beyond the shared null in {count} of {depth}{against}"
            verdicts.append(f"- `{label}`: {sentence}.")
            whole = objective_verdict_lines(_as_controls(result[which]), seeds)
            objective += [f"- `{label}`:", *(f"  {line}" for line in whole)] if whole else []
    as_report = {
        (tag if which == "trained" else f"{tag} (random init)"): {"controls": _as_controls(result[which])}
        for tag, result in results.items()
        for which in ("trained", "random_init")
    }
    settings = first["trained"]["official"]
    as_report_reps = {
        tag: {
            "representatives": result["trained"].get("representatives"),
            "controls": {"random_init": {"representatives": result["random_init"].get("representatives")}},
        }
        for tag, result in results.items()
    }
    reps = representatives_table(as_report_reps)
    seeds = list(first["seed_counts"])
    seed_words = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}"
    cifar10 = set(results) <= set(cifar10_tags())
    weights = "the shipped CIFAR-10 weights" if cifar10 else ", ".join(f"`{tag}`" for tag in results)
    reps_section = [
        "## CBSA's representatives",
        "",
        "Where the attention is CBSA: the head-summed coding rate of its pooled representatives, sum_k 1/2"
        " logdet(I + p/(M eps^2) reps_k^T reps_k) (paper convention, eps 0.5), before their contraction step, and"
        " its change across the trained step, the step negated and the random init's step (seed 0; step_rep is"
        " drawn at random there). Negative: the step compressed the representatives."
        " See crate.metrics.representatives.",
        "",
        reps,
        "",
    ]
    return "\n".join(
        [
            f"# The compression controls of {weights}",
            "",
            f"Written by `{command}` in {minutes:.1f} minutes ({date}), on {first['images']}"
            f" validation images of {first['data']} (a class-mixed seeded sample, each tag's own transform),"
            " official convention (eps 0.01); every number, both conventions, is in the JSON beside this file."
            " Each tag is followed by its architecture at the initialisation its recipe trains from (seed 0); a"
            " trained count of layers beating their nulls is read against the untrained architecture's under"
            f" {seed_words}, and one that a seed reaches is not a finding (were it another untrained draw, it would"
            f" pass all {len(seeds)} one time in {len(seeds) + 1}; with fewer than {SEEDS_TO_DECIDE} seeds no count"
            " is one).",
            "",
            "Each cell is the change of R^c(LN(Z + t delta) | U) - R^c(LN Z | U) across one attention step, one layer"
            " changed at a time, at t = 1 and (in brackets) its slope at t = 0 by autograd. Directions: the trained"
            " update Delta; negated; without its token mean; a Gaussian vector shared by all tokens and i.i.d."
            f" Gaussian noise at ||Delta||_F per image ({settings['draws']} draws, seed {settings['seed']}; mean ±"
            " sd over draws); the theory's MSSA step with its shrink term (kappa gamma ="
            f" {settings['theory_step_size']}, gamma = p/(N eps^2), eps = {settings['theory_eps']}, its own size in"
            " square brackets); the heads' outputs through U_[K] at ||Delta||_F. See crate.metrics.controls.",
            "",
            "## Verdicts (official convention)",
            "",
            *verdicts,
            "",
            "## Per layer",
            "",
            compression_controls_table(as_report),
            "",
            *(
                [
                    "## The whole objective",
                    "",
                    "R^c alone cannot tell compression from collapse: on unit-norm tokens a shared update lowers R^c"
                    " and R together. Here each attention step is read on R - R^c (official convention, on LN(Z)),"
                    " beside the nulls, the theory's MSSA step and the objective's own gradient step at the update's"
                    " norm, with each direction's cosine with grad (R - R^c); and each ISTA step on its LASSO"
                    " objective beside nulls of its size and the LASSO's descent step. A step beats a null when it"
                    " lies beyond the null's mean by 2 sd in the improving direction.",
                    "",
                    *objective,
                    "",
                    objective_table(as_report),
                    "",
                ]
                if objective
                else []
            ),
            *(reps_section if reps else []),
        ]
    )


def rendered_from_json(out: Path) -> str:
    """The markdown of ``out`` from the measurements saved beside it (``<out>.json``)."""
    saved_path = out.with_suffix(".json")
    if not saved_path.is_file():
        raise SystemExit(f"controls_table.py: no saved measurements at {saved_path}; run the table first")
    saved = json.loads(saved_path.read_text())
    return markdown(saved["results"], saved["command"], saved["minutes"], saved["date"])


def _overrides(rest: list[str]) -> dict[str, Any]:
    if len(rest) % 2 or any(not key.startswith("--data.") for key in rest[::2]):
        raise SystemExit(f"controls_table.py: unrecognized arguments {rest} (data settings: --data.KEY VALUE)")
    return {key[len("--data.") :]: value for key, value in zip(rest[::2], rest[1::2], strict=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tags", nargs="+", default=None, help="shipped tags (default: every CIFAR-10 classifier)")
    parser.add_argument("--images", type=int, default=64, help="validation images (class-mixed sample)")
    parser.add_argument(
        "--count-seeds",
        type=int,
        default=SEEDS_TO_DECIDE,
        help=f"untrained seeds each count is read against (default {SEEDS_TO_DECIDE}; fewer cannot make one a finding)",
    )
    parser.add_argument("--out", default=str(REPO / "docs" / "controls_cifar10.md"))
    parser.add_argument("--from-json", action="store_true", help="rewrite <out> from <out>.json, measuring nothing")
    args, rest = parser.parse_known_args()
    if args.count_seeds < 1:
        parser.error(f"--count-seeds {args.count_seeds}: give 1 or more ({SEEDS_TO_DECIDE} decide a count)")
    out = Path(args.out)
    if args.from_json:
        out.write_text(rendered_from_json(out))
        print(f"rewritten {out} from {out.with_suffix('.json')}")
        return
    overrides = _overrides(rest)
    torch.manual_seed(0)
    start = time.perf_counter()
    results = {}
    for tag in args.tags or cifar10_tags():
        try:
            results[tag] = measure_tag(tag, args.images, overrides, args.count_seeds)
        except (FileNotFoundError, ValueError) as err:
            raise SystemExit(f"controls_table.py: {tag}: {err}") from None
        print(f"{tag}: {compression_verdict(results[tag]['trained']['official'])}", flush=True)
    minutes = (time.perf_counter() - start) / 60
    out.parent.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python", "-m", "benchmarks.controls_table", *sys.argv[1:]])
    saved = {"command": command, "minutes": minutes, "date": time.strftime("%Y-%m-%d"), "results": results}
    out.with_suffix(".json").write_text(json.dumps(saved, indent=1) + "\n")
    out.write_text(rendered_from_json(out))
    print(f"{minutes:.1f} minutes; written to {out} and {out.with_suffix('.json').name}")


if __name__ == "__main__":
    main()
