package dev.lakestream.interop;

import java.io.DataOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;

import me.lemire.integercompression.differential.IntegratedIntCompressor;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.internal.CompressionType;
import org.apache.kafka.common.record.internal.ControlRecordType;
import org.apache.kafka.common.record.internal.EndTransactionMarker;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.MemoryRecordsBuilder;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.common.record.internal.SimpleRecord;
import org.apache.kafka.common.record.TimestampType;

/**
 * Writes interop fixtures produced by the Java libraries the reference implementation uses:
 *
 * <ul>
 *   <li>{@code fastpfor-cases.bin}: random increasing arrays with the words that
 *       JavaFastPFOR 0.2.1's {@code IntegratedIntCompressor.compress} returns for them;
 *   <li>{@code kafka/*.bin} + {@code kafka/manifest.tsv}: record batches built with
 *       kafka-clients' {@code MemoryRecords}, with the record count each must be counted as, or
 *       {@code refuse} for batches the Kafka binding forbids.
 * </ul>
 *
 * Usage: {@code Fixtures OUT_DIR SEED CASES}
 */
public final class Fixtures {
    private Fixtures() {}

    public static void main(String[] args) throws IOException {
        if (args.length != 3) {
            System.err.println("usage: Fixtures OUT_DIR SEED CASES");
            System.exit(2);
        }
        Path out = Path.of(args[0]);
        long seed = Long.parseLong(args[1]);
        int cases = Integer.parseInt(args[2]);
        Files.createDirectories(out.resolve("kafka"));
        writeFastPfor(out.resolve("fastpfor-cases.bin"), new Random(seed), cases);
        writeKafka(out.resolve("kafka"));
        System.out.println("fixtures written to " + out + " (seed " + seed + ", " + cases + " FastPFOR cases)");
    }

    /** Arrays of entry boundaries: strictly increasing, every value within int32. */
    static int[] randomBoundaries(Random rnd) {
        int n;
        int shape = rnd.nextInt(10);
        if (shape < 5) n = 1 + rnd.nextInt(40);
        else if (shape < 8) n = 1 + rnd.nextInt(300);
        else n = 1 + rnd.nextInt(5000);
        long maxDelta;
        switch (rnd.nextInt(4)) {
            case 0: maxDelta = 1; break;
            case 1: maxDelta = 16; break;
            case 2: maxDelta = 70_000; break;
            default: maxDelta = Integer.MAX_VALUE / n; break;
        }
        int[] a = new int[n];
        long acc = 0;
        for (int i = 0; i < n; i++) {
            long delta = 1 + (long) (rnd.nextDouble() * maxDelta);
            acc = Math.min(Integer.MAX_VALUE, acc + delta);
            if (i > 0 && acc <= a[i - 1]) {
                // Saturated at int32: keep the array strictly increasing by shortening it.
                int[] shorter = new int[i];
                System.arraycopy(a, 0, shorter, 0, i);
                return shorter;
            }
            a[i] = (int) acc;
        }
        return a;
    }

    static void writeFastPfor(Path file, Random rnd, int cases) throws IOException {
        IntegratedIntCompressor compressor = new IntegratedIntCompressor();
        try (DataOutputStream dos = new DataOutputStream(Files.newOutputStream(file))) {
            dos.write("LSFP".getBytes(StandardCharsets.US_ASCII));
            dos.writeInt(cases);
            for (int c = 0; c < cases; c++) {
                int[] a = randomBoundaries(rnd);
                int[] words = compressor.compress(a);
                int[] back = compressor.uncompress(words);
                if (!java.util.Arrays.equals(a, back)) {
                    throw new IllegalStateException("JavaFastPFOR did not round-trip case " + c);
                }
                dos.writeInt(a.length);
                for (int v : a) dos.writeInt(v);
                dos.writeInt(words.length);
                for (int w : words) dos.writeInt(w);
            }
        }
    }

    static SimpleRecord record(int i, boolean withHeaders) {
        byte[] key = ("key-" + i).getBytes(StandardCharsets.UTF_8);
        byte[] value = ("value-" + i + "-" + "x".repeat(i % 7)).getBytes(StandardCharsets.UTF_8);
        Header[] headers = withHeaders
                ? new Header[] {new RecordHeader("h" + i, ("v" + i).getBytes(StandardCharsets.UTF_8))}
                : new Header[0];
        return new SimpleRecord(1_700_000_000_000L + i, key, value, headers);
    }

    static ByteBuffer batch(byte magic, Compression compression, int records, boolean transactional) {
        ByteBuffer buf = ByteBuffer.allocate(1 << 20);
        long producerId = transactional ? 4242L : RecordBatch.NO_PRODUCER_ID;
        short epoch = transactional ? (short) 1 : RecordBatch.NO_PRODUCER_EPOCH;
        int sequence = transactional ? 0 : RecordBatch.NO_SEQUENCE;
        TimestampType tsType = magic == RecordBatch.MAGIC_VALUE_V0 ? TimestampType.NO_TIMESTAMP_TYPE : TimestampType.CREATE_TIME;
        MemoryRecordsBuilder b = MemoryRecords.builder(buf, magic, compression, tsType, 0L,
                RecordBatch.NO_TIMESTAMP, producerId, epoch, sequence, transactional,
                RecordBatch.NO_PARTITION_LEADER_EPOCH);
        for (int i = 0; i < records; i++) {
            b.append(record(i, magic >= RecordBatch.MAGIC_VALUE_V2));
        }
        return b.build().buffer();
    }

    static final class Fixture {
        final String name;
        final String expected; // record count, or "refuse"
        final List<ByteBuffer> batches = new ArrayList<>();

        Fixture(String name, String expected) {
            this.name = name;
            this.expected = expected;
        }
    }

    static void writeKafka(Path dir) throws IOException {
        List<Fixture> fixtures = new ArrayList<>();
        Compression[] v2 = {
            Compression.NONE, Compression.gzip().build(), Compression.snappy().build(),
            Compression.lz4().build(), Compression.zstd().build()
        };
        for (Compression c : v2) {
            Fixture f = new Fixture("v2-" + c.type().name, "5");
            f.batches.add(batch(RecordBatch.MAGIC_VALUE_V2, c, 5, false));
            fixtures.add(f);
        }
        Fixture multi = new Fixture("v2-three-batches", "9");
        multi.batches.add(batch(RecordBatch.MAGIC_VALUE_V2, Compression.NONE, 1, false));
        multi.batches.add(batch(RecordBatch.MAGIC_VALUE_V2, Compression.gzip().build(), 3, false));
        multi.batches.add(batch(RecordBatch.MAGIC_VALUE_V2, Compression.NONE, 5, false));
        fixtures.add(multi);

        Fixture txn = new Fixture("v2-transactional", "refuse");
        txn.batches.add(batch(RecordBatch.MAGIC_VALUE_V2, Compression.NONE, 2, true));
        fixtures.add(txn);

        Fixture control = new Fixture("v2-control", "refuse");
        control.batches.add(MemoryRecords.withEndTransactionMarker(0L, 1_700_000_000_000L,
                RecordBatch.NO_PARTITION_LEADER_EPOCH, 4242L, (short) 1,
                new EndTransactionMarker(ControlRecordType.COMMIT, 0)).buffer());
        fixtures.add(control);

        for (byte magic : new byte[] {RecordBatch.MAGIC_VALUE_V0, RecordBatch.MAGIC_VALUE_V1}) {
            for (CompressionType t : new CompressionType[] {CompressionType.NONE, CompressionType.GZIP}) {
                Fixture f = new Fixture("v" + magic + "-" + t.name, "4");
                try {
                    f.batches.add(batch(magic, Compression.of(t).build(), 4, false));
                    fixtures.add(f);
                } catch (RuntimeException e) {
                    // kafka-clients 4 may refuse to build legacy message formats; record why.
                    System.out.println("kafka-clients cannot build magic " + magic + " " + t.name + ": " + e);
                }
            }
        }

        StringBuilder manifest = new StringBuilder("# file\texpected record count or 'refuse'\n");
        for (Fixture f : fixtures) {
            try (OutputStream os = Files.newOutputStream(dir.resolve(f.name + ".bin"))) {
                for (ByteBuffer b : f.batches) {
                    byte[] bytes = new byte[b.remaining()];
                    b.duplicate().get(bytes);
                    os.write(bytes);
                }
            }
            manifest.append(f.name).append(".bin\t").append(f.expected).append('\n');
        }
        Files.writeString(dir.resolve("manifest.tsv"), manifest.toString());
    }
}
