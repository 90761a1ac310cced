"""Kafka produce and consume load with confluent-kafka (librdkafka) against a bootstrap address.

    python bench.py BOOTSTRAP LABEL [--mib 64] [--rate-mib 5] [--rate-seconds 10]

Three phases on a new topic of 4 partitions, 1 KiB messages (idempotence off, acks=all,
lz4 off: the payloads are random so compression would not help):

1. produce as fast as the client goes (`--mib` MiB): throughput, and per-message latency from
   `produce()` to the delivery report, p50/p99;
2. produce at a fixed rate (`--rate-mib` MiB/s for `--rate-seconds`): latency p50/p99;
3. consume everything from the earliest offset (partitions assigned): throughput.

Prints one JSON line with the figures (label, produce_mib_s, produce_p50_ms, produce_p99_ms,
rate_p50_ms, rate_p99_ms, consume_mib_s).
"""

import argparse
import json
import os
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

MESSAGE = 1024
PARTITIONS = 4


def percentile(values, p):
    values = sorted(values)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(len(values) * p))]


def produce(bootstrap, topic, count, rate_bytes=None):
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": False,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 256 * 1024,
        }
    )
    latencies = []
    errors = []

    def delivered(err, _msg, sent):
        if err:
            errors.append(err)
        else:
            latencies.append(time.perf_counter() - sent)

    payloads = [os.urandom(MESSAGE) for _ in range(256)]
    started = time.perf_counter()
    for i in range(count):
        if rate_bytes:
            due = started + i * MESSAGE / rate_bytes
            while time.perf_counter() < due:
                producer.poll(0.0005)
        sent = time.perf_counter()
        while True:
            try:
                producer.produce(
                    topic,
                    value=payloads[i % len(payloads)],
                    partition=i % PARTITIONS,
                    on_delivery=lambda err, msg, sent=sent: delivered(err, msg, sent),
                )
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    if errors:
        raise SystemExit(f"{len(errors)} delivery errors, first {errors[0]}")
    return elapsed, latencies


def consume(bootstrap, topic, count):
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 8 << 20,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    started = time.perf_counter()
    deadline = started + 300
    while got < count and time.perf_counter() < deadline:
        for m in consumer.consume(10000, 0.5):
            if not m.error():
                got += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    if got < count:
        raise SystemExit(f"consumed {got} of {count} within 300 s")
    return elapsed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("label")
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--rate-mib", type=float, default=5)
    ap.add_argument("--rate-seconds", type=float, default=10)
    a = ap.parse_args()
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)
    count = a.mib * 1024
    elapsed, lat = produce(a.bootstrap, topic, count)
    rate_count = int(a.rate_mib * 1024 * a.rate_seconds)
    _, rate_lat = produce(a.bootstrap, topic, rate_count, rate_bytes=a.rate_mib * (1 << 20))
    consume_elapsed = consume(a.bootstrap, topic, count + rate_count)
    print(
        json.dumps(
            {
                "label": a.label,
                "produce_mib_s": round(a.mib / elapsed, 1),
                "produce_p50_ms": round(percentile(lat, 0.5) * 1000, 1),
                "produce_p99_ms": round(percentile(lat, 0.99) * 1000, 1),
                "rate_mib_s": a.rate_mib,
                "rate_p50_ms": round(percentile(rate_lat, 0.5) * 1000, 1),
                "rate_p99_ms": round(percentile(rate_lat, 0.99) * 1000, 1),
                "consume_mib_s": round((count + rate_count) / 1024 / consume_elapsed, 1),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
