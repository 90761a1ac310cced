#!/usr/bin/env bash
# Tests of scripts/servers.sh's checks that scripts/test ends with: a server that died before
# the end, or whose log reports a panic, fails the suite; a healthy one passes. Stand-in
# servers are `sleep` processes with logs written here. Usage: tests/scripts/servers_test.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/servers.sh

WORK=$(mktemp -d "${TMPDIR:-/tmp}/lakestream-servers-test.XXXXXX")
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

passed=0
failed=0
check() { # description expected-status command...
  local what=$1 want=$2 got
  shift 2
  "$@" >"$WORK/out" 2>&1
  got=$?
  if [ "$got" = "$want" ]; then
    passed=$((passed + 1))
    printf 'ok - %s\n' "$what"
  else
    failed=$((failed + 1))
    printf 'FAILED - %s: exit %s, expected %s; it printed:\n' "$what" "$got" "$want"
    sed 's/^/    /' "$WORK/out"
  fi
}
printed() { # description needle
  if grep -q -- "$2" "$WORK/out"; then
    passed=$((passed + 1))
    printf 'ok - %s\n' "$1"
  else
    failed=$((failed + 1))
    printf 'FAILED - %s: no %q in:\n' "$1" "$2"
    sed 's/^/    /' "$WORK/out"
  fi
}

# A healthy server: stopped, exit 0.
printf 'INFO listening\nINFO a line about panics that is not one\n' >"$WORK/healthy.log"
sleep 60 &
PIDS+=($!)
check "a healthy server finishes" 0 finish_server "$!" healthy "$WORK/healthy.log"
printed "  and is stopped" "stopped healthy"

# A server that died before the end: stop_pid alone says nothing, finish_server fails.
printf 'INFO listening\nERROR out of disk\n' >"$WORK/dead.log"
sleep 60 &
dead=$!
PIDS+=("$dead")
kill -KILL "$dead"
wait "$dead" 2>/dev/null
check "stop_pid of a dead server returns success (why finish_server exists)" 0 stop_pid "$dead" dead
check "a server that died before the end fails the suite" 1 finish_server "$dead" dead "$WORK/dead.log"
printed "  naming it" "dead (pid $dead) died before the end"
printed "  with its log's end" "ERROR out of disk"

# A zombie (dead, not yet reaped) is dead too.
( sleep 60 & echo $! >"$WORK/zombie.pid"; exec sleep 0.5 ) &
sleep 0.2
zombie=$(cat "$WORK/zombie.pid")
PIDS+=("$zombie")
kill -KILL "$zombie"
sleep 0.1
check "a killed process is not alive" 1 alive "$zombie"

# Panics in a live server's log: Rust, Go and PostgreSQL.
for line in "thread 'tokio-runtime-worker' panicked at src/main.rs:3:5:" "panic: runtime error: index out of range" \
  "fatal error: concurrent map writes" "2026-12-01 10:00:00 UTC [42] PANIC:  could not write to file"; do
  printf 'INFO listening\n%s\n' "$line" >"$WORK/panicky.log"
  sleep 60 &
  PIDS+=($!)
  check "a log line '${line:0:30}…' fails the suite" 1 finish_server "$!" panicky "$WORK/panicky.log"
  printed "  showing the line" "${line:0:20}"
done

check "a server never started fails" 1 finish_server "" never "$WORK/none.log"

echo "servers_test: $passed passed, $failed failed"
[ "$failed" = 0 ]
