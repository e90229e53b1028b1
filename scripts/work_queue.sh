#!/usr/bin/env bash
# A worker for long studies: runs experiment configs in order with one torch thread each,
# and moves on to the next config once every run of one is finished or claimed by another
# worker (runs are claimed, resumable and skipped when finished: python -m mtdnn.experiment).
# Start one per core, e.g.
#   nohup scripts/work_queue.sh experiments/smart_calibration.yaml \
#       experiments/finetune_length.yaml > runs/worker1.log 2>&1 &
# An entry may carry the experiment's key=value overrides after the config, quoted as one:
#   scripts/work_queue.sh "experiments/smart_calibration.yaml arms.eps1e-5_l1.tasks=[scitail]"
# STOP_BY=HH:MM (the next such time when the queue starts; or an ISO date-time) starts no
# run that is not expected to finish by then
# (--stop-by: judged by finished runs like it), e.g. a session's end, which may take the
# run folders with it:
#   STOP_BY=11:05 nohup scripts/work_queue.sh ... &
# Publish from a checkout with: python -m mtdnn.experiment --config X --report-only --publish
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
set -f  # overrides such as tasks=[scitail] are not file patterns
stop=()
if [ -n "${STOP_BY:-}" ]; then
    # pinned once: HH:MM means the next such time, which for an entry started after it
    # would be the next day's
    at=$(.venv/bin/python -c 'import sys
from mtdnn.errors import MtdnnError
from mtdnn.experiment.schedule import parse_stop_by
try:
    print(parse_stop_by(sys.argv[1]).isoformat())
except MtdnnError as error:
    sys.exit(f"STOP_BY: {error}")' "$STOP_BY") || exit 2
    stop=(--stop-by "$at")
fi
for entry in "$@"; do
    read -r -a words <<< "$entry"
    echo "== $(date -u +%FT%TZ) $entry"
    .venv/bin/python -m mtdnn.experiment "${stop[@]}" --config "${words[@]}" || echo "== failed: $entry"
done
echo "== $(date -u +%FT%TZ) queue done"
