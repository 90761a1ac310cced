# shellcheck shell=bash
# Installs and runs the real servers the tests use, as local processes on 127.0.0.1.
# Sourced by scripts/test and scripts/dev-servers. Tools are cached outside the clone, in
# $LAKESTREAM_TOOLS (default ~/.cache/lakestream/tools), so a second run installs nothing.

LAKESTREAM_TOOLS="${LAKESTREAM_TOOLS:-$HOME/.cache/lakestream/tools}"
S3S_FS_VERSION=0.14.1
OXIA_VERSION=0.17.1
S3S_FS_BIN="$LAKESTREAM_TOOLS/s3s-fs-$S3S_FS_VERSION/bin/s3s-fs"
OXIA_BIN=""
PYENV_DIR="$LAKESTREAM_TOOLS/pyenv"

log() { printf '[lakestream] %s\n' "$*" >&2; }

# A free loopback port below the kernel's ephemeral range (32768-), where the suite's own
# outgoing connections could take it before the server binds it.
free_port() {
  python3 -c '
import random, socket
for _ in range(1000):
    port = random.randrange(20000, 32000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
else:
    raise SystemExit("no free loopback port in 20000..32000")
'
}

wait_for_port() { # host port seconds name
  local host=$1 port=$2 secs=$3 name=$4 i
  for ((i = 0; i < secs * 10; i++)); do
    if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  log "$name did not open $host:$port within ${secs}s"
  return 1
}

install_s3s_fs() {
  if [ -x "$S3S_FS_BIN" ]; then return 0; fi
  log "installing s3s-fs $S3S_FS_VERSION from crates.io into $LAKESTREAM_TOOLS (once)"
  CARGO_TARGET_DIR="$LAKESTREAM_TOOLS/.s3s-build" cargo install s3s-fs --version "$S3S_FS_VERSION" \
    --features binary --locked --root "$LAKESTREAM_TOOLS/s3s-fs-$S3S_FS_VERSION"
  rm -rf "$LAKESTREAM_TOOLS/.s3s-build"
}

# cargo-fuzz for fuzz/run.sh (the fuzz step of scripts/test). Reinstalled when the cached
# binary reports another version.
CARGO_FUZZ_VERSION=0.13.2
CARGO_FUZZ_BIN="$LAKESTREAM_TOOLS/cargo-fuzz/bin/cargo-fuzz"
install_cargo_fuzz() {
  if [ -x "$CARGO_FUZZ_BIN" ] && [ "$("$CARGO_FUZZ_BIN" --version 2>/dev/null)" = "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
    return 0
  fi
  log "installing cargo-fuzz $CARGO_FUZZ_VERSION (cargo install) into $LAKESTREAM_TOOLS (once)"
  CARGO_TARGET_DIR="$LAKESTREAM_TOOLS/.cargo-fuzz-build" cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" \
    --locked --force --root "$LAKESTREAM_TOOLS/cargo-fuzz"
  rm -rf "$LAKESTREAM_TOOLS/.cargo-fuzz-build"
}

# cargo-semver-checks for scripts/check-crates (the API compatibility check of the library
# crates). 0.51.0 is the newest release that builds on Rust 1.95 and reads 1.95's rustdoc JSON.
# Reinstalled when the cached binary reports another version.
CARGO_SEMVER_CHECKS_VERSION=0.51.0
CARGO_SEMVER_CHECKS_BIN="$LAKESTREAM_TOOLS/cargo-semver-checks/bin/cargo-semver-checks"
install_cargo_semver_checks() {
  if [ -x "$CARGO_SEMVER_CHECKS_BIN" ] \
    && [ "$("$CARGO_SEMVER_CHECKS_BIN" semver-checks --version 2>/dev/null)" = "cargo-semver-checks $CARGO_SEMVER_CHECKS_VERSION" ]; then
    return 0
  fi
  log "installing cargo-semver-checks $CARGO_SEMVER_CHECKS_VERSION (cargo install) into $LAKESTREAM_TOOLS (once)"
  CARGO_TARGET_DIR="$LAKESTREAM_TOOLS/.cargo-semver-checks-build" cargo install cargo-semver-checks \
    --version "$CARGO_SEMVER_CHECKS_VERSION" --locked --force --root "$LAKESTREAM_TOOLS/cargo-semver-checks"
  rm -rf "$LAKESTREAM_TOOLS/.cargo-semver-checks-build"
}

# Oxia v0.17.1, the real server (sets OXIA_BIN): from LAKESTREAM_OXIA_BIN if set, else built
# once by ../shared/oxia/build.sh from the upstream source kept beside the repository (about
# 5 minutes cold, then reused from ~/.cache/oxia). The Go module proxy does not serve Oxia's
# modules, so there is no `go install` path.
install_oxia() {
  local build
  build="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/../shared/oxia/build.sh"
  if [ -n "${LAKESTREAM_OXIA_BIN:-}" ]; then
    OXIA_BIN=$LAKESTREAM_OXIA_BIN
    [ -x "$OXIA_BIN" ] || { log "LAKESTREAM_OXIA_BIN=$OXIA_BIN is not an executable file"; return 1; }
  elif [ -f "$build" ]; then
    log "Oxia $OXIA_VERSION: building from ../shared/oxia once (about 5 minutes cold; reused after)"
    OXIA_BIN=$(bash "$build") || { log "building Oxia with $build failed (see above)"; return 1; }
  else
    log "no Oxia server found. Set LAKESTREAM_OXIA_BIN to an Oxia $OXIA_VERSION binary: the container"
    log "image oxia/oxia:$OXIA_VERSION has it at /oxia/bin/oxia, or build the upstream tag with"
    log "  git clone --branch v$OXIA_VERSION https://github.com/oxia-db/oxia && cd oxia && go build -o oxia ./cmd"
    return 1
  fi
  log "Oxia server: $OXIA_BIN"
}

# promtool, for scripts/check-deploy (Debian's `prometheus` package; the machine's apt).
install_promtool() {
  if command -v promtool >/dev/null 2>&1; then return 0; fi
  log "installing promtool (Debian package prometheus) with apt-get (once)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
}

# kcat, librdkafka's command-line client, for tests/kafka (Debian's `kcat` package).
install_kcat() {
  if command -v kcat >/dev/null 2>&1; then return 0; fi
  log "installing kcat (Debian package kcat) with apt-get (once)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null
}

# Apache Kafka 4.4.0 from Maven Central (org.apache.kafka:kafka_2.13 and its dependencies,
# copied by tests/kafka/broker/pom.xml), the reference broker the Kafka client tests also run
# against; needs Java 17+ and Maven. Sets APACHE_KAFKA_LIB.
APACHE_KAFKA_VERSION=4.4.0
APACHE_KAFKA_LIB="$LAKESTREAM_TOOLS/apache-kafka-$APACHE_KAFKA_VERSION/lib"
install_apache_kafka() {
  if [ -f "$APACHE_KAFKA_LIB/kafka_2.13-$APACHE_KAFKA_VERSION.jar" ]; then return 0; fi
  log "installing Apache Kafka $APACHE_KAFKA_VERSION (Maven Central) into $APACHE_KAFKA_LIB (once)"
  rm -rf "$APACHE_KAFKA_LIB"
  (cd "$(dirname "${BASH_SOURCE[0]}")/../tests/kafka/broker" \
    && mvn -q -B dependency:copy-dependencies -DoutputDirectory="$APACHE_KAFKA_LIB")
}

# Starts Apache Kafka as a single-node KRaft broker (broker and controller, replication
# factors 1) on loopback over a fresh directory; sets APACHE_KAFKA_BOOTSTRAP and
# APACHE_KAFKA_PID.
start_apache_kafka() {
  local dir=$1 port controller
  port=$(free_port)
  controller=$(free_port)
  mkdir -p "$dir"
  cat >"$dir/server.properties" <<PROPERTIES
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/logs
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPERTIES
  java -cp "$APACHE_KAFKA_LIB/*" kafka.tools.StorageTool format -t "$(python3 -c 'import base64, uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')" \
    -c "$dir/server.properties" >"$dir/format.log" 2>&1 || { cat "$dir/format.log" >&2; return 1; }
  java -Xmx512m -cp "$APACHE_KAFKA_LIB/*" kafka.Kafka "$dir/server.properties" >"$dir/broker.log" 2>&1 &
  APACHE_KAFKA_PID=$!
  wait_for_port 127.0.0.1 "$port" 90 "Apache Kafka" || { tail -50 "$dir/broker.log" >&2; return 1; }
  APACHE_KAFKA_BOOTSTRAP="127.0.0.1:$port"
  log "Apache Kafka $APACHE_KAFKA_VERSION on $APACHE_KAFKA_BOOTSTRAP (pid $APACHE_KAFKA_PID)"
}

# Starts `lakestream serve` ($1: the binary) as Kafka front-end process number $3 (its
# kafka.node_id) over a fresh directory $2, with every role, on the Oxia server at $5 and the
# S3 server started by start_s3 (LAKESTREAM_TEST_S3_*), under the S3 prefix $4: processes
# started with one Oxia server and prefix serve one deployment. Sets FRONT_END_PID and
# FRONT_END_BOOTSTRAP.
start_kafka_front_end() {
  local bin=$1 dir=$2 node=$3 prefix=$4 oxia=$5 http kafka root
  http=$(free_port)
  kafka=$(free_port)
  mkdir -p "$dir"
  {
    printf '[http]\naddr = "127.0.0.1:%s"\n' "$http"
    printf '[kafka]\naddr = "127.0.0.1:%s"\nnode_id = %s\n' "$kafka" "$node"
    printf 'group_initial_rebalance_delay = "0s"\ncoordinator_session_timeout = "5s"\n'
    printf '[metadata]\nbackend = "oxia"\naddresses = ["%s"]\n' "$oxia"
    for root in wal compacted; do
      printf '[storage.%s]\nbackend = "s3"\nbucket = "%s"\nprefix = "%s/%s"\nendpoint = "%s"\n' \
        "$root" "$LAKESTREAM_TEST_S3_BUCKET" "$prefix" "$root" "$LAKESTREAM_TEST_S3_ENDPOINT"
      printf 'region = "%s"\naccess_key_id = "%s"\nsecret_access_key = "%s"\nforce_path_style = true\n' \
        "$LAKESTREAM_TEST_S3_REGION" "$LAKESTREAM_TEST_S3_ACCESS_KEY" "$LAKESTREAM_TEST_S3_SECRET_KEY"
    done
  } >"$dir/lakestream.toml"
  "$bin" serve --config "$dir/lakestream.toml" >"$dir/serve.log" 2>&1 &
  FRONT_END_PID=$!
  wait_for_port 127.0.0.1 "$kafka" 60 "Kafka front end $node" || { tail -50 "$dir/serve.log" >&2; return 1; }
  FRONT_END_BOOTSTRAP="127.0.0.1:$kafka"
  log "Kafka front end $node on $FRONT_END_BOOTSTRAP (pid $FRONT_END_PID)"
}

install_python_tools() {
  if [ -x "$PYENV_DIR/bin/python" ] && "$PYENV_DIR/bin/python" -c 'import pyarrow, kafka, confluent_kafka, cloudevents.core, openapi_spec_validator, pyiceberg.catalog.sql, psycopg2, duckdb' 2>/dev/null; then
    return 0
  fi
  log "creating the Python test environment in $PYENV_DIR (pyarrow, kafka-python, confluent-kafka, cloudevents, openapi-spec-validator, pyiceberg, duckdb)"
  [ -x "$PYENV_DIR/bin/python" ] || python3 -m venv "$PYENV_DIR"
  "$PYENV_DIR/bin/pip" install --quiet --disable-pip-version-check -r "$(dirname "${BASH_SOURCE[0]}")/../tests/python/requirements.txt"
}

# schemathesis (PyPI), the contract test of docs/openapi.yaml against a running server, in a
# virtual environment of its own (its dependencies would pin the other tools' versions).
SCHEMATHESIS_VERSION=4.32.5
SCHEMATHESIS_DIR="$LAKESTREAM_TOOLS/schemathesis-$SCHEMATHESIS_VERSION"
install_schemathesis() {
  if [ -x "$SCHEMATHESIS_DIR/bin/st" ]; then
    return 0
  fi
  log "installing schemathesis $SCHEMATHESIS_VERSION into $SCHEMATHESIS_DIR"
  python3 -m venv "$SCHEMATHESIS_DIR"
  "$SCHEMATHESIS_DIR/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
}

# The npm `cloudevents` SDK for tests/node: `npm ci` from tests/node's committed lock into a
# cache directory outside the clone (reinstalled when the lock changes); sets NODE_CE_DIR.
NODE_CE_DIR="$LAKESTREAM_TOOLS/node-cloudevents"
install_node_tools() {
  local src
  src="$(dirname "${BASH_SOURCE[0]}")/../tests/node"
  if [ -d "$NODE_CE_DIR/node_modules/cloudevents" ] && cmp -s "$src/package-lock.json" "$NODE_CE_DIR/package-lock.json"; then
    return 0
  fi
  log "installing the npm cloudevents SDK (npm ci) into $NODE_CE_DIR"
  mkdir -p "$NODE_CE_DIR"
  cp "$src/package.json" "$src/package-lock.json" "$NODE_CE_DIR/"
  (cd "$NODE_CE_DIR" && npm ci --no-audit --no-fund --silent)
}

# Azurite, the Azure Storage emulator (npm `azurite`): `npm ci` from tests/azurite's committed
# lock into a cache directory outside the clone (reinstalled when the lock changes).
AZURITE_DIR="$LAKESTREAM_TOOLS/azurite"
install_azurite() {
  local src
  src="$(dirname "${BASH_SOURCE[0]}")/../tests/azurite"
  if [ -x "$AZURITE_DIR/node_modules/.bin/azurite-blob" ] && cmp -s "$src/package-lock.json" "$AZURITE_DIR/package-lock.json"; then
    return 0
  fi
  log "installing Azurite (npm ci) into $AZURITE_DIR"
  mkdir -p "$AZURITE_DIR"
  cp "$src/package.json" "$src/package-lock.json" "$AZURITE_DIR/"
  (cd "$AZURITE_DIR" && npm ci --no-audit --no-fund --silent)
}

# fake-gcs-server, a Google Cloud Storage emulator, built once with `go install` from the Go
# module proxy into $LAKESTREAM_TOOLS.
FAKE_GCS_VERSION=1.56.1
FAKE_GCS_BIN="$LAKESTREAM_TOOLS/fake-gcs-server-$FAKE_GCS_VERSION/bin/fake-gcs-server"
install_fake_gcs() {
  if [ -x "$FAKE_GCS_BIN" ]; then return 0; fi
  log "installing fake-gcs-server $FAKE_GCS_VERSION (go install) into $LAKESTREAM_TOOLS (once)"
  GOBIN="$(dirname "$FAKE_GCS_BIN")" GOFLAGS=-mod=mod go install "github.com/fsouza/fake-gcs-server@v$FAKE_GCS_VERSION"
}

# Starts s3s-fs over a fresh directory; exports LAKESTREAM_TEST_S3_* and sets S3_PID.
start_s3() {
  local dir=$1 port
  port=$(free_port)
  mkdir -p "$dir/s3/lakestream-test"
  "$S3S_FS_BIN" --host 127.0.0.1 --port "$port" --access-key lakestream --secret-key lakestream-secret \
    "$dir/s3" >"$dir/s3s-fs.log" 2>&1 &
  S3_PID=$!
  wait_for_port 127.0.0.1 "$port" 30 s3s-fs || { cat "$dir/s3s-fs.log" >&2; return 1; }
  export LAKESTREAM_TEST_S3_ENDPOINT="http://127.0.0.1:$port"
  export LAKESTREAM_TEST_S3_BUCKET=lakestream-test
  export LAKESTREAM_TEST_S3_ACCESS_KEY=lakestream
  export LAKESTREAM_TEST_S3_SECRET_KEY=lakestream-secret
  export LAKESTREAM_TEST_S3_REGION=us-east-1
  log "s3s-fs $S3S_FS_VERSION on $LAKESTREAM_TEST_S3_ENDPOINT (pid $S3_PID)"
}

# Starts `oxia standalone` with 4 shards over fresh data and WAL directories under $1 (no
# fsync: tests only); sets STARTED_OXIA (host:port) and STARTED_OXIA_PID.
start_oxia_server() {
  local dir=$1 port metrics_port
  port=$(free_port)
  metrics_port=$(free_port)
  mkdir -p "$dir/oxia"
  "$OXIA_BIN" standalone -p "127.0.0.1:$port" -m "127.0.0.1:$metrics_port" -s 4 --data-dir "$dir/oxia/db" \
    --wal-dir "$dir/oxia/wal" --wal-sync-data=false -j >"$dir/oxia.log" 2>&1 &
  STARTED_OXIA_PID=$!
  wait_for_port 127.0.0.1 "$port" 60 oxia || { tail -50 "$dir/oxia.log" >&2; return 1; }
  STARTED_OXIA="127.0.0.1:$port"
}

# The shared Oxia server of the tests (start_oxia_server); exports LAKESTREAM_TEST_OXIA and
# sets OXIA_PID.
start_oxia() {
  start_oxia_server "$1" || return 1
  OXIA_PID=$STARTED_OXIA_PID
  export LAKESTREAM_TEST_OXIA=$STARTED_OXIA
  export LAKESTREAM_TEST_OXIA_BIN="$OXIA_BIN"
  log "oxia $OXIA_VERSION standalone (4 shards) on $LAKESTREAM_TEST_OXIA (pid $OXIA_PID)"
}

# Starts Azurite's blob service over a fresh directory with its well-known development account;
# exports LAKESTREAM_TEST_AZURE_* and sets AZURITE_PID.
start_azurite() {
  local dir=$1 port
  port=$(free_port)
  mkdir -p "$dir/azurite"
  "$AZURITE_DIR/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$port" --location "$dir/azurite" \
    --skipApiVersionCheck --disableProductStyleUrl --disableTelemetry --silent >"$dir/azurite.log" 2>&1 &
  AZURITE_PID=$!
  wait_for_port 127.0.0.1 "$port" 60 azurite || { cat "$dir/azurite.log" >&2; return 1; }
  export LAKESTREAM_TEST_AZURE_ENDPOINT="http://127.0.0.1:$port/devstoreaccount1"
  export LAKESTREAM_TEST_AZURE_ACCOUNT=devstoreaccount1
  # Azurite's published development key (the same in every installation), not a secret.
  export LAKESTREAM_TEST_AZURE_ACCESS_KEY="Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
  export LAKESTREAM_TEST_AZURE_CONTAINER=lakestream-test
  "$(dirname "${BASH_SOURCE[0]}")/azure-create-container" "$LAKESTREAM_TEST_AZURE_ENDPOINT" \
    "$LAKESTREAM_TEST_AZURE_ACCOUNT" "$LAKESTREAM_TEST_AZURE_ACCESS_KEY" "$LAKESTREAM_TEST_AZURE_CONTAINER"
  log "azurite (blob) on $LAKESTREAM_TEST_AZURE_ENDPOINT (pid $AZURITE_PID)"
}

# Starts fake-gcs-server over HTTP with an in-memory backend and one bucket; exports
# LAKESTREAM_TEST_GCS_* and sets FAKE_GCS_PID.
start_fake_gcs() {
  local dir=$1 port
  port=$(free_port)
  mkdir -p "$dir/fake-gcs/data/lakestream-test"
  "$FAKE_GCS_BIN" -scheme http -host 127.0.0.1 -port "$port" -public-host "127.0.0.1:$port" \
    -backend memory -data "$dir/fake-gcs/data" -log-level warn >"$dir/fake-gcs.log" 2>&1 &
  FAKE_GCS_PID=$!
  wait_for_port 127.0.0.1 "$port" 30 fake-gcs-server || { cat "$dir/fake-gcs.log" >&2; return 1; }
  export LAKESTREAM_TEST_GCS_ENDPOINT="http://127.0.0.1:$port"
  export LAKESTREAM_TEST_GCS_BUCKET=lakestream-test
  log "fake-gcs-server $FAKE_GCS_VERSION on $LAKESTREAM_TEST_GCS_ENDPOINT (pid $FAKE_GCS_PID)"
}

# PostgreSQL for the Iceberg SQL catalog tests: Debian's `postgresql` package (installed with
# apt when no initdb is found). Sets POSTGRES_BIN to the directory holding initdb and pg_ctl.
POSTGRES_BIN=""
install_postgres() {
  local initdb
  initdb=$(command -v initdb 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$initdb" ]; then
    log "installing PostgreSQL (Debian package postgresql) with apt-get (once)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    initdb=$(ls -d /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)
  fi
  POSTGRES_BIN=$(dirname "$(readlink -f "$initdb")")
}

# Starts a throwaway PostgreSQL cluster (trust authentication, no fsync: tests only) on
# 127.0.0.1 and a free port, its socket in its own directory; as root, the cluster runs as
# the `postgres` user (initdb refuses root). Exports LAKESTREAM_TEST_POSTGRES_URL (the
# database `postgres`, user `lakestream`) and sets POSTGRES_DIR; stop_postgres stops it.
POSTGRES_DIR=""
start_postgres() {
  local port run=()
  POSTGRES_DIR=$(mktemp -d "${TMPDIR:-/tmp}/lakestream-pg.XXXXXX")
  if [ "$(id -u)" = 0 ]; then
    chown postgres "$POSTGRES_DIR"
    run=(runuser -u postgres --)
  fi
  "${run[@]}" "$POSTGRES_BIN/initdb" -D "$POSTGRES_DIR/data" -U lakestream --auth=trust -E UTF8 \
    >"$POSTGRES_DIR/initdb.log" 2>&1 || { cat "$POSTGRES_DIR/initdb.log" >&2; return 1; }
  port=$(free_port)
  "${run[@]}" "$POSTGRES_BIN/pg_ctl" -D "$POSTGRES_DIR/data" -l "$POSTGRES_DIR/postgres.log" -w -t 60 \
    -o "-k $POSTGRES_DIR -h 127.0.0.1 -p $port -F" start >/dev/null \
    || { cat "$POSTGRES_DIR/postgres.log" >&2; return 1; }
  export LAKESTREAM_TEST_POSTGRES_URL="postgres://lakestream@127.0.0.1:$port/postgres"
  log "PostgreSQL $("$POSTGRES_BIN/pg_ctl" --version | awk '{print $3}') on 127.0.0.1:$port (data $POSTGRES_DIR)"
}

stop_postgres() {
  [ -n "$POSTGRES_DIR" ] || return 0
  local run=()
  if [ "$(id -u)" = 0 ]; then run=(runuser -u postgres --); fi
  "${run[@]}" "$POSTGRES_BIN/pg_ctl" -D "$POSTGRES_DIR/data" -m fast -w stop >/dev/null 2>&1 \
    && log "stopped PostgreSQL" || log "PostgreSQL was not running"
  rm -rf "$POSTGRES_DIR"
  POSTGRES_DIR=""
}

# Whether process $1 runs (a zombie, dead but not yet reaped, does not).
alive() {
  local pid=$1 state
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)
  [ "$state" != Z ]
}

# The lines of log $2 that report a panic (Rust's "panicked at", a Go runtime's "panic:" or
# "fatal error:", PostgreSQL's "PANIC:"); prints them and returns 1 when there are any.
log_panics() { # name log
  local name=$1 file=$2 found
  [ -f "$file" ] || return 0
  found=$(grep -E 'panicked at|^panic: |^fatal error: |[[:space:]]PANIC:[[:space:]]' "$file" | head -20 || true)
  [ -z "$found" ] && return 0
  log "$name logged a panic ($file):"
  printf '%s\n' "$found" >&2
  return 1
}

# Stops a server the suite started and checks that it lived to the end: returns 1, with the
# end of its log, when it had died before (stop_pid alone succeeds for a dead process), or
# when its log reports a panic.
finish_server() { # pid name log
  local pid=$1 name=$2 file=$3
  if [ -z "$pid" ]; then
    log "$name: no process to finish (it was never started)"
    return 1
  fi
  if ! alive "$pid"; then
    log "$name (pid $pid) died before the end of the suite; its log ($file) ends:"
    tail -30 "$file" >&2 2>/dev/null || true
    return 1
  fi
  stop_pid "$pid" "$name"
  log_panics "$name" "$file"
}

# finish_server for the cluster of start_postgres (pg_ctl runs it as a daemon).
finish_postgres() {
  local run=() file="$POSTGRES_DIR/postgres.log"
  [ -n "$POSTGRES_DIR" ] || { log "PostgreSQL: no cluster to finish (it was never started)"; return 1; }
  if [ "$(id -u)" = 0 ]; then run=(runuser -u postgres --); fi
  if ! "${run[@]}" "$POSTGRES_BIN/pg_ctl" -D "$POSTGRES_DIR/data" status >/dev/null 2>&1; then
    log "PostgreSQL died before the end of the suite; its log ($file) ends:"
    tail -30 "$file" >&2 2>/dev/null || true
    return 1
  fi
  local panics=0
  log_panics PostgreSQL "$file" || panics=1
  stop_postgres
  return "$panics"
}

stop_pid() { # pid name
  local pid=$1 name=$2 i
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || { log "stopped $name (pid $pid)"; return 0; }; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
  log "killed $name (pid $pid)"
}
