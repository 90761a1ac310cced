#!/usr/bin/env bash
# Apache kafka-clients 4.4.0 (Maven Central) against a Kafka bootstrap address: builds
# tests/kafka/java (needs Java 17+ and Maven) and runs its ClientTest.
# Usage: tests/kafka/java_client_test.sh BOOTSTRAP [lakestream]
# ("lakestream": also check what the Lakestream front end refuses)
set -euo pipefail
here=$(cd "$(dirname "$0")/java" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
(cd "$here" && mvn -q -B compile dependency:build-classpath -Dmdep.outputFile="$out/classpath.txt" >"$out/mvn.log" 2>&1) \
  || { cat "$out/mvn.log" >&2; exit 1; }
java -cp "$here/target/classes:$(cat "$out/classpath.txt")" dev.lakestream.kafka.ClientTest "$@"
