"""Consumer groups with a real client (confluent-kafka, librdkafka) against Kafka bootstrap
addresses, run unchanged against Lakestream and against Apache Kafka:

    python group_test.py BOOTSTRAP[,BOOTSTRAP2,...] [PID1,PID2,...]

With several addresses (Lakestream front-end processes over one deployment), consumer i
connects to address i modulo their number, so the group's members reach the group's
coordinator through different processes. With the processes' PIDs too (in the order of the
addresses; their node ids 1, 2, ...), the coordinating process is stopped (SIGTERM) while a
group consumes, and the group goes on through the other one.

Checks:
- three consumers subscribe to a topic of six partitions as one group and share them (every
  partition assigned to exactly one member); each commits every message it processes
  (synchronously) and counts a message as consumed only once its commit succeeded;
- more messages are produced while they consume; then one consumer leaves (close()), the
  other two take its partitions over and consume to the end;
- across the run every message is consumed exactly once by the group: none lost, none
  consumed twice; the committed offsets are the partitions' ends;
- ListGroups lists the group, DescribeGroups shows its two members (Stable), then Empty once
  they have left;
- OffsetCommit / OffsetFetch round-trip for a consumer that assigns its partitions itself
  (generation -1), including moving an offset back;
- given PIDs: two consumers, one through each process; the group's coordinator process stops
  while they consume; the other process takes the group over (DescribeGroups names it), both
  consumers go on, and every message is still consumed exactly once.
"""

import os
import signal
import sys
import threading
import time
import uuid

from confluent_kafka import Consumer, ConsumerGroupState, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 6
FIRST = 300  # messages before the consumers start
SECOND = 300  # messages produced while they consume

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)
    else:
        print(f"ok   {what}", flush=True)


def produce(bootstrap, topic, start, count):
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    errors = []
    for i in range(start, start + count):
        producer.produce(
            topic,
            value=f"m{i}".encode(),
            partition=i % PARTITIONS,
            on_delivery=lambda err, msg: errors.append(err) if err else None,
        )
        producer.poll(0)
    left = producer.flush(30)
    check(left == 0 and not errors, f"{count} messages produced (left {left}, errors {errors[:3]})")


class Member(threading.Thread):
    """One group member: consumes, commits each message, records what it committed."""

    def __init__(self, name, bootstrap, group, topic, consumed, lock):
        super().__init__(name=name, daemon=True)
        self.consumed, self.lock = consumed, lock
        self.assigned = set()
        self.stop = threading.Event()
        self.error = None
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 500,
                "partition.assignment.strategy": "range",
            }
        )
        self.consumer.subscribe([topic], on_assign=self.on_assign, on_revoke=self.on_revoke)

    def on_assign(self, consumer, partitions):
        self.assigned = {p.partition for p in partitions}

    def on_revoke(self, consumer, partitions):
        self.assigned = set()

    def run(self):
        try:
            while not self.stop.is_set():
                msg = self.consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    print(f"{self.name}: {msg.error()}", flush=True)
                    continue
                try:
                    self.consumer.commit(message=msg, asynchronous=False)
                except KafkaException as e:
                    # Not committed (a rebalance took the partition): whoever owns it next
                    # consumes the message again, so it does not count here.
                    print(f"{self.name}: commit of {msg.partition()}@{msg.offset()} failed: {e}", flush=True)
                    continue
                with self.lock:
                    self.consumed.append((self.name, msg.partition(), msg.offset(), msg.value().decode()))
        except Exception as e:  # noqa: BLE001 - reported as a failure
            self.error = e

    def leave(self):
        self.stop.set()
        self.join(30)
        self.consumer.close()


def wait_for(what, cond, timeout=90):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    check(False, f"{what} within {timeout} s")
    return False


def describe(admin, group):
    return admin.describe_consumer_groups([group])[group].result(timeout=30)


def failover(addresses, pids, run):
    topic, group = f"failover-{run}", f"f-{run}"
    admin = AdminClient({"bootstrap.servers": addresses[0]})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(timeout=30)
    produce(addresses[0], topic, 0, FIRST)
    consumed, lock = [], threading.Lock()
    members = [Member(f"f{i}", addresses[i], group, topic, consumed, lock) for i in range(2)]
    for m in members:
        m.start()
    wait_for("two members share the partitions", lambda: all(m.assigned for m in members))
    wait_for("a third of the messages consumed", lambda: len(consumed) >= FIRST // 3)
    coordinator = describe(admin, group).coordinator.id
    stopped = coordinator - 1
    survivor = addresses[1 - stopped]
    check(True, f"the coordinator is node {coordinator}: stopping it (pid {pids[stopped]})")
    os.kill(pids[stopped], signal.SIGTERM)
    wait_for("the coordinator's process exits", lambda: not os.path.exists(f"/proc/{pids[stopped]}"), timeout=60)
    produce(survivor, topic, FIRST, SECOND)
    wait_for("every message consumed after the coordinator stopped", lambda: len(consumed) >= FIRST + SECOND, timeout=180)
    time.sleep(2)
    d = describe(AdminClient({"bootstrap.servers": survivor}), group)
    check(d.coordinator.id == 2 - stopped, f"the other process coordinates the group now (node {d.coordinator.id})")
    check(d.state == ConsumerGroupState.STABLE and len(d.members) == 2, f"both members still in the group ({d.state}, {len(d.members)})")
    for m in members:
        m.leave()
    with lock:
        seen = [(p, o) for _, p, o, _ in consumed]
        values = sorted(int(v[1:]) for _, _, _, v in consumed)
    check(len(seen) == len(set(seen)), f"failover: no message consumed twice ({len(seen) - len(set(seen))} twice)")
    check(values == list(range(FIRST + SECOND)), f"failover: every message consumed ({len(set(values))} of {FIRST + SECOND})")


def main():
    addresses = sys.argv[1].split(",")
    bootstrap = addresses[0]
    run = uuid.uuid4().hex[:8]
    topic, group = f"group-{run}", f"g-{run}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(timeout=30)
    produce(bootstrap, topic, 0, FIRST)

    consumed, lock = [], threading.Lock()
    members = [
        Member(f"c{i}", addresses[i % len(addresses)], group, topic, consumed, lock) for i in range(3)
    ]
    for m in members:
        m.start()
    shared = wait_for(
        "three members share the six partitions",
        lambda: sorted(p for m in members for p in m.assigned) == list(range(PARTITIONS))
        and all(m.assigned for m in members),
    )
    if shared:
        check(True, f"assignments {[sorted(m.assigned) for m in members]}")
    produce(bootstrap, topic, FIRST, SECOND)
    wait_for("a third of the messages consumed", lambda: len(consumed) >= (FIRST + SECOND) // 3)

    listed = admin.list_consumer_groups().result(timeout=30)
    check(group in {g.group_id for g in listed.valid}, "ListGroups lists the group")
    d = describe(admin, group)
    check(d.state == ConsumerGroupState.STABLE and len(d.members) == 3, f"DescribeGroups: stable, 3 members ({d.state}, {len(d.members)})")

    leaving = members.pop()
    left_partitions = set(leaving.assigned)
    leaving.leave()
    check(True, f"{leaving.name} left, holding {sorted(left_partitions)}")
    wait_for(
        "the two others take its partitions over",
        lambda: sorted(p for m in members for p in m.assigned) == list(range(PARTITIONS)),
    )
    wait_for("every message consumed", lambda: len(consumed) >= FIRST + SECOND, timeout=120)
    time.sleep(2)  # anything consumed twice would show up now
    d = describe(admin, group)
    check(d.state == ConsumerGroupState.STABLE and len(d.members) == 2, f"DescribeGroups: stable, 2 members ({d.state}, {len(d.members)})")
    for m in members:
        m.stop.set()
    for m in members:
        m.join(30)
        check(m.error is None, f"{m.name} ran without error ({m.error})")

    with lock:
        seen = [(p, o) for _, p, o, _ in consumed]
        values = sorted(int(v[1:]) for _, _, _, v in consumed)
    check(len(seen) == len(set(seen)), f"no message consumed twice ({len(seen) - len(set(seen))} twice)")
    check(values == list(range(FIRST + SECOND)), f"every message consumed ({len(set(values))} of {FIRST + SECOND} distinct)")
    by_member = {}
    for name, p, _, _ in consumed:
        by_member.setdefault(name, set()).add(p)
    check(len(by_member) == 3, f"all three consumed: {sorted((k, sorted(v)) for k, v in by_member.items())}")

    # The committed offsets are the ends of the partitions.
    committed = members[0].consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    ends = [members[0].consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)]
    check([tp.offset for tp in committed] == ends, f"committed offsets {[tp.offset for tp in committed]} are the ends {ends}")
    for m in members:
        m.consumer.close()
    wait_for("the group is empty once its members left", lambda: describe(admin, group).state == ConsumerGroupState.EMPTY)

    # A consumer that assigns its partitions itself commits and fetches offsets (generation -1),
    # and may move one back.
    solo = Consumer({"bootstrap.servers": addresses[-1], "group.id": f"solo-{run}", "enable.auto.commit": False})
    solo.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 7)], asynchronous=False)
    got = solo.committed([TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 2)], timeout=30)
    check([tp.offset for tp in got] == [5, 7, -1001], f"OffsetFetch after OffsetCommit: {[tp.offset for tp in got]}")
    solo.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    got = solo.committed([TopicPartition(topic, 0)], timeout=30)
    check(got[0].offset == 3, f"an offset moved back: {got[0].offset}")
    solo.close()

    if len(sys.argv) > 2:
        failover(addresses, [int(p) for p in sys.argv[2].split(",")], run)

    if failures:
        print(f"group test: {len(failures)} failed")
        sys.exit(1)
    print("group test: all checks passed")


if __name__ == "__main__":
    main()
