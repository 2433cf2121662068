#!/usr/bin/env bash
# The fuzzing step of the test command (tools/run-tests.sh runs it after
# ctest; docs/RELIABILITY.md lists the targets). Builds the libFuzzer targets
# of tests/fuzz with clang in an instrumented build ($MOSS_FUZZ_BUILD_DIR,
# default build-fuzz/), replays tests/fuzz/regressions/<target>/, then
# fuzzes each target for $MOSS_FUZZ_SECONDS seconds (default 30; 0 replays
# only) from seeds made of the lit tests' inputs. A crash, a sanitizer
# report, a leak, a broken check, an input slower than 10 s or a process
# above 2 GiB fails it, naming the target and the input that did it.
#
#   MOSS_FUZZ_TARGETS="NpyFuzzer ShapesFuzzer"   only these targets
#   MOSS_FUZZ_CXX=clang++-14                      the compiler (with libFuzzer)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

MOSS_FUZZ_BUILD_DIR="${MOSS_FUZZ_BUILD_DIR:-$MOSS_ROOT/build-fuzz}"
MOSS_FUZZ_SECONDS="${MOSS_FUZZ_SECONDS:-30}"
MOSS_FUZZ_TARGETS="${MOSS_FUZZ_TARGETS:-NpyFuzzer TuningDatabaseFuzzer ShapesFuzzer DialectFuzzer CApiFuzzer}"
FUZZ_SOURCE="$MOSS_ROOT/tests/fuzz"
WORK="$MOSS_FUZZ_BUILD_DIR/fuzz"

moss_fuzz_compilers() {
  local cxx="${MOSS_FUZZ_CXX:-}"
  if [ -z "$cxx" ]; then
    for cxx in clang++-14 clang++; do
      command -v "$cxx" >/dev/null && break
    done
  fi
  if ! command -v "$cxx" >/dev/null; then
    moss_log "error: no clang++ for the fuzz targets: install the Debian packages clang-14 and libclang-rt-14-dev"
    exit 1
  fi
  FUZZ_CXX="$cxx"
  FUZZ_CC="${cxx/clang++/clang}"
}

moss_fuzz_build() {
  moss_fuzz_compilers
  moss_log "configuring the fuzz targets in $MOSS_FUZZ_BUILD_DIR ($FUZZ_CXX)"
  cmake -G Ninja -S "$MOSS_ROOT" -B "$MOSS_FUZZ_BUILD_DIR" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$FUZZ_CC" \
    -DCMAKE_CXX_COMPILER="$FUZZ_CXX" -DMOSS_BUILD_FUZZERS=ON \
    -DMOSS_BUILD_TESTS=OFF -DCUDAToolkit_ROOT="$MOSS_CUDA_ROOT" >/dev/null
  moss_log "building the fuzz targets (instrumented: libFuzzer, ASan, UBSan)"
  cmake --build "$MOSS_FUZZ_BUILD_DIR" --target moss-fuzzers
}

# Seeds from the lit tests, remade on every run; the corpus directories keep
# what earlier runs in this build directory found.
moss_fuzz_seeds() {
  rm -rf "$WORK/seeds"
  mkdir -p "$WORK/seeds/CApiFuzzer"
  python3 "$FUZZ_SOURCE/make_seeds.py" "$MOSS_ROOT/tests/lit" "$WORK/seeds" >/dev/null
  MOSS_FUZZ_WRITE_SEEDS="$WORK/seeds/CApiFuzzer" \
    "$MOSS_FUZZ_BUILD_DIR/bin/CApiFuzzer" >/dev/null
}

# Reports the failure of `target` from its log and artifacts, then exits.
moss_fuzz_fail() {
  local target="$1" log="$2"
  tail -n 60 "$log" >&2
  moss_log "error: $target failed (full log: $log)"
  local input inputs=("$WORK/artifacts/$target"/*)
  if [ ! -e "${inputs[0]}" ]; then
    # A replayed regression input: the last one the target started.
    inputs=("$(sed -n 's/^Running: //p' "$log" | tail -n 1)")
  fi
  for input in "${inputs[@]}"; do
    [ -n "$input" ] || continue
    moss_log "error: $target: the failing input is $input"
    moss_log "  replay: $MOSS_FUZZ_BUILD_DIR/bin/$target $input"
    case "$input" in
      "$FUZZ_SOURCE"/*) ;;
      *) moss_log "  once fixed, keep it: cp $input $FUZZ_SOURCE/regressions/$target/<what-it-guards>" ;;
    esac
  done
  exit 1
}

moss_fuzz_run() {
  local target="$1"
  local bin="$MOSS_FUZZ_BUILD_DIR/bin/$target"
  local log="$WORK/logs/$target.log"
  local limits=(-timeout=10 -rss_limit_mb=2048)
  rm -rf "$WORK/artifacts/$target"
  mkdir -p "$WORK/artifacts/$target" "$WORK/corpus/$target" "$WORK/logs"

  local regressions=("$FUZZ_SOURCE/regressions/$target"/*)
  if [ -e "${regressions[0]}" ]; then
    if ! "$bin" "${limits[@]}" -artifact_prefix="$WORK/artifacts/$target/" \
        "${regressions[@]}" >"$log" 2>&1; then
      moss_fuzz_fail "$target" "$log"
    fi
  else
    regressions=()
  fi
  if [ "$MOSS_FUZZ_SECONDS" -le 0 ]; then
    moss_log "$target: ${#regressions[@]} regression inputs replayed"
    return
  fi
  local dirs=("$WORK/corpus/$target" "$WORK/seeds/$target")
  [ -d "$FUZZ_SOURCE/regressions/$target" ] && dirs+=("$FUZZ_SOURCE/regressions/$target")
  if ! "$bin" "${limits[@]}" -max_total_time="$MOSS_FUZZ_SECONDS" \
      -print_final_stats=1 -artifact_prefix="$WORK/artifacts/$target/" \
      "${dirs[@]}" >"$log" 2>&1; then
    moss_fuzz_fail "$target" "$log"
  fi
  local runs
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  moss_log "$target: ${#regressions[@]} regression inputs replayed; ${runs:-?} inputs in ${MOSS_FUZZ_SECONDS} s, no crash"
}

moss_ensure_packages
moss_find_cuda
moss_fuzz_build
moss_fuzz_seeds
# ASan reports name functions and lines.
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ]; then
  for symbolizer in "llvm-symbolizer${FUZZ_CXX#clang++}" llvm-symbolizer \
      llvm-symbolizer-22; do
    if command -v "$symbolizer" >/dev/null; then
      ASAN_SYMBOLIZER_PATH="$(command -v "$symbolizer")"
      export ASAN_SYMBOLIZER_PATH
      break
    fi
  done
fi
for target in $MOSS_FUZZ_TARGETS; do
  moss_fuzz_run "$target"
done
