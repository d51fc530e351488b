"""k-NN and linear-probe accuracy of self-supervised encoders beside their controls, on a data set's val split.

    .venv/bin/python -m benchmarks.simdino_eval --encoder RUN/checkpoints/last.ckpt [--encoder RUN2/...] \
        --control "CRATE-MAE=MAE_RUN/checkpoints/last.ckpt" [--out TABLE.md]

For each encoder (a SimDINO run's checkpoint, or an exported file; its row says what trained it: SimDINO,
masked pretraining or supervised), the same architecture at the
initialisation its training started from (seed 0: the random-init control) and each ``--control LABEL=PATH``
(another encoder, such as a CRATE-MAE run: the masked-pretraining control) are scored by
:func:`crate.interpret.frozen_features.frozen_feature_scores` on the data the first encoder's run trained on
(its evaluation transform): DINO's weighted k-NN (k 20, temperature 0.07; bank: every training image) and a
logistic-regression probe on the standardised pooled features, both on every validation image. The table is
printed; ``--out TABLE.md`` writes it there, with every number in ``TABLE.json`` beside it (the zoo's own table:
``--out docs/simdino_cifar10.md``). ``crate.export`` writes the same scores of one encoder on its card.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import crate  # noqa: F401  (registers the zoo)
from crate.interpret import load_data, load_run
from crate.interpret.controls import initialised
from crate.interpret.frozen_features import KNN_TEMPERATURE, frozen_feature_scores, knn_k, same_inputs, unscorable


def markdown(saved: dict[str, Any]) -> str:
    rows = [
        f"| {label} | {entry['model']} | {entry['knn_top1']:.4f} | {entry['linear_probe_top1']:.4f} |"
        for label, entry in saved["results"].items()
    ]
    return "\n".join(
        [
            "# Self-supervised encoders against their controls",
            "",
            f"Written by `{saved['command']}` in {saved['minutes']:.1f} minutes ({saved['date']}) on {saved['data']}:"
            f" {saved['train_images']} training images (the k-NN bank and the probe's training set) and"
            f" {saved['val_images']} validation images (scored). Weighted k-NN with k {saved['knn']['k']} and"
            f" temperature {KNN_TEMPERATURE} on the pooled features; the probe is a logistic regression on"
            " standardised features.",
            "",
            "| encoder | model | k-NN top-1 | linear probe top-1 |",
            "|---|---|---|---|",
            *rows,
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--encoder",
        action="append",
        required=True,
        help="a SimDINO checkpoint, or another run's (repeatable; each with its random init)",
    )
    parser.add_argument("--control", action="append", default=[], metavar="LABEL=PATH", help="another encoder")
    parser.add_argument("--out", help="write the table to this Markdown file and its numbers beside it as JSON")
    args = parser.parse_args()
    start = time.perf_counter()
    models, data_config = {}, None
    for path in args.encoder:
        name, trained_by = _recorded_name(path)
        encoder, recorded = load_run(name, path)
        if recorded is None:
            raise SystemExit(f"simdino_eval.py: {path} records no data config; evaluate a checkpoint of a run")
        data_config = data_config or recorded
        models[f"{trained_by} {name}"] = encoder
        models[f"random init {name}"] = initialised(encoder, 0)
    for entry in args.control:
        label, sep, path = entry.partition("=")
        if not sep:
            raise SystemExit(f"simdino_eval.py: --control takes LABEL=PATH, got {entry!r}")
        models[label] = load_run(_recorded_name(path)[0], path)[0]
    first = next(iter(models.values()))
    for label, model in models.items():
        if not same_inputs(model, first):
            raise SystemExit(f"simdino_eval.py: {label} takes other inputs (mean, std or size) than the first encoder")
    data = load_data(data_config, next(iter(models.values())), limit=None)
    if why := unscorable(data):
        raise SystemExit(f"simdino_eval.py: {data.name}: {why}; score it on data of several classes")
    results = {}
    for label, model in models.items():
        results[label] = {"model": type(model).__name__, **frozen_feature_scores(model, data)}
        print(f"{label}: {results[label]}", flush=True)
    saved = {
        "command": " ".join(["python", "-m", "benchmarks.simdino_eval", *sys.argv[1:]]),
        "minutes": (time.perf_counter() - start) / 60,
        "date": time.strftime("%Y-%m-%d"),
        "data": data.name,
        "train_images": len(data.train_images),
        "val_images": len(data.val_images),
        "knn": {"k": knn_k(len(data.train_images)), "temperature": KNN_TEMPERATURE},
        "results": results,
    }
    if args.out is None:
        print(markdown(saved))
        return
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(saved, indent=1) + "\n")
    out.write_text(markdown(saved))
    print(f"written to {out} and {out.with_suffix('.json').name}")


# what trained a run's checkpoint, by the module that wrote it: an encoder's row says how it learned
TRAINED_BY = {"SelfDistillation": "SimDINO", "MaskedAutoencoder": "masked pretraining", "ImageClassifier": "supervised"}


def _recorded_name(path: str) -> tuple[str, str]:
    """The architecture a file records, and what trained it: the module that wrote a run's checkpoint; for an
    exported file, SimDINO where it is an encoder (the only runs ``crate.export`` writes without a classifier)."""
    from crate.models.checkpoint import read_checkpoint
    from crate.run import module_kind

    held = read_checkpoint(path)
    if held.model_name is None:
        raise SystemExit(f"simdino_eval.py: {path} records no model name; give a run's checkpoint or an exported file")
    kind = module_kind(held) or ("SelfDistillation" if held.hparams.get("num_classes") == 0 else "ImageClassifier")
    return held.model_name, TRAINED_BY.get(kind, kind)


if __name__ == "__main__":
    from crate.models import CheckpointError

    np.set_printoptions(precision=4)
    try:
        main()
    except (CheckpointError, FileNotFoundError) as err:  # a missing, corrupt or foreign file: one line, status 2
        sys.stderr.write(f"simdino_eval.py: {err}\n")
        raise SystemExit(2) from None
