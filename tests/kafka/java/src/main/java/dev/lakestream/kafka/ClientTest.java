package dev.lakestream.kafka;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TransactionalIdAuthorizationException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Apache kafka-clients 4.4.0 against a bootstrap address: Admin creates topics (and gets
 * TopicExistsException for a taken name), an idempotent producer (the default) sends with every
 * compression codec, a consumer assigned the partitions reads everything back from the
 * earliest offset with keys, values, headers and timestamps intact, and offsetsForTimes finds
 * the first offset after a time between two batches. Consumer groups: the client's default
 * group protocol is "classic"; a consumer of a group subscribes, consumes part of a topic and
 * commits, another of the same group continues from the committed offsets, so every record is
 * consumed once; Admin lists the group, describes it and reads its committed offsets.
 * With a second argument "lakestream" (the Lakestream front end), also what Lakestream refuses:
 * a transactional producer's initTransactions() fails at once, and a consumer of the new
 * KIP-848 protocol (group.protocol=consumer) gets UnsupportedVersionException.
 * Prints "N passed, M failed".
 */
public final class ClientTest {
    private static int passed;
    private static final List<String> failures = new ArrayList<>();

    private static void check(boolean ok, String what) {
        if (ok) {
            passed++;
        } else {
            failures.add(what);
            System.out.println("FAIL: " + what);
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        boolean lakestream = args.length > 1 && args[1].equals("lakestream");
        String run = UUID.randomUUID().toString().substring(0, 8);
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(common)) {
            String dup = "java-dup-" + run;
            admin.createTopics(List.of(new NewTopic(dup, 1, (short) 1))).all().get();
            try {
                admin.createTopics(List.of(new NewTopic(dup, 1, (short) 1))).all().get();
                check(false, "a second CreateTopics of one name fails");
            } catch (ExecutionException e) {
                check(e.getCause() instanceof TopicExistsException, "TopicExistsException, got " + e.getCause());
            }
            for (String codec : List.of("none", "gzip", "snappy", "lz4", "zstd")) {
                String topic = "java-" + codec + "-" + run;
                admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
                roundTrip(bootstrap, topic, codec);
            }
            timestamps(bootstrap, admin, "java-times-" + run);
            groups(bootstrap, admin, "java-group-" + run);
            if (lakestream) {
                refused(bootstrap, admin, "java-refused-" + run);
            }
            admin.deleteTopics(List.of(dup)).all().get();
        }
        System.out.println(passed + " passed, " + failures.size() + " failed");
        System.exit(failures.isEmpty() ? 0 : 1);
    }

    private static KafkaProducer<byte[], byte[]> producer(String bootstrap, String codec) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("enable.idempotence", "true");
        p.put("compression.type", codec);
        p.put("linger.ms", "20");
        p.put("acks", "all");
        return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
    }

    private static KafkaConsumer<byte[], byte[]> consumer(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("enable.auto.commit", "false");
        return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    private static void roundTrip(String bootstrap, String topic, String codec) throws Exception {
        int perPartition = 30;
        List<List<ProducerRecord<byte[], byte[]>>> sent = List.of(new ArrayList<>(), new ArrayList<>());
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, codec)) {
            List<java.util.concurrent.Future<RecordMetadata>> acks = new ArrayList<>();
            for (int p = 0; p < 2; p++) {
                for (int i = 0; i < perPartition; i++) {
                    byte[] key = ("k-" + p + "-" + i).getBytes(StandardCharsets.UTF_8);
                    byte[] value = ("value " + codec + " " + p + " " + i + " ").repeat(20).getBytes(StandardCharsets.UTF_8);
                    ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, p, 1_700_000_000_000L + i, key, value);
                    r.headers().add("h", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
                    sent.get(p).add(r);
                    acks.add(producer.send(r));
                }
            }
            producer.flush();
            for (var ack : acks) {
                ack.get();
            }
        }
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap)) {
            List<TopicPartition> parts = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
            consumer.assign(parts);
            consumer.seekToBeginning(parts);
            List<List<ConsumerRecord<byte[], byte[]>>> got = List.of(new ArrayList<>(), new ArrayList<>());
            long deadline = System.currentTimeMillis() + 60_000;
            while (got.get(0).size() + got.get(1).size() < 2 * perPartition && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    got.get(r.partition()).add(r);
                }
            }
            for (int p = 0; p < 2; p++) {
                check(got.get(p).size() == perPartition, codec + " p" + p + ": " + got.get(p).size() + " consumed");
                for (int i = 0; i < Math.min(got.get(p).size(), perPartition); i++) {
                    ConsumerRecord<byte[], byte[]> r = got.get(p).get(i);
                    ProducerRecord<byte[], byte[]> s = sent.get(p).get(i);
                    boolean same = r.offset() == i
                        && java.util.Arrays.equals(r.key(), s.key())
                        && java.util.Arrays.equals(r.value(), s.value())
                        && r.timestamp() == s.timestamp()
                        && java.util.Arrays.equals(r.headers().lastHeader("h").value(), s.headers().lastHeader("h").value());
                    check(same, codec + " p" + p + " offset " + r.offset() + ": as produced");
                }
            }
        }
    }

    private static KafkaConsumer<byte[], byte[]> member(String bootstrap, String group) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("max.poll.records", "10");
        return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    /** Polls until at least {@code want} records came or 60 s passed; returns them. */
    private static List<ConsumerRecord<byte[], byte[]>> pollAtLeast(KafkaConsumer<byte[], byte[]> c, int want) {
        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 60_000;
        while (got.size() < want && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                got.add(r);
            }
        }
        return got;
    }

    private static Map<TopicPartition, OffsetAndMetadata> nextOffsets(List<ConsumerRecord<byte[], byte[]>> records) {
        Map<TopicPartition, OffsetAndMetadata> out = new HashMap<>();
        for (ConsumerRecord<byte[], byte[]> r : records) {
            out.merge(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1),
                (a, b) -> a.offset() >= b.offset() ? a : b);
        }
        return out;
    }

    private static void groups(String bootstrap, Admin admin, String topic) throws Exception {
        Object protocol = ConsumerConfig.configDef().defaultValues().get(ConsumerConfig.GROUP_PROTOCOL_CONFIG);
        check("classic".equalsIgnoreCase(String.valueOf(protocol)), "the default group.protocol is classic: " + protocol);
        admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
        int total = 90;
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, "none")) {
            for (int i = 0; i < total; i++) {
                producer.send(new ProducerRecord<>(topic, i % 3, null, ("g" + i).getBytes(StandardCharsets.UTF_8)));
            }
            producer.flush();
        }
        String group = topic + "-consumers";
        Set<String> consumed = new HashSet<>();
        int duplicates = 0;
        // The first member consumes about a third, commits what it consumed, and leaves.
        try (KafkaConsumer<byte[], byte[]> first = member(bootstrap, group)) {
            first.subscribe(List.of(topic));
            List<ConsumerRecord<byte[], byte[]>> got = pollAtLeast(first, total / 3);
            check(!got.isEmpty(), "the first member consumed " + got.size() + " records");
            first.commitSync(nextOffsets(got));
            for (ConsumerRecord<byte[], byte[]> r : got) {
                duplicates += consumed.add(new String(r.value(), StandardCharsets.UTF_8)) ? 0 : 1;
            }
        }
        // The second continues from the committed offsets.
        try (KafkaConsumer<byte[], byte[]> second = member(bootstrap, group)) {
            second.subscribe(List.of(topic));
            List<ConsumerRecord<byte[], byte[]>> got = pollAtLeast(second, total - consumed.size());
            second.commitSync(nextOffsets(got));
            for (ConsumerRecord<byte[], byte[]> r : got) {
                duplicates += consumed.add(new String(r.value(), StandardCharsets.UTF_8)) ? 0 : 1;
            }
            check(second.assignment().size() == 3, "the second member was assigned all 3 partitions: " + second.assignment());
        }
        check(duplicates == 0, "no record consumed twice by the group: " + duplicates);
        check(consumed.size() == total, "every record consumed by the group: " + consumed.size() + " of " + total);
        Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        long sum = committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
        check(committed.size() == 3 && sum == total, "Admin reads the committed offsets, the partitions' ends: " + committed);
        boolean listed = admin.listGroups().all().get().stream().anyMatch(g -> g.groupId().equals(group));
        check(listed, "Admin lists the group");
        ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
        check(d.groupState() == GroupState.EMPTY && d.members().isEmpty(), "the group is empty once its members left: " + d.groupState());
    }

    /** What Lakestream refuses: transactions, and the KIP-848 consumer group protocol. */
    private static void refused(String bootstrap, Admin admin, String topic) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", topic + "-tx");
        p.put("max.block.ms", "20000");
        long started = System.currentTimeMillis();
        try (KafkaProducer<byte[], byte[]> tx = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            tx.initTransactions();
            check(false, "initTransactions fails against Lakestream");
        } catch (TransactionalIdAuthorizationException e) {
            long took = System.currentTimeMillis() - started;
            check(took < 15_000, "initTransactions refused at once (" + took + " ms): " + e.getMessage());
        }
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", topic + "-kip848");
        c.put("group.protocol", "consumer");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30_000;
            Exception failed = null;
            while (failed == null && System.currentTimeMillis() < deadline) {
                try {
                    consumer.poll(Duration.ofMillis(200));
                } catch (Exception e) {
                    failed = e;
                }
            }
            System.out.println("group.protocol=consumer: " + failed);
            check(failed instanceof UnsupportedVersionException, "a KIP-848 consumer gets UnsupportedVersionException: " + failed);
        }
    }

    private static void timestamps(String bootstrap, Admin admin, String topic) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
        TopicPartition tp = new TopicPartition(topic, 0);
        long middle;
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, "none")) {
            for (int i = 0; i < 5; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, ("before " + i).getBytes(StandardCharsets.UTF_8))).get();
            }
            Thread.sleep(1000);
            middle = System.currentTimeMillis();
            Thread.sleep(1000);
            for (int i = 0; i < 5; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, ("after " + i).getBytes(StandardCharsets.UTF_8))).get();
            }
        }
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap)) {
            Map<TopicPartition, OffsetAndTimestamp> found = consumer.offsetsForTimes(Map.of(tp, middle));
            check(found.get(tp) != null && found.get(tp).offset() == 5, "offset for a time between the batches is 5: " + found);
            check(consumer.beginningOffsets(List.of(tp)).get(tp) == 0, "beginning offset 0");
            check(consumer.endOffsets(List.of(tp)).get(tp) == 10, "end offset 10");
        }
    }
}
