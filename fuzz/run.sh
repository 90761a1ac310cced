#!/usr/bin/env bash
# Runs every fuzz target for the given number of seconds (default 60), starting from its seed
# corpus under corpus/<target>/. Usage: fuzz/run.sh [seconds]
#
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`). RUSTC_BOOTSTRAP=1 is set for the fuzz
# commands only, because libFuzzer instrumentation needs nightly compiler flags.
set -euo pipefail
seconds="${1:-60}"
cd "$(dirname "$0")"
export CARGO_TARGET_DIR="${LAKESTREAM_FUZZ_TARGET_DIR:-/var/tmp/lakestream-fuzz-target}"
RUSTC_BOOTSTRAP=1 cargo fuzz build
# Every [[bin]] of Cargo.toml, so targets added later run too.
mapfile -t targets < <(cargo fuzz list)
for target in "${targets[@]}"; do
  # Fuzz a scratch copy of the seeds, so the committed corpus stays small.
  work="$(mktemp -d)"
  log="$(mktemp)"
  if [ -d "corpus/$target" ]; then cp -r "corpus/$target/." "$work/"; fi
  status=0
  RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" "$work" -- -max_total_time="$seconds" >"$log" 2>&1 || status=$?
  echo "== $target: $(grep -E '^Done [0-9]+ runs' "$log" || echo 'no summary line')"
  rm -rf "$work"
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$log" >&2
    rm -f "$log"
    echo "fuzz target $target failed (exit $status)" >&2
    exit "$status"
  fi
  rm -f "$log"
done
echo "all ${#targets[@]} fuzz targets ran clean for ${seconds}s each"
