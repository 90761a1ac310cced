#!/usr/bin/env bash
# kcat (librdkafka's command-line client) against a Kafka bootstrap address: lists metadata,
# produces keyed messages to a new topic (created by the producer's Metadata request) and
# consumes them back from the beginning. Usage: tests/kafka/kcat_test.sh BOOTSTRAP
set -euo pipefail
bootstrap=$1
topic="kcat-$RANDOM$RANDOM"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "kcat test FAILED: $*" >&2; exit 1; }

kcat -b "$bootstrap" -L -m 30 >"$work/metadata" || fail "kcat -L failed"
grep -q "broker .* at " "$work/metadata" || fail "metadata names no broker: $(cat "$work/metadata")"

for i in $(seq 1 50); do echo "key-$i:value $i with some text"; done >"$work/sent"
kcat -b "$bootstrap" -P -t "$topic" -K: -z snappy -X enable.idempotence=false -m 30 <"$work/sent" \
  || fail "kcat -P failed"

kcat -b "$bootstrap" -L -t "$topic" -m 30 >"$work/topic"
grep -q "topic \"$topic\" with 1 partitions" "$work/topic" || fail "the topic is not listed: $(cat "$work/topic")"

kcat -b "$bootstrap" -C -t "$topic" -o beginning -e -f '%k:%s\n' -m 30 >"$work/received" 2>"$work/consume.log" \
  || { cat "$work/consume.log" >&2; fail "kcat -C failed"; }
diff "$work/sent" "$work/received" || fail "consumed messages differ from those produced"

kcat -b "$bootstrap" -C -t "$topic" -o beginning -e -f '%o\n' -m 30 2>/dev/null >"$work/offsets"
[ "$(head -1 "$work/offsets")" = 0 ] && [ "$(tail -1 "$work/offsets")" = 49 ] || fail "offsets are not 0..49"
echo "kcat test: metadata listed, 50 messages round-tripped through topic $topic"
