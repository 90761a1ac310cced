//! Compacted Parquet write and read throughput, against a plain copy of the same bytes
//! measured in the same run. Compare the `thrpt` lines: write/copy and read/copy ratios say
//! what the Parquet layer costs; absolute MB/s depend on the machine.
//!
//! `cargo bench -p lakestream-format --bench parquet`

use std::hint::black_box;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use lakestream_format::compacted::{CompactedFileReader, KNOWN_BINDINGS, WriteOptions, write_compacted_file};
use lakestream_format::kafka::KAFKA_BINDING;

/// About 8 MiB of payload per iteration, in entries of the given size.
const TOTAL_BYTES: usize = 8 * 1024 * 1024;

/// Deterministic, incompressible payloads (xorshift), like already-compressed record batches.
fn payloads(size: usize) -> Vec<Bytes> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0..TOTAL_BYTES / size)
        .map(|_| {
            let bytes: Vec<u8> = (0..size)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            Bytes::from(bytes)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("compacted");
    group.sample_size(10);
    for (label, size) in [("1KiB", 1024), ("64KiB", 64 * 1024)] {
        let entries = payloads(size);
        let total: usize = entries.iter().map(Bytes::len).sum();
        group.throughput(Throughput::Bytes(total as u64));

        group.bench_with_input(BenchmarkId::new("copy", label), &entries, |b, entries| {
            b.iter(|| {
                let mut out = Vec::with_capacity(total);
                for payload in entries {
                    out.extend_from_slice(payload);
                }
                black_box(out)
            })
        });

        group.bench_with_input(BenchmarkId::new("parquet_write", label), &entries, |b, entries| {
            b.iter(|| {
                write_compacted_file(
                    KAFKA_BINDING,
                    "bench.parquet",
                    entries.iter().cloned(),
                    WriteOptions::default(),
                )
                .unwrap()
            })
        });

        let file = Bytes::from(
            write_compacted_file(
                KAFKA_BINDING,
                "bench.parquet",
                entries.iter().cloned(),
                WriteOptions::default(),
            )
            .unwrap(),
        );
        group.bench_with_input(BenchmarkId::new("parquet_read", label), &file, |b, file| {
            b.iter(|| {
                let reader = CompactedFileReader::open(file.clone(), KNOWN_BINDINGS).unwrap();
                black_box(reader.read_payloads(0..reader.row_count()).unwrap())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
