#!/usr/bin/env bash
# Quick start, step 2: build MOSS-JIT and run every test (lit and GoogleTest,
# through ctest), then the fuzz targets for 30 s each (tools/scripts/fuzz.sh,
# in their own instrumented build). GPU tests skip with a reason on machines
# without a GPU.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/scripts/common.sh"
moss_build
moss_find_nvdisasm
moss_log "running the tests"
ctest --test-dir "$MOSS_BUILD_DIR" --output-on-failure -j "$(nproc)"
# Why tests skipped: GoogleTest prints the reason on the line after
# "FILE:LINE: Skipped"; each distinct reason once, with its count.
skips="$MOSS_BUILD_DIR/Testing/Temporary/LastTest.log"
if [ -f "$skips" ]; then
  { grep -A1 ': Skipped$' "$skips" || true; } |
    grep -v -e ': Skipped$' -e '^--$' | sort | uniq -c | sort -rn |
    while read -r count reason; do
      moss_log "skipped $count test(s): $reason"
    done || true
fi
moss_log "fuzzing"
bash "$MOSS_ROOT/tools/scripts/fuzz.sh"
