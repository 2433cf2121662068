#!/usr/bin/env bash
# Quick start, step 1: install what is missing (as root), build MOSS-JIT and
# run the main job.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/scripts/common.sh"
moss_build
moss_install_python
moss_log "running the main job: moss-jit demo"
"$MOSS_BUILD_DIR/bin/moss-jit" demo
