#!/usr/bin/env bash
# Cross-implementation fixtures: builds the Java generator (JavaFastPFOR 0.2.1 and Apache
# kafka-clients from Maven Central), writes the fixtures into DIR, and has our Rust codecs check
# them: our FastPFOR words must equal IntegratedIntCompressor.compress's and decode back, and
# batches built with MemoryRecords must be counted (or refused) as the manifest says.
# Usage: tests/interop/run.sh DIR [SEED] [CASES]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: tests/interop/run.sh DIR [SEED] [CASES]}
seed=${2:-$RANDOM}
cases=${3:-3000}
mkdir -p "$out"
(cd "$here" && mvn -q -B compile dependency:build-classpath -Dmdep.outputFile="$out/classpath.txt" >"$out/mvn.log" 2>&1) \
  || { cat "$out/mvn.log" >&2; exit 1; }
java -cp "$here/target/classes:$(cat "$out/classpath.txt")" dev.lakestream.interop.Fixtures "$out" "$seed" "$cases" 2>/dev/null
cd "$here/../.."
# scripts/test builds the examples with the workspace's tests (LAKESTREAM_EXAMPLES_DIR); alone,
# this builds the one it needs.
if [ -n "${LAKESTREAM_EXAMPLES_DIR:-}" ]; then
  "$LAKESTREAM_EXAMPLES_DIR/interop_check" "$out"
else
  cargo run --locked --quiet -p lakestream-format --example interop_check -- "$out"
fi
