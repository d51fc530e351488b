#!/usr/bin/env bash
# CPU trials of the convolutional tokenizer and sequence pooling against the patch-4 class-token members at
# matched parameters, on a reduced CIFAR-10 (data/cifar10_10k: 1,000 / 200 images a class, written by
# benchmarks/cifar10_subset.py), 50 epochs of the base CIFAR-10 recipe (configs/cifar10.yaml), bf16, one
# thread each. Each run resumes from its last checkpoint when started again. Results: logs/trials/<name>/.
# TRIALS picks them (default: the four tokenizer trials); crate_cct_lr2e3 and crate_cct_no_policy try two recipe
# parts on crate_cct4_3x2_32 (twice the learning rate; crop and flip without the policy); crate_cct_lr2e3_no_policy
# both at once; crate_cct_lr2e3_wd002 and crate_cct_lr2e3_wd01 weight decay 0.02 and 0.1 at lr 2e-3;
# crate_cct_lr3e3 and crate_cct_lr4e3 learning rates above 2e-3 (and *_seed1 a second seed of 2e-3 and 3e-3);
# crate_cct_lr2e3_depth12 and crate_cct_lr2e3_width152 spend the rest of a 0.7 M budget on depth or width (and
# *_width152_seed1 a second seed of the latter); crate_cct_lr2e3_fp32 repeats crate_cct_lr2e3 in fp32 (within
# 1 point of bf16, so on a CPU without bf16 instructions a trial runs in fp32: --trainer.precision 32-true) and
# crate_cct_lr2e3_re025_fp32 adds random erasing to it, crate_cct_lr2e3_mix_fp32 Mixup and CutMix,
# crate_cct_lr2e3_dp01_fp32 stochastic depth 0.1, crate_cct_lr2e3_warm2_fp32 a 2-epoch warm-up instead of 5;
# crate_alpha_cct and cbt_cct the tokenizer members of CRATE-alpha and CBT on the base recipe
# (crate_alpha_cct_lr2e3: CRATE-alpha's at lr 2e-3, *_seed1 its second seed); crate_cct_lr2e3_policy35 the policy
# for the first 35 epochs only; crate_alpha_cct_lr2e3_depth4 and crate_alpha_cct_lr2e3_width152 spend the rest of
# a 0.7 M budget on CRATE-alpha's depth or width; crate_alpha_cct_lr2e3_ema adds a moving average of the weights
# (ema_decay 0.999, a cap the warm-up never reaches in 3,950 steps: the decay ends at 0.996, about 3 epochs) and
# crate_alpha_cct_lr2e3_bs64 halves the batch (twice the steps an epoch, the same rate); crate_alpha_cct_lr3e3
# and *_seed1 try lr 3e-3 on it at both seeds; crate_alpha_cct_lr2e3_ls0 drops label smoothing and
# crate_alpha_cct_lr2e3_policy05 puts half of the images through the policy; crate_alpha_cct_lr3e3_bs64 and
# *_seed1 stack the two levers that leaned ahead (lr 3e-3, batch 64), at both seeds;
# crate_alpha_cct_lr2e3_heads4 and *_heads8 cut the width into 4 or 8 subspaces of 32 or 16 instead of 2 of 64
# (the same parameters and about the same cost); crate_alpha_cct_lr2e3_step02 doubles the ISTA step size and
# crate_alpha_cct_lr2e3_lambd1 sets the sparsity weight ten times higher, *_lambd1_seed1 at the other seed and
# crate_alpha_cct_lr3e3_bs64_lambd1 on top of lr 3e-3 at batch 64, *_lambd1_seed1 that stack at the other seed;
# crate_cct_full trains on all of CIFAR-10's training split (data/cifar10) for as long as the
# CPU is given, resuming from its last checkpoint each time it is started; crate_cct_w152_full does the same for
# crate_cct4_3x2_w152_32, crate_alpha_cct_full for crate_alpha_cct4_3x2_32 at lr 2e-3,
# crate_alpha_cct_lr3e3_bs64_lambd1_full for it on the stack of lr 3e-3, batch 64 and sparsity weight 1.0,
# crate_alpha_cct_full_cycle2 gives its shipped weights a second cosine cycle of 40 epochs at lr 5e-4, and
# crate_alpha_cct_mix_full trains it with CCT's Mixup, CutMix and random erasing on all of CIFAR-10, and
# vit_cct_full trains its ViT twin vit_cct4_3x2_32 on crate_alpha_cct_full's recipe.
# logs/ stays on one machine, so a run's folder is kept in the repository from one machine to the next:
# `benchmarks/tokenizer_trials.sh keep [NAME]` (after stopping it with SIGTERM or Ctrl-C, which saves a
# checkpoint) copies the folder's last and best checkpoints and its logs into benchmarks/results/cpu_runs/NAME/
# (NAME: crate_cct_full unless given), and the next start restores them into logs/ when logs/ has none. Once a run
# has finished, `keep` keeps its logs and its done mark only (crate_cct_full's weights ship as
# checkpoints/crate_cct4_3x2_32.cifar10.safetensors, crate_cct_w152_full's as
# checkpoints/crate_cct4_3x2_w152_32.cifar10.safetensors, crate_alpha_cct_full's as
# checkpoints/crate_alpha_cct4_3x2_32.cifar10.safetensors, crate_alpha_cct_lr3e3_bs64_lambd1_full's as
# checkpoints/crate_alpha_cct4_3x2_32.cifar10_lambd1.safetensors, vit_cct_full's as
# checkpoints/vit_cct4_3x2_32.cifar10.safetensors; crate_alpha_cct_mix_full's did not ship), and a start says it is
# done.
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS=${EPOCHS:-50}
KEPT=benchmarks/results/cpu_runs
if [ "${1:-}" = keep ]; then
  name=${2:-crate_cct_full}
  dir=logs/trials/$name/version_0
  [ -f "$dir/checkpoints/last.ckpt" ] || { echo "no run to keep in $dir" >&2; exit 2; }
  rm -rf "${KEPT:?}/$name"; mkdir -p "$KEPT/$name"
  cp "$dir"/config.yaml "$dir"/hparams.yaml "$dir"/metrics.csv "$dir"/events.out.tfevents.* "$KEPT/$name/"
  if [ -f "$dir/done" ]; then  # finished: its records and the mark that it is done; no checkpoint to resume from
    cp "$dir/done" "$KEPT/$name/"
    echo "kept the finished run's $(tail -n +2 "$dir/metrics.csv" | grep -c . || true) logged rows"; exit 0
  fi
  mkdir "$KEPT/$name/checkpoints"
  cp -P "$dir"/checkpoints/last.ckpt "$KEPT/$name/checkpoints/"  # the link, and the files below
  cp "$(readlink -f "$dir/checkpoints/last.ckpt")" "$dir"/checkpoints/best-*.ckpt "$KEPT/$name/checkpoints/"
  echo "kept $(tail -n +2 "$dir/metrics.csv" | grep -c . || true) logged rows and $(ls "$KEPT/$name/checkpoints")"
  exit 0
fi
run() {
  local name=$1; shift
  local dir=logs/trials/$name/version_0
  if [ ! -e "$dir" ] && [ -d "$KEPT/$name" ]; then mkdir -p "$(dirname "$dir")"; cp -a "$KEPT/$name" "$dir"; fi
  if [ -f "$dir/metrics.csv" ] && grep -q "^" "$dir/done" 2>/dev/null; then echo "$name done"; return; fi
  local resume=()
  [ -f "$dir/checkpoints/last.ckpt" ] && resume=(--ckpt_path "$dir/checkpoints/last.ckpt")
  .venv/bin/python train.py fit --config configs/cifar10.yaml --data.root data/cifar10_10k \
    --trainer.max_epochs "$EPOCHS" --log_root logs/trials --run_name "$name" "$@" "${resume[@]}"
  date > "$dir/done"
}
cct() { run "$trial" --model.model_name crate_cct4_3x2_32 "$@"; }  # crate_cct4_3x2_32 with the settings given
for trial in ${TRIALS:-crate_cct crate_patch vit_cct vit_patch}; do
  case $trial in
    crate_cct) cct ;;
    crate_patch) run "$trial" --model.model_name crate_nano_patch4_32 \
      --model.model_kwargs '{embed_dim: 128, depth: 9, num_heads: 2}' ;;
    vit_cct) run "$trial" --model.model_name vit_cct4_3x2_32 ;;
    vit_patch) run "$trial" --model.model_name vit_nano_patch4_32 \
      --model.model_kwargs '{embed_dim: 136, depth: 4, num_heads: 2, mlp_ratio: 1.0, qkv_bias: false}' ;;
    # recipe parts for the tokenizer member (all four above underfit: train accuracy on augmented batches below val)
    crate_cct_lr2e3) cct --model.lr 2e-3 ;;
    crate_cct_no_policy) cct --data.init_args.augmentation.policy_prob 0.0 ;;
    crate_cct_lr2e3_no_policy) cct --model.lr 2e-3 --data.init_args.augmentation.policy_prob 0.0 ;;
    # weight decay around the recipe's 0.05 at the learning rate that paid (CCT's own recipes use 0.06 and 0.03)
    crate_cct_lr2e3_wd002) cct --model.lr 2e-3 --model.weight_decay 0.02 ;;
    crate_cct_lr2e3_wd01) cct --model.lr 2e-3 --model.weight_decay 0.1 ;;
    # learning rates above the 2e-3 that paid (crate_cct_lr2e3 was still rising at its end)
    crate_cct_lr3e3) cct --model.lr 3e-3 ;;
    crate_cct_lr4e3) cct --model.lr 4e-3 ;;
    # a second seed (weights, order and augmentation) of 2e-3 and 3e-3: how far two runs of one recipe differ
    crate_cct_lr2e3_seed1) cct --model.lr 2e-3 --seed_everything 1 --data.init_args.seed 1 ;;
    crate_cct_lr3e3_seed1) cct --model.lr 3e-3 --seed_everything 1 --data.init_args.seed 1 ;;
    # the rest of a 0.7 M parameter budget (the 483,659 of crate_cct4_3x2_32 underfit): 12 layers (682,827) or
    # width 152 with 2 heads of 76 (661,571), both at lr 2e-3
    crate_cct_lr2e3_depth12) cct --model.lr 2e-3 --model.model_kwargs '{depth: 12}' ;;
    crate_cct_lr2e3_width152) cct --model.lr 2e-3 --model.model_kwargs '{embed_dim: 152}' ;;
    crate_cct_lr2e3_width152_seed1) cct --model.lr 2e-3 --model.model_kwargs '{embed_dim: 152}' --seed_everything 1 \
      --data.init_args.seed 1 ;;
    # fp32 on CPUs without bf16 instructions (where bf16 is emulated and about twice as slow): crate_cct_lr2e3 in fp32,
    # and random erasing (CCT's 0.25, timm's const mode) on it, the one recipe part of CCT's not yet tried here
    crate_cct_lr2e3_fp32) cct --model.lr 2e-3 --trainer.precision 32-true ;;
    crate_cct_lr2e3_re025_fp32) cct --model.lr 2e-3 --trainer.precision 32-true \
      --data.init_args.augmentation.re_prob 0.25 ;;
    # and Mixup 0.8 / CutMix 1.0 on it for the first 29 of the 50 epochs (CCT switches them off at 175 of 300):
    # the reduced-scale reading of the GPU queue's crate_cct4_200_epochs_cct_mixing
    crate_cct_lr2e3_mix_fp32) cct --model.lr 2e-3 --trainer.precision 32-true \
      --data.init_args.mixing.mixup_alpha 0.8 --data.init_args.mixing.cutmix_alpha 1.0 --data.init_args.mixing.epochs 29 ;;
    # stochastic depth 0.1 (CCT's models' default), and a warm-up of 2 of the 50 epochs instead of 5 (CCT warms up
    # for 10 of 300: 1.7 of 50)
    crate_cct_lr2e3_dp01_fp32) cct --model.lr 2e-3 --trainer.precision 32-true --model.drop_path_rate 0.1 ;;
    crate_cct_lr2e3_warm2_fp32) cct --model.lr 2e-3 --trainer.precision 32-true --model.warmup_epochs 2 ;;
    # CRATE-alpha's and CBT's layers on the same tokenizer and pooling (matched to CCT-4/3x2's count)
    crate_alpha_cct) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 ;;
    cbt_cct) run "$trial" --model.model_name cbt_cct4_3x2_32 ;;
    # the same at the learning rate that paid for crate_cct (2e-3); and crate_cct at 2e-3 with the policy for the
    # first 35 of the 50 epochs only (without it: +2.3 val points but overfitting; with it: underfitting)
    crate_alpha_cct_lr2e3) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 2e-3 ;;
    crate_alpha_cct_lr2e3_seed1) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 2e-3 \
      --seed_everything 1 --data.init_args.seed 1 ;;
    # the rest of a 0.7 M budget on CRATE-alpha's layers: a fourth layer (611,659) or width 152 (657,315)
    crate_alpha_cct_lr2e3_depth4) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 2e-3 \
      --model.model_kwargs '{depth: 4}' ;;
    crate_alpha_cct_lr2e3_width152) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 2e-3 \
      --model.model_kwargs '{embed_dim: 152}' ;;
    # two more levers for CRATE-alpha's member, which still underfits: a moving average of the weights (validated
    # and exported) and twice the optimizer steps at the same epochs; either goes on to all of CIFAR-10 only at val
    # 0.7523 or more, two points over crate_alpha_cct_lr2e3's two-seed mean (0.7323)
    crate_alpha_cct_lr2e3_ema) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 2e-3 \
      --model.ema_decay 0.999 ;;
    crate_alpha_cct_lr2e3_bs64) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 2e-3 \
      --data.init_args.batch_size 64 ;;
    # the rate above 2e-3 that came closest for crate_cct (3e-3: +1.1 over 2e-3 on the two-seed mean), at both seeds;
    # it goes on to all of CIFAR-10 only if their mean reaches 0.7523, two points over 2e-3's two-seed mean (0.7323)
    crate_alpha_cct_lr3e3) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 3e-3 ;;
    crate_alpha_cct_lr3e3_seed1) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 3e-3 \
      --seed_everything 1 --data.init_args.seed 1 ;;
    # two parts of the recipe that make its training batches harder, for a member that still underfits at 200 epochs
    # on all of CIFAR-10 (train accuracy on augmented batches 0.875 against val 0.885): no label smoothing, and the
    # policy on half of the images; the same bar, 0.7523 or more
    crate_alpha_cct_lr2e3_ls0) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 2e-3 \
      --model.label_smoothing 0.0 ;;
    crate_alpha_cct_lr2e3_policy05) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 2e-3 \
      --data.init_args.augmentation.policy_prob 0.5 ;;
    # the two levers that leaned ahead by less than the bar, together; on all of CIFAR-10 only if their two-seed
    # mean reaches 0.7523
    crate_alpha_cct_lr3e3_bs64) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 3e-3 \
      --data.init_args.batch_size 64 ;;
    crate_alpha_cct_lr3e3_bs64_seed1) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 3e-3 \
      --data.init_args.batch_size 64 --seed_everything 1 --data.init_args.seed 1 ;;
    # more subspaces for MSSA to compress against, at the same width: 4 heads of 32 or 8 of 16 instead of 2 of 64
    # (the same 480,075 parameters); on all of CIFAR-10 only at val 0.7523 or more
    crate_alpha_cct_lr2e3_heads4) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 2e-3 \
      --model.model_kwargs '{num_heads: 4}' ;;
    crate_alpha_cct_lr2e3_heads8) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 2e-3 \
      --model.model_kwargs '{num_heads: 8}' ;;
    # the ISTA step itself, at the same 480,075 parameters: twice the step size (0.2), or ten times the sparsity
    # weight (1.0, a threshold of 0.1 in place of 0.01); on all of CIFAR-10 only at val 0.7523 or more
    crate_alpha_cct_lr2e3_step02) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 2e-3 \
      --model.model_kwargs '{step_size: 0.2}' ;;
    crate_alpha_cct_lr2e3_lambd1) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 2e-3 \
      --model.model_kwargs '{lambd: 1.0}' ;;
    # the sparsity weight 1.0 (which leaned ahead) at the other seed, and on top of lr 3e-3 at batch 64; on all of
    # CIFAR-10 only if lambd1's two-seed mean, or the stack's one run, reaches 0.7523
    crate_alpha_cct_lr2e3_lambd1_seed1) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 2e-3 \
      --model.model_kwargs '{lambd: 1.0}' --seed_everything 1 --data.init_args.seed 1 ;;
    crate_alpha_cct_lr3e3_bs64_lambd1) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 3e-3 \
      --data.init_args.batch_size 64 --model.model_kwargs '{lambd: 1.0}' ;;
    # the stack reached 0.7620 at seed 0: its other seed; the recipe of the next full and GPU runs only if the
    # two-seed mean reaches 0.7523
    crate_alpha_cct_lr3e3_bs64_lambd1_seed1) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 \
      --model.lr 3e-3 --data.init_args.batch_size 64 --model.model_kwargs '{lambd: 1.0}' \
      --seed_everything 1 --data.init_args.seed 1 ;;
    # the stack's two-seed mean reached 0.7563 (0.7620 and 0.7505): the same recipe on all 45,000 training images
    # for 200 epochs, resuming where it stopped; ships if it beats the shipped crate_alpha_cct4_3x2_32.cifar10 on val
    crate_alpha_cct_lr3e3_bs64_lambd1_full) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 3e-3 \
      --data.init_args.batch_size 64 --model.model_kwargs '{lambd: 1.0}' --data.root data/cifar10 \
      --trainer.max_epochs 200 ;;
    crate_cct_lr2e3_policy35) cct --model.lr 2e-3 --data.init_args.augmentation.policy_epochs 35 ;;
    # all 45,000 training images, 200 epochs at the learning rate that paid on the subset; resumes where it stopped
    crate_cct_full) cct --model.lr 2e-3 --data.root data/cifar10 --trainer.max_epochs 200 ;;
    crate_alpha_cct_full) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 2e-3 \
      --data.root data/cifar10 --trainer.max_epochs 200 ;;
    crate_cct_w152_full) run "$trial" --model.model_name crate_cct4_3x2_w152_32 --model.lr 2e-3 \
      --data.root data/cifar10 --trainer.max_epochs 200 ;;
    # a second cosine cycle for the shipped CRATE-alpha file (which still underfits after 200 epochs): 40 epochs from
    # its weights at a quarter of the first cycle's peak rate, 2 warm-up epochs, the same recipe otherwise
    crate_alpha_cct_full_cycle2) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 \
      --model.pretrained_file checkpoints/crate_alpha_cct4_3x2_32.cifar10.safetensors --model.lr 5e-4 \
      --model.warmup_epochs 2 --data.root data/cifar10 --trainer.max_epochs 40 ;;
    # CCT's regularising parts (Mixup 0.8 and CutMix 1.0 for the first 117 of the 200 epochs, random erasing 0.25:
    # configs/cifar10/gpu_window/cct_mixing.yaml) on the shipped CRATE-alpha recipe, on all of CIFAR-10, which the
    # reduced scale could not judge; resumes where it stopped; replaces the shipped crate_alpha_cct4_3x2_32.cifar10
    # only if its last weights, exported in float16, score 0.8906 or more on val (0.5 points over the file's 0.8856)
    crate_alpha_cct_mix_full) run "$trial" --model.model_name crate_alpha_cct4_3x2_32 --model.lr 2e-3 \
      --data.root data/cifar10 --trainer.max_epochs 200 --config configs/cifar10/gpu_window/cct_mixing.yaml ;;
    # the ViT twin on the shipped CRATE-alpha recipe (lr 2e-3, batch 128, 200 epochs, all of CIFAR-10): the shipped
    # vit_cct4_3x2_32.cifar10 comes from the one-GPU recipe at batch 512, so this is the same-recipe reading beside
    # crate_alpha_cct4_3x2_32.cifar10; resumes where it stopped; replaces the shipped vit_cct4_3x2_32.cifar10 only if
    # its last weights, exported in float16, score 0.8858 or more on val (0.5 points over the file's 0.8808)
    vit_cct_full) run "$trial" --model.model_name vit_cct4_3x2_32 --model.lr 2e-3 --data.root data/cifar10 \
      --trainer.max_epochs 200 ;;
    *) echo "unknown trial $trial" >&2; exit 2 ;;
  esac
done
