#!/usr/bin/env bash
# The layer-objective term's trade-off: crate_nano at --model.objective_weight W for each W in $WEIGHTS, with
# weight snapshots, each run measured along training beside its controls (benchmarks/along_training.py: R, R^c,
# R - R^c and alignment per layer, the ISTA step on its LASSO objective). TASK picks the data:
#   digits (default)  the default job (configs/crate_nano_digits.yaml: 150 epochs at 16 px); WEIGHTS "0 0.1 1"
#   cifar10_10k       the base CIFAR-10 recipe (configs/cifar10.yaml) on the 10,000 / 2,000-image subset
#                     (data/cifar10_10k: benchmarks/cifar10_subset.py), 50 epochs; WEIGHTS "0 0.001 0.01"
# IMAGES sets --model.objective_images (how many images of each batch the term reads; the runs' names gain
# _images<N>). Writes docs/along_training/crate_nano_<TASK>_objective_<W>.{md,json,png} (W with p for its decimal
# point: 0p01); a run stopped part-way resumes from its last checkpoint. Then benchmarks/objective_tradeoff.py collects
# the tables (docs/objective_tradeoff.md).
set -euo pipefail
cd "$(dirname "$0")/.."
TASK=${TASK:-digits}
case $TASK in
  digits)
    WEIGHTS=${WEIGHTS:-"0 0.1 1"}
    train=(--config configs/crate_nano_digits.yaml)
    measure=(--images 64 --probe-images 360 --every 2) ;;
  cifar10_10k)
    WEIGHTS=${WEIGHTS:-"0 0.001 0.01"}
    train=(--config configs/cifar10.yaml --model.model_name crate_nano_patch4_32 --data.root data/cifar10_10k
      --trainer.max_epochs 50)
    measure=(--images 64 --probe-images 1000 --every 1) ;;
  *) echo "objective_tradeoff.sh: unknown TASK $TASK (digits or cifar10_10k)" >&2; exit 2 ;;
esac
images=()
[ -n "${IMAGES:-}" ] && images=(--model.objective_images "$IMAGES")
for w in $WEIGHTS; do
  name=crate_nano_${TASK}_objective_${w//./p}${IMAGES:+_images$IMAGES}
  run=logs/objective/$name/version_0
  if [ ! -f "$run/done" ]; then
    resume=()
    [ -f "$run/checkpoints/last.ckpt" ] && resume=(--ckpt_path "$run/checkpoints/last.ckpt")
    .venv/bin/python train.py fit "${train[@]}" --model.objective_weight "$w" "${images[@]}" --snapshots.enabled true \
      --run_name "$name" --log_root logs/objective --trainer.enable_progress_bar false "${resume[@]}"
    date > "$run/done"
  fi
  .venv/bin/python -m benchmarks.along_training "$run" --out "docs/along_training/$name" "${measure[@]}"
done
