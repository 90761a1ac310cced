//! Companion files of 10,000 rows (one block at the default block size): write and read,
//! against a plain copy of the decompressed content measured in the same run. Compare the
//! `thrpt` lines (rows/s); absolute numbers depend on the machine.
//!
//! `cargo bench -p lakestream-format --bench companion`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use lakestream_format::companion::{
    CompanionRow, ReadOptions, WriteOptions, read_companion, write_companion,
};

const ROWS: u64 = 10_000;

fn rows() -> Vec<CompanionRow> {
    let mut cumulative = 0;
    (0..ROWS)
        .map(|i| {
            let entry_size = 1000 + (i % 7) as u32 * 100;
            cumulative += u64::from(entry_size);
            CompanionRow {
                offset: 1_000_000 + i * 3,
                record_count: 3,
                timestamp_ms: 1_700_000_000_000 + i as i64,
                entry_size,
                cumulative_size: 50_000_000 + cumulative,
                schema_version: None,
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let rows = rows();
    let file = write_companion(&rows, WriteOptions::default()).unwrap();
    let mut content = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(file.as_slice()), &mut content).unwrap();

    let mut group = c.benchmark_group("companion_10k_rows");
    group.sample_size(20);
    group.throughput(Throughput::Elements(ROWS));
    group.bench_function("copy_content", |b| b.iter(|| black_box(content.clone())));
    group.bench_function("write", |b| {
        b.iter(|| write_companion(black_box(&rows), WriteOptions::default()).unwrap())
    });
    group.bench_function("write_gzip1", |b| {
        b.iter(|| {
            write_companion(black_box(&rows), WriteOptions { gzip_level: 1, ..WriteOptions::default() })
                .unwrap()
        })
    });
    group.bench_function("read", |b| {
        b.iter(|| read_companion(black_box(&file), ReadOptions::default()).unwrap())
    });
    let companion = read_companion(&file, ReadOptions::default()).unwrap();
    group.bench_function("lookup_x10k", |b| {
        b.iter(|| {
            (0..ROWS).map(|i| companion.row_holding(black_box(1_000_000 + i * 3 + 1)).unwrap()).sum::<usize>()
        })
    });
    group.finish();
    println!("companion of {ROWS} rows: {} gzip bytes, {} bytes decompressed", file.len(), content.len());
}

criterion_group!(benches, bench);
criterion_main!(benches);
