#!/usr/bin/env bash
# The layer-objective term's trade-off on the digits: the default job (crate_nano, 150 epochs at 16 px) at
# --model.objective_weight W for each W in $WEIGHTS, with weight snapshots, each run measured along training
# beside its controls (benchmarks/along_training.py: R, R^c, R - R^c and alignment per layer, the ISTA step on
# its LASSO objective). Writes docs/along_training/crate_nano_digits_objective_<W>.{md,json,png} (W with p for
# its decimal point: 0p01); then
# benchmarks/objective_tradeoff.py collects the table (docs/objective_tradeoff.md).
set -euo pipefail
cd "$(dirname "$0")/.."
WEIGHTS=${WEIGHTS:-"0 0.1 1"}
for w in $WEIGHTS; do
  name=crate_nano_digits_objective_${w//./p}
  if [ ! -f "logs/objective/$name/version_0/checkpoints/last.ckpt" ]; then
    .venv/bin/python train.py fit --config configs/crate_nano_digits.yaml --model.objective_weight "$w" \
      --snapshots.enabled true --run_name "$name" --log_root logs/objective --trainer.enable_progress_bar false
  fi
  .venv/bin/python benchmarks/along_training.py "logs/objective/$name/version_0" \
    --out "docs/along_training/$name" --images 64 --probe-images 360 --every 2
done
