"""A real Kafka client (confluent-kafka, librdkafka) against a Kafka bootstrap address.

Run against `lakestream dev` (with its HTTP URL, so that what was produced over Kafka is also
read back over HTTP) and, unchanged, against Apache Kafka (without a URL), so that the
expectations are known to be Kafka's:

    python kafka_client_test.py BOOTSTRAP [HTTP_URL [COMPACTED_DIR]]

Checks: topic creation (and TOPIC_ALREADY_EXISTS on a second), produce with every
compression codec (none, gzip, snappy, lz4, zstd) by an idempotent producer
(`enable.idempotence=true`: InitProducerId, producer ids and sequences), consume from earliest
with keys, values, headers and timestamps intact and offsets contiguous, ListOffsets by
timestamp, an unknown topic's error, CreatePartitions (and INVALID_PARTITIONS for fewer),
DeleteTopics, and, given HTTP_URL, the stored entries over HTTP: the
record batches as the client sent them (codec bits kept, records counted), uncompressed
ones decoded record by record; given COMPACTED_DIR (a local `storage.compacted` root), that
every entry is also in the Parquet files the compactor wrote, read with pyarrow.
"""

import base64
import glob
import json
import os
import struct
import sys
import time
import urllib.request
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_BITS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
PARTITIONS = 3
PER_PARTITION = 40

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)


def create_topic(admin, name, partitions):
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(timeout=30)


def produce_all(bootstrap, topic, codec):
    """Produces PER_PARTITION messages to each partition; returns them by partition."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "compression.type": codec,
            "linger.ms": 20,
            "acks": "all",
        }
    )
    errors = []
    sent = {p: [] for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            key = f"k-{codec}-{p}-{i}".encode()
            # Repetitive values, so that every codec really compresses.
            value = (f"value {codec} {p} {i} " * 20).encode()
            headers = [("h", f"{i}".encode())]
            ts = 1_700_000_000_000 + i
            producer.produce(
                topic,
                value=value,
                key=key,
                partition=p,
                headers=headers,
                timestamp=ts,
                on_delivery=lambda err, msg: errors.append(err) if err else None,
            )
            sent[p].append((key, value, headers, ts))
        producer.poll(0)
    left = producer.flush(30)
    check(left == 0, f"{codec}: {left} messages not delivered within 30 s")
    check(not errors, f"{codec}: delivery errors {errors[:3]}")
    return sent


def consume_all(bootstrap, topic, expected_per_partition):
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"unused-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = {p: [] for p in range(PARTITIONS)}
    deadline = time.time() + 60
    want = expected_per_partition * PARTITIONS
    while sum(len(v) for v in got.values()) < want and time.time() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            check(False, f"consume error {msg.error()}")
            break
        got[msg.partition()].append(msg)
    consumer.close()
    return got


def http_entries(url, stream, partition):
    entries, offset = [], 0
    while True:
        q = f"{url}/v1/namespaces/default/streams/{stream}/partitions/{partition}/entries?offset={offset}"
        with urllib.request.urlopen(q, timeout=30) as r:
            body = json.load(r)
        if not body["entries"]:
            return entries
        entries.extend(body["entries"])
        offset = body["next_offset"]


def varint(buf, pos):
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos


def batches(payload):
    """(attributes, record count, records region) of each record batch of a payload."""
    pos, out = 0, []
    while pos < len(payload):
        length = struct.unpack_from(">i", payload, pos + 8)[0]
        end = pos + 12 + length
        attributes = struct.unpack_from(">h", payload, pos + 21)[0]
        count = struct.unpack_from(">i", payload, pos + 57)[0]
        out.append((attributes, count, payload[pos + 61 : end]))
        pos = end
    return out


def records(region, count):
    """(key, value, headers) of each uncompressed record."""
    pos, out = 0, []
    for _ in range(count):
        length, pos = varint(region, pos)
        end = pos + length
        pos += 1  # attributes
        _, pos = varint(region, pos)  # timestamp delta
        _, pos = varint(region, pos)  # offset delta
        klen, pos = varint(region, pos)
        key = region[pos : pos + klen] if klen >= 0 else None
        pos += max(klen, 0)
        vlen, pos = varint(region, pos)
        value = region[pos : pos + vlen] if vlen >= 0 else None
        pos += max(vlen, 0)
        nh, pos = varint(region, pos)
        headers = []
        for _ in range(nh):
            hk, pos = varint(region, pos)
            name = region[pos : pos + hk].decode()
            pos += hk
            hv, pos = varint(region, pos)
            headers.append((name, region[pos : pos + hv]))
            pos += hv
        out.append((key, value, headers))
        pos = end
    return out


def stream_of(url, topic):
    with urllib.request.urlopen(f"{url}/v1/namespaces/default/streams", timeout=30) as r:
        names = [s["name"] for s in json.load(r)["streams"]]
    matching = [n for n in names if n.startswith(f"{topic}-topic-id-")]
    check(len(matching) == 1, f"one stream for topic {topic}: {matching}")
    return matching[0] if matching else None


def parquet_payloads(compacted_dir, stream):
    import pyarrow.parquet as pq

    payloads = []
    for path in glob.glob(os.path.join(compacted_dir, "default", stream, "*.parquet")):
        payloads.extend(pq.read_table(path).column("payload").to_pylist())
    return payloads


def check_compacted(compacted_dir, stream, codec, entries):
    """Waits (up to 120 s) until the compactor has written every entry into Parquet."""
    want = [base64.b64decode(e["payload_base64"]) for e in entries]
    deadline = time.time() + 120
    while True:
        found = parquet_payloads(compacted_dir, stream)
        missing = [p for p in want if p not in found]
        if not missing or time.time() > deadline:
            break
        time.sleep(1)
    check(not missing, f"{codec}: {len(missing)} of {len(want)} entries not in the Parquet files pyarrow read")


def main():
    bootstrap = sys.argv[1]
    url = sys.argv[2] if len(sys.argv) > 2 else None
    compacted_dir = sys.argv[3] if len(sys.argv) > 3 else None
    run = uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": bootstrap})

    md = admin.list_topics(timeout=30)
    check(len(md.brokers) >= 1, "metadata lists a broker")

    # A second CreateTopics of the same name is refused with TOPIC_ALREADY_EXISTS.
    dup = f"dup-{run}"
    create_topic(admin, dup, 1)
    try:
        create_topic(admin, dup, 1)
        check(False, "a second CreateTopics of one name fails")
    except KafkaException as e:
        check(e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, f"TOPIC_ALREADY_EXISTS, got {e}")

    for codec in CODECS:
        topic = f"codec-{codec}-{run}"
        create_topic(admin, topic, PARTITIONS)
        sent = produce_all(bootstrap, topic, codec)
        got = consume_all(bootstrap, topic, PER_PARTITION)
        for p in range(PARTITIONS):
            msgs = got[p]
            check(len(msgs) == PER_PARTITION, f"{codec} p{p}: {len(msgs)} of {PER_PARTITION} consumed")
            check([m.offset() for m in msgs] == list(range(len(msgs))), f"{codec} p{p}: offsets 0..n in order")
            for m, (key, value, headers, ts) in zip(msgs, sent[p]):
                same = m.key() == key and m.value() == value and m.headers() == headers
                check(same, f"{codec} p{p} offset {m.offset()}: key, value and headers as produced")
                check(m.timestamp()[1] == ts, f"{codec} p{p} offset {m.offset()}: timestamp {m.timestamp()} != {ts}")
                if not same:
                    break
        if url:
            stream = stream_of(url, topic)
            all_entries = []
            for p in range(PARTITIONS):
                entries = http_entries(url, stream, p) if stream else []
                all_entries.extend(entries)
                total = 0
                decoded = []
                for e in entries:
                    payload = base64.b64decode(e["payload_base64"])
                    bs = batches(payload)
                    check(sum(c for _, c, _ in bs) == e["record_count"], f"{codec} p{p}: entry record count")
                    total += e["record_count"]
                    for attributes, count, region in bs:
                        check(attributes & 7 == CODEC_BITS[codec], f"{codec} p{p}: codec bits {attributes & 7} kept")
                        check(struct.unpack_from(">q", payload, 0)[0] == 0, f"{codec} p{p}: stored base offset 0")
                        if codec == "none":
                            decoded.extend(records(region, count))
                check(total == PER_PARTITION, f"{codec} p{p}: {total} records over HTTP")
                if codec == "none":
                    want = [(k, v, h) for k, v, h, _ in sent[p]]
                    check(decoded == want, f"{codec} p{p}: records over HTTP byte for byte as produced")
            if compacted_dir and stream:
                check_compacted(compacted_dir, stream, codec, all_entries)

    if url:
        # Lakestream only: a transactional producer is refused at once (Apache Kafka serves it).
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{run}"})
        started = time.time()
        try:
            producer.init_transactions(30)
            check(False, "init_transactions fails against Lakestream")
        except KafkaException as e:
            print(f"transactional producer refused: {e}")
            check(time.time() - started < 20, f"init_transactions failed within 20 s, took {time.time() - started:.1f} s")

    # ListOffsets by timestamp (a producer without idempotence): the first offset at or after a
    # time between two batches.
    topic = f"times-{run}"
    create_topic(admin, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False})
    for i in range(5):
        producer.produce(topic, value=f"before {i}".encode(), partition=0)
    producer.flush(30)
    time.sleep(1.0)
    middle = int(time.time() * 1000)
    time.sleep(1.0)
    for i in range(5):
        producer.produce(topic, value=f"after {i}".encode(), partition=0)
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"unused-{run}", "enable.auto.commit": False})
    found = consumer.offsets_for_times([TopicPartition(topic, 0, middle)], timeout=30)
    check(found[0].offset == 5, f"offset for a time between the batches is 5, got {found[0].offset}")
    found = consumer.offsets_for_times([TopicPartition(topic, 0, int(time.time() * 1000) + 60_000)], timeout=30)
    check(found[0].offset in (-1, 10), f"offset for a future time is the end (-1 or 10), got {found[0].offset}")
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    check((low, high) == (0, 10), f"watermarks (0, 10), got {(low, high)}")
    # From a timestamp: consuming from the found offset gives the later batch.
    consumer.assign([TopicPartition(topic, 0, 5)])
    values = []
    deadline = time.time() + 30
    while len(values) < 5 and time.time() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            values.append(m.value())
    check(values == [f"after {i}".encode() for i in range(5)], f"consumed from the timestamp's offset: {values}")
    consumer.close()

    # An unknown topic: metadata reports UNKNOWN_TOPIC_OR_PARTITION (no auto-creation asked).
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"unused-{run}", "allow.auto.create.topics": False}
    )
    md = consumer.list_topics(topic=f"missing-{run}", timeout=30)
    err = md.topics[f"missing-{run}"].error
    check(err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, f"unknown topic error, got {err}")
    consumer.close()

    # CreatePartitions: 1 to 3; fewer than there are is INVALID_PARTITIONS.
    admin.create_partitions([NewPartitions(dup, 3)])[dup].result(timeout=30)
    deadline = time.time() + 30
    while len(admin.list_topics(topic=dup, timeout=30).topics[dup].partitions) != 3 and time.time() < deadline:
        time.sleep(0.5)
    check(len(admin.list_topics(topic=dup, timeout=30).topics[dup].partitions) == 3, "3 partitions after CreatePartitions")
    try:
        admin.create_partitions([NewPartitions(dup, 2)])[dup].result(timeout=30)
        check(False, "shrinking a topic fails")
    except KafkaException as e:
        check(e.args[0].code() == KafkaError.INVALID_PARTITIONS, f"INVALID_PARTITIONS, got {e}")

    # DeleteTopics; the topic is gone then.
    admin.delete_topics([dup])[dup].result(timeout=30)
    deadline = time.time() + 30
    while dup in admin.list_topics(timeout=30).topics and time.time() < deadline:
        time.sleep(0.5)
    check(dup not in admin.list_topics(timeout=30).topics, "a deleted topic is not listed")

    if failures:
        print(f"0 passed, {len(failures)} failed")
        sys.exit(1)
    print("kafka client test: all checks passed")


if __name__ == "__main__":
    main()
