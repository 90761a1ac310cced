//! FastPFOR (`IntegratedIntCompressor`) encode and decode of entry boundaries.
//!
//! Throughput is in elements, so criterion's "elem/s" is offsets per second; its time divided
//! by n is the cost per offset.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use lakestream_format::entry_offsets;

/// Boundaries of `n` entries holding 1 to 16 records each (a deterministic pattern).
fn boundaries(n: usize) -> Vec<u32> {
    let mut total = 0u32;
    (0..n)
        .map(|i| {
            total += 1 + (i as u32 * 7919) % 16;
            total
        })
        .collect()
}

fn fastpfor(c: &mut Criterion) {
    let mut group = c.benchmark_group("fastpfor");
    for n in [1usize, 32, 128, 5000] {
        let values = boundaries(n);
        let words = entry_offsets::encode(&values).expect("encodable");
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("encode", n), &values, |b, v| {
            b.iter(|| entry_offsets::encode(black_box(v)).expect("encodable"))
        });
        group.bench_with_input(BenchmarkId::new("decode", n), &words, |b, w| {
            b.iter(|| entry_offsets::decode(black_box(w)).expect("decodable"))
        });
    }
    group.finish();
}

criterion_group!(benches, fastpfor);
criterion_main!(benches);
