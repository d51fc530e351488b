#!/usr/bin/env bash
# Moved to tools/gpu_jobs/gpu_suite.sh (the time-boxed GPU job runner); this forwards every argument to it.
exec "$(dirname "$0")/../tools/gpu_jobs/gpu_suite.sh" "$@"
