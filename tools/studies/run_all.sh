#!/usr/bin/env bash
# Regenerates the tables and the figure of docs/NUMERICS.md.
# usage: run_all.sh MOSS_JIT PYTHON OUT_DIR
set -euo pipefail
moss_jit=$(realpath "$1")
python=$2
out=$3
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mkdir -p "$out"
export HF_HUB_OFFLINE=1

"$python" "$here/capture_activations.py" --out "$out/acts"
"$python" "$here/snr_study.py" --moss-jit "$moss_jit" --acts "$out/acts" \
  --csv "$out/snr-all.csv" > "$out/snr-tables.md"
"$python" "$here/finetune_autoscale.py" --out "$out/finetune" --steps 600
"$python" "$here/autoscale_study.py" --moss-jit "$moss_jit" \
  --run "$out/finetune" --plot "$repo/docs/numerics-autoscale.png" \
  > "$out/autoscale-tables.md"
echo "tables: $out/snr-tables.md $out/autoscale-tables.md"
