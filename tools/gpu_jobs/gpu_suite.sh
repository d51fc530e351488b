#!/usr/bin/env bash
# Everything a GPU window should run for the zoo, prepared (tools/gpu_jobs/gpu_suite.py says what and writes
# gpu_<device>.json): run it from the repository root on the GPU machine, within about 9 minutes.
#
#   tools/gpu_jobs/gpu_suite.sh [--out DIR]     # on the GPU machine ($OUT by default when it is set)
#   tools/gpu_jobs/gpu_suite.sh --dry-run       # here: the same steps on the CPU with tiny limits
#   tools/gpu_jobs/gpu_suite.sh --task simdino  # SimDINO and its CRATE-MAE control instead (tools/gpu_jobs/gpu_simdino.py)
#   tools/gpu_jobs/gpu_suite.sh --next [--time-left S]   # the GPU queue's next jobs (tools/gpu_jobs/gpu_queue.yaml)
#   ... --next --window-s S --max-files N --max-file-mib M  # the lending machine's limits (default 480, 8, 16):
#                                                           # the longest job, the files that come back, their size
#   tools/gpu_jobs/gpu_suite.sh --next --dry-run         # the same jobs here, on the CPU with tiny limits
#   ... --next --jobs NAME [NAME ...]                     # only the named jobs, done or not
#
# The GPU machine's Python has torch, torchvision, lightning, timm and torchmetrics but not jsonargparse,
# docstring_parser or typeshed_client: `make gpu-carry` puts their wheels and the lock's timm into .whl/ and
# the CIFAR-10 archive into .gpu/ (both git-ignored); carry both (run's carry: [".whl", ".gpu"]). The wheels
# are installed into /tmp/site, first on the path; the repository itself is imported from the working tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
dry=()
task=crate_micro
next=0
time_left=480
limits=()
out="${OUT:-benchmarks/results}"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=(--dry-run); out="${OUT_DRY:-$(mktemp -d)}" ;;
    --out) out="$2"; shift ;;
    --task) task="$2"; shift ;;
    --next) next=1 ;;
    --time-left) time_left="$2"; shift ;;
    --window-s|--max-files|--max-file-mib) limits+=("$1" "$2"); shift ;;
    --jobs) limits+=("$1"); while [ $# -gt 1 ] && [ "${2#--}" = "$2" ]; do limits+=("$2"); shift; done ;;
    *) echo "gpu_suite.sh: unknown argument $1 (use --next, --jobs NAME..., --time-left S, --window-s S, --max-files N, --max-file-mib M, --dry-run, --out DIR or --task crate_micro|simdino)" >&2; exit 2 ;;
  esac
  shift
done
python=python3
[ -x .venv/bin/python ] && [ ${#dry[@]} -gt 0 ] && python=.venv/bin/python
if [ ${#dry[@]} -eq 0 ] && ! "$python" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  echo "gpu_suite.sh: no CUDA device that $python's torch can use; run it on a GPU machine, or with --dry-run here" >&2
  exit 2
fi
if [ -d .whl ] && [ ${#dry[@]} -eq 0 ]; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
# the repository (crate and the benchmarks package the jobs reuse) and the runner's own modules
export PYTHONPATH="$PWD:$PWD/tools/gpu_jobs${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [ ${#dry[@]} -gt 0 ]; then
  data="$out/images"  # a tiny image folder in CIFAR-10's layout
  "$python" -c "import sys; from benchmarks.common import write_image_folder as w; w(sys.argv[1], ('cat', 'dog'), 24, val_per_class=8, size=32, gray=False)" "$data"
else
  data=data/cifar10
  if [ ! -d "$data/train" ]; then
    archive="${CIFAR10_TAR:-.gpu/cifar10-trainval.tar.gz}"
    [ -f "$archive" ] || { echo "gpu_suite.sh: no CIFAR-10 archive at $archive (make gpu-carry, then carry .gpu)" >&2; exit 2; }
    mkdir -p data && tar -xzf "$archive" -C data
  fi
fi
if [ "$next" = 1 ]; then
  exec "$python" tools/gpu_jobs/gpu_queue.py --next --time-left "$time_left" "${limits[@]}" "${dry[@]}" --data "$data" --out "$out"
fi
case "$task" in
  crate_micro) "$python" tools/gpu_jobs/gpu_suite.py "${dry[@]}" --data "$data" --out "$out" ;;
  simdino) "$python" tools/gpu_jobs/gpu_simdino.py "${dry[@]}" --data "$data" --out "$out" ;;
  *) echo "gpu_suite.sh: unknown task $task (crate_micro or simdino)" >&2; exit 2 ;;
esac
