//! WAL object encode and decode throughput, against a plain copy of the same payload bytes.
//!
//! All three cases of a group handle the same payload bytes, so their throughputs compare
//! directly: `encode / copy` is the cost of the WAL layout over the unavoidable copy.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use lakestream_format::LogId;
use lakestream_format::wal::{WalObject, WalObjectBuilder};

/// `count` payloads of `size` bytes for 4 logs, interleaved as a writer accepts them.
fn payloads(count: usize, size: usize) -> Vec<(LogId, Bytes)> {
    (0..count)
        .map(|i| {
            let byte = (i % 251) as u8;
            (LogId((i % 4) as u64), Bytes::from(vec![byte; size]))
        })
        .collect()
}

/// A writer hands its payloads over to the builder, so the routine takes them by value.
fn encode(entries: Vec<(LogId, Bytes)>) -> Bytes {
    let mut builder = WalObjectBuilder::new();
    for (log, payload) in entries {
        builder.add_entry(log, payload, 1).expect("valid entry");
    }
    builder.build().expect("valid object").bytes
}

fn plain_copy(entries: &[(LogId, Bytes)]) -> Vec<u8> {
    let total = entries.iter().map(|(_, p)| p.len()).sum();
    let mut out = Vec::with_capacity(total);
    for (_, payload) in entries {
        out.extend_from_slice(payload);
    }
    out
}

fn wal(c: &mut Criterion) {
    // About 4 MiB per object, Ursa's WAL object size: small entries and large entries.
    for (count, size) in [(4096usize, 1024usize), (64, 65536)] {
        let entries = payloads(count, size);
        let object = encode(entries.clone());
        let mut group = c.benchmark_group(format!("wal/{count}x{size}B"));
        group.throughput(Throughput::Bytes((count * size) as u64));
        group.bench_function(BenchmarkId::from_parameter("copy"), |b| {
            b.iter(|| plain_copy(black_box(&entries)))
        });
        // Cloning the handles (not the bytes) is setup, outside the measured time.
        group.bench_function(BenchmarkId::from_parameter("encode"), |b| {
            b.iter_batched(|| entries.clone(), |e| encode(black_box(e)), BatchSize::SmallInput)
        });
        group.bench_function(BenchmarkId::from_parameter("decode"), |b| {
            b.iter(|| {
                let parsed = WalObject::parse(black_box(object.clone())).expect("valid object");
                (0..4)
                    .map(|log| parsed.payloads(LogId(log)).expect("in range").map_or(0, |p| p.len()))
                    .sum::<usize>()
            })
        });
        group.finish();
    }
}

criterion_group!(benches, wal);
criterion_main!(benches);
