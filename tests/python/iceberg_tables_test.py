#!/usr/bin/env python3
"""Streams as Iceberg tables, read by outside readers (docs/tables.md).

Against a running `lakestream serve` with every role, the Kafka front end and
`[tables] table = "iceberg"` (scripts/test starts it, once with the SQLite catalog and once
with PostgreSQL):

    python iceberg_tables_test.py HTTP_URL KAFKA_BOOTSTRAP CATALOG_URI ROOT_URI

CATALOG_URI is the server's `tables.uri` (sqlx form: sqlite:///abs/path.db or
postgres://...); ROOT_URI is the compacted root as readers see it (file:///...).

Produces over HTTP (entries with record counts, to a two-partition stream, and to a stream
whose property `table = "none"` keeps it out) and over Kafka with confluent-kafka (records with
keys, values, headers, null keys and values, explicit timestamps; one partition per codec:
none, gzip, snappy, lz4, zstd). Waits for compaction and the table commits, then:

  * pyiceberg loads each table through the same SQL catalog and reads exactly the rows
    produced: count, partition and offset of each, payload and record count (entries) or key,
    value, headers and timestamp (Kafka records);
  * the snapshots' `lakestream.ranges` summaries cover each log's offsets once, without gaps
    or overlaps, and the watermarks (`lakestream.next-offset.{log}`) are each log's end;
  * DuckDB reads the current snapshot's data files (read_parquet) and finds the same rows;
  * the opted-out stream has no table;
  * after a second batch and trims of the entry stream (partition 0 through the first batch,
    partition 1 half-way through it), pyiceberg and DuckDB read exactly the second batch of
    partition 0 and a suffix of partition 1 holding every offset at or past its trim marker,
    through a `delete` snapshot; the snapshot before the trims still reads every row.
Exits non-zero naming every failed check.
"""

import base64
import json
import sys
import time
import urllib.request
import uuid

import duckdb
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
HTTP_PER_PARTITION = 25
KAFKA_PER_PARTITION = 30

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)


def call(url, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read()
        return json.loads(text) if text else None


def sqlalchemy_uri(uri):
    """The server's sqlx URI as SQLAlchemy takes it."""
    if uri.startswith("sqlite://"):
        return "sqlite:///" + uri[len("sqlite://"):].split("?")[0]
    for scheme in ("postgres://", "postgresql://"):
        if uri.startswith(scheme):
            return "postgresql+psycopg2://" + uri[len(scheme):]
    raise SystemExit(f"unknown catalog URI {uri}")


def produce_http(url, ns, stream, batch=0):
    """Entries of 1 to 3 records to both partitions; returns the expected rows."""
    expected = []
    for p in range(2):
        for i in range(HTTP_PER_PARTITION):
            payload = f"{stream} p{p} batch {batch} entry {i} ".encode() * (1 + i % 4)
            count = 1 + i % 3
            body = {"entries": [{"payload_base64": base64.b64encode(payload).decode(), "record_count": count}]}
            result = call(url, "POST", f"/v1/namespaces/{ns}/streams/{stream}/partitions/{p}/entries", body)
            entry = result["entries"][0]
            expected.append((p, entry["offset"], payload, count, entry["timestamp_ms"]))
    return expected


def produce_kafka(bootstrap, topic):
    """Records to one partition per codec; returns the expected rows from delivery reports."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=len(CODECS), replication_factor=1)])[topic].result(timeout=30)
    expected = []
    for p, codec in enumerate(CODECS):
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": False,
                "compression.type": codec,
                "linger.ms": 5,
                "acks": "all",
            }
        )
        errors = []
        for i in range(KAFKA_PER_PARTITION):
            key = None if i % 7 == 3 else f"key-{p}-{i}".encode()
            value = None if i % 11 == 5 else (f"value {codec} {i} " * 10).encode()
            headers = [("trace", f"t{i}".encode()), ("dup", b"1"), ("dup", None if i % 2 else b"2")]
            ts = 1_700_000_000_000 + p * 1000 + i

            def delivered(err, msg, key=key, value=value, headers=headers, ts=ts):
                if err:
                    errors.append(err)
                else:
                    expected.append((msg.partition(), msg.offset(), key, value, headers, ts))

            producer.produce(topic, key=key, value=value, partition=p, headers=headers, timestamp=ts,
                             on_delivery=delivered)
            if i % 10 == 9:
                producer.flush(30)
        producer.flush(30)
        check(not errors, f"Kafka delivery errors ({codec}): {errors}")
    return expected


def stream_of(url, topic):
    names = [s["name"] for s in call(url, "GET", "/v1/namespaces/default/streams")["streams"]]
    matching = [n for n in names if n.startswith(f"{topic}-topic-id-")]
    if len(matching) != 1:
        raise SystemExit(f"expected one stream for topic {topic}: {matching}")
    return matching[0]


def load(catalog, ident):
    try:
        return catalog.load_table(ident)
    except NoSuchTableError:
        return None


def wait_for_rows(catalog, ident, count, timeout=180):
    deadline = time.time() + timeout
    seen = None
    while time.time() < deadline:
        table = load(catalog, ident)
        snapshot = table.current_snapshot() if table is not None else None
        if snapshot is not None:
            seen = int(snapshot.summary.additional_properties.get("total-records", "0"))
            if seen >= count:
                return table
        time.sleep(1)
    raise SystemExit(f"{ident}: {seen} of {count} rows in the table after {timeout}s")


def check_ranges(table, ident, logs_end):
    """The snapshots' ranges cover each log from 0 to its end once; the watermarks agree."""
    by_log = {}
    for snapshot in table.snapshots():
        text = snapshot.summary.additional_properties.get("lakestream.ranges")
        check(text is not None, f"{ident}: snapshot {snapshot.snapshot_id} has no lakestream.ranges")
        for r in json.loads(text or "[]"):
            by_log.setdefault(r["log_id"], []).append((r["start"], r["end"]))
    props = table.properties
    for log_id, ranges in by_log.items():
        ranges.sort()
        check(ranges[0][0] == 0, f"{ident}: log {log_id} starts at {ranges[0][0]}")
        for (_, end), (start, _) in zip(ranges, ranges[1:]):
            check(end == start, f"{ident}: log {log_id} ranges {ranges} overlap or leave a gap")
        mark = int(props.get(f"lakestream.next-offset.{log_id}", "-1"))
        check(mark == ranges[-1][1], f"{ident}: log {log_id} watermark {mark}, ranges end {ranges[-1][1]}")
    check(sorted(e for rs in by_log.values() for _, e in rs[-1:]) == sorted(logs_end),
          f"{ident}: log ends {by_log} vs {logs_end}")


def duckdb_rows(table):
    files = [task.file.file_path for task in table.scan().plan_files()]
    paths = [f.removeprefix("file://") for f in files]
    con = duckdb.connect()
    return con.execute(
        'select "partition", "offset" from read_parquet(?) order by "partition", "offset"', [paths]
    ).fetchall()


def check_entries_table(catalog, ident, expected):
    table = wait_for_rows(catalog, ident, len(expected))
    rows = table.scan().to_arrow().sort_by([("partition", "ascending"), ("offset", "ascending")]).to_pylist()
    expected = sorted(expected)
    check(len(rows) == len(expected), f"{ident}: {len(rows)} rows, {len(expected)} entries produced")
    for row, (p, offset, payload, count, ts_ms) in zip(rows, expected):
        got = (row["partition"], row["offset"], row["payload"], row["record_count"])
        check(got == (p, offset, payload, count), f"{ident}: row {got} != {(p, offset, payload, count)}")
        check(int(row["timestamp"].timestamp() * 1000) == ts_ms, f"{ident}: row {offset} timestamp")
    ends = [max(o + c for q, o, _, c, _ in expected if q == p) for p in range(2)]
    check_ranges(table, ident, ends)
    check(duckdb_rows(table) == [(p, o) for p, o, _, _, _ in expected], f"{ident}: DuckDB rows differ")
    print(f"{ident}: {len(rows)} entry rows read back by pyiceberg and DuckDB", flush=True)


def wait_for(what, cond, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(1)
    check(False, f"{what} within {timeout}s")
    return False


def check_trims(url, catalog, ident, first):
    """Trims partition 0 through the first batch and partition 1 half-way through it; the
    table follows. A soft trim stops at the log's last index record, so a second batch
    (compacted in ranges of its own) is produced and committed first."""
    ns, stream = ident
    second = produce_http(url, ns, stream, batch=1)
    expected = first + second
    table = wait_for_rows(catalog, ident, len(expected))
    before = table.current_snapshot().snapshot_id
    p0_end = max(o + c for q, o, _, c, _ in first if q == 0)
    p1_first = sorted(o for q, o, _, _, _ in first if q == 1)
    p1_trim = p1_first[len(p1_first) // 2]
    marker0 = call(url, "POST", f"/v1/namespaces/{ns}/streams/{stream}/partitions/0/trim",
                   {"through": p0_end - 1})["trim_marker"]
    marker1 = call(url, "POST", f"/v1/namespaces/{ns}/streams/{stream}/partitions/1/trim",
                   {"through": p1_trim - 1})["trim_marker"]
    check((marker0, marker1) == (p0_end, p1_trim), f"{ident}: trim markers {(marker0, marker1)} != {(p0_end, p1_trim)}")
    p0_left = sorted(o for q, o, _, _, _ in second if q == 0)

    def partition0_trimmed():
        rows = load(catalog, ident).scan(selected_fields=("partition", "offset")).to_arrow().to_pylist()
        return sorted(r["offset"] for r in rows if r["partition"] == 0) == p0_left

    if not wait_for(f"{ident}: partition 0's first batch leaves the table after its trim", partition0_trimmed):
        return
    table = load(catalog, ident)
    check(any(s.summary.operation.value == "delete" for s in table.snapshots()), f"{ident}: no delete snapshot")
    rows = table.scan().to_arrow().sort_by([("partition", "ascending"), ("offset", "ascending")]).to_pylist()
    got = [(r["partition"], r["offset"]) for r in rows]
    # Partition 1: whole files only, so rows below its marker may remain from a file
    # straddling it: a suffix of its entries holding every one at or past the marker.
    all_p1 = sorted(o for q, o, _, _, _ in expected if q == 1)
    got_p1 = [o for q, o in got if q == 1]
    check(got_p1 == all_p1[len(all_p1) - len(got_p1):], f"{ident}: partition 1 after its trim {got_p1} is not a suffix of {all_p1}")
    check(all(o in got_p1 for o in all_p1 if o >= p1_trim), f"{ident}: partition 1 rows at or past {p1_trim} are missing")
    check(duckdb_rows(table) == got, f"{ident}: DuckDB rows after the trims differ")
    # The snapshot before the trims (time travel) still reads every row: its files stay
    # until it expires (tables.snapshot_max_age).
    old = table.scan(snapshot_id=before, selected_fields=("offset",)).to_arrow().num_rows
    check(old == len(expected), f"{ident}: the snapshot before the trims reads {old} of {len(expected)} rows")
    print(f"{ident}: after the trims, {len(got)} of {len(expected)} rows (markers {marker0}, {marker1}); "
          f"the snapshot before them still reads {old}", flush=True)


def check_kafka_table(catalog, ident, expected):
    table = wait_for_rows(catalog, ident, len(expected))
    rows = table.scan().to_arrow().sort_by([("partition", "ascending"), ("offset", "ascending")]).to_pylist()
    expected = sorted(expected, key=lambda e: (e[0], e[1]))
    check(len(rows) == len(expected), f"{ident}: {len(rows)} rows, {len(expected)} records produced")
    for row, (p, offset, key, value, headers, ts) in zip(rows, expected):
        where = f"{ident} partition {p} offset {offset}"
        check((row["partition"], row["offset"]) == (p, offset), f"{where}: row at {row['partition']}/{row['offset']}")
        check(row["key"] == key, f"{where}: key {row['key']!r} != {key!r}")
        check(row["value"] == value, f"{where}: value differs")
        got_headers = [(h["key"], h["value"]) for h in row["headers"]]
        check(got_headers == headers, f"{where}: headers {got_headers} != {headers}")
        check(int(row["timestamp"].timestamp() * 1000) == ts, f"{where}: timestamp {row['timestamp']} != {ts}")
    per_partition = [sum(1 for e in expected if e[0] == p) for p in range(len(CODECS))]
    check_ranges(table, ident, per_partition)
    check(duckdb_rows(table) == [(p, o) for p, o, *_ in expected], f"{ident}: DuckDB rows differ")
    spec = table.spec()
    check([f.name for f in spec.fields] == ["timestamp_day"], f"{ident}: partition spec {spec}")
    print(f"{ident}: {len(rows)} Kafka record rows read back by pyiceberg and DuckDB", flush=True)


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    url, bootstrap, catalog_uri, root_uri = sys.argv[1:]
    run = uuid.uuid4().hex[:8]
    ns = f"shop{run}"
    call(url, "POST", "/v1/namespaces", {"name": ns})
    call(url, "POST", f"/v1/namespaces/{ns}/streams", {"name": "orders", "partitions": 2})
    call(url, "POST", f"/v1/namespaces/{ns}/streams", {"name": "private", "partitions": 2,
                                                       "properties": {"table": "none"}})
    entries = produce_http(url, ns, "orders")
    produce_http(url, ns, "private")
    topic = f"clicks{run}"
    records = produce_kafka(bootstrap, topic)
    stream = stream_of(url, topic)

    catalog = SqlCatalog("lakestream", uri=sqlalchemy_uri(catalog_uri), warehouse=f"{root_uri}/_iceberg")
    check_entries_table(catalog, (ns, "orders"), entries)
    check_kafka_table(catalog, ("default", stream), records)
    check(load(catalog, (ns, "private")) is None, f"{ns}.private (table = none) has a table")
    table = load(catalog, (ns, "orders"))
    check(table.location() == f"{root_uri}/_iceberg/{ns}/orders", f"location {table.location()}")
    check_trims(url, catalog, (ns, "orders"), entries)

    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        sys.exit(1)
    print("iceberg tables: every check passed")


if __name__ == "__main__":
    main()
