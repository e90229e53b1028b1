#!/usr/bin/env bash
# A worker for long studies: runs experiment configs in order with one torch thread each,
# and moves on to the next config once every run of one is finished or claimed by another
# worker (runs are claimed, resumable and skipped when finished: python -m mtdnn.experiment).
# Start one per core, e.g.
#   nohup scripts/work_queue.sh experiments/smart_calibration.yaml \
#       experiments/finetune_length.yaml > runs/worker1.log 2>&1 &
# Publish from a checkout with: python -m mtdnn.experiment --config X --report-only --publish
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
for config in "$@"; do
    echo "== $(date -u +%FT%TZ) $config"
    .venv/bin/python -m mtdnn.experiment --config "$config" || echo "== failed: $config"
done
echo "== $(date -u +%FT%TZ) queue done"
