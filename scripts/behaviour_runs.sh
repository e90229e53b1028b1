#!/usr/bin/env bash
# The two 8-step runs whose metrics.jsonl a refactor must leave byte-identical (SMART in
# fp32, plain in bf16; RTE + MRPC, 48 rows each, a 2-layer packaged encoder):
#   scripts/behaviour_runs.sh <checkout> <out> [data folder, default data]
#   cmp <out before>/smart_fp32/metrics.jsonl <out after>/smart_fp32/metrics.jsonl
# <checkout> is the tree whose code runs (a worktree at the commit to compare), through this
# environment's Python (.venv of the checkout this script is in).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
code="$(cd "$1" && pwd)"; out="$2"; data="$(cd "${3:-$here/data}" && pwd)"
mkdir -p "$out"; out="$(cd "$out" && pwd)"
export PYTHONPATH="$code" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
head -48 "$data/rte/train.jsonl" > "$out/rte.jsonl"
head -48 "$data/mrpc/train.jsonl" > "$out/mrpc.jsonl"
common=("tasks=[rte,mrpc]" "tasks.rte.train=$out/rte.jsonl" "tasks.rte.dev=$out/rte.jsonl"
        "tasks.mrpc.train=$out/mrpc.jsonl" "tasks.mrpc.dev=$out/mrpc.jsonl" encoder_layers=2
        batch_size=8 max_steps=8 eval_every_steps=4 progress_bar=false "cache_dir=$out/cache")
cd "$code"
"$here/.venv/bin/python" train.py "${common[@]}" precision=fp32 smart.enabled=true \
    "output_dir=$out/smart_fp32" > "$out/smart.log" 2>&1
"$here/.venv/bin/python" train.py "${common[@]}" precision=bf16 "output_dir=$out/plain_bf16" \
    > "$out/plain.log" 2>&1
echo "metrics: $out/smart_fp32/metrics.jsonl $out/plain_bf16/metrics.jsonl"
