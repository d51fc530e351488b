"""k-NN and linear-probe accuracy of self-supervised encoders beside their controls, on a data set's val split.

    .venv/bin/python benchmarks/simdino_eval.py --encoder RUN/checkpoints/last.ckpt --mae MAE_RUN/checkpoints/last.ckpt

For the encoder (a SimDINO run's checkpoint, or an exported file / pretrained tag with ``--model``), the same
architecture at the initialisation its training started from (seed 0: the random-init control) and, where
given, a CRATE-MAE encoder (the masked-pretraining control): each image's pooled feature (the model with no
classifier, on the evaluation transform of the data its run trained on), then DINO's weighted k-NN (k 20,
temperature 0.07; bank: every training image) and a logistic-regression probe on the standardised features
(crate.interpret.evaluate.linear_probe), both scored on every validation image. The JSON keeps every number.
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
from crate.interpret.controls import initialised
from crate.interpret.frozen_features import KNN_K, KNN_TEMPERATURE, frozen_feature_scores
from crate.interpret.loading import load_data, load_run


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
            f" {saved['val_images']} validation images (scored). Weighted k-NN with k {KNN_K} and temperature"
            f" {KNN_TEMPERATURE} on the pooled features; the probe is a logistic regression on standardised features.",
            "",
            "| encoder | model | k-NN top-1 | linear probe top-1 |",
            "|---|---|---|---|",
            *rows,
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--encoder", required=True, help="the SimDINO checkpoint (or exported file)")
    parser.add_argument("--model", default=None, help="its model name, where the file does not record it")
    parser.add_argument("--mae", default=None, help="a CRATE-MAE checkpoint: the masked-pretraining control")
    parser.add_argument("--out", default="docs/simdino_cifar10.md")
    args = parser.parse_args()
    start = time.perf_counter()
    encoder, data_config = load_run(args.model or _recorded_name(args.encoder), args.encoder)
    if data_config is None:
        raise SystemExit(f"simdino_eval.py: {args.encoder} records no data config; evaluate a checkpoint of a run")
    data = load_data(data_config, encoder, limit=None)
    models = {"SimDINO": encoder, "random init": initialised(encoder, 0)}
    if args.mae:
        models["CRATE-MAE"] = load_run(_recorded_name(args.mae), args.mae)[0]
        ours, theirs = encoder.pretrained_cfg, models["CRATE-MAE"].pretrained_cfg
        if (ours.get("mean"), ours.get("std")) != (theirs.get("mean"), theirs.get("std")):
            raise SystemExit("simdino_eval.py: the two encoders normalise images differently; score them apart")
    results = {}
    for label, model in models.items():
        results[label] = {"model": type(model).__name__, **frozen_feature_scores(model, data)}
        print(f"{label}: {results[label]}", flush=True)
    saved = {
        "command": " ".join(["python", "benchmarks/simdino_eval.py", *sys.argv[1:]]),
        "minutes": (time.perf_counter() - start) / 60,
        "date": time.strftime("%Y-%m-%d"),
        "data": data.name,
        "train_images": len(data.train_images),
        "val_images": len(data.val_images),
        "knn": {"k": KNN_K, "temperature": KNN_TEMPERATURE},
        "results": results,
    }
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(saved, indent=1) + "\n")
    out.write_text(markdown(saved))
    print(f"written to {out} and {out.with_suffix('.json').name}")


def _recorded_name(path: str) -> str:
    from crate.models.checkpoint import read_checkpoint

    name = read_checkpoint(path).model_name
    if name is None:
        raise SystemExit(f"simdino_eval.py: {path} records no model name; give --model")
    return name


if __name__ == "__main__":
    from crate.models import CheckpointError

    np.set_printoptions(precision=4)
    try:
        main()
    except (CheckpointError, FileNotFoundError) as err:  # a missing, corrupt or foreign file: one line, status 2
        sys.stderr.write(f"simdino_eval.py: {err}\n")
        raise SystemExit(2) from None
