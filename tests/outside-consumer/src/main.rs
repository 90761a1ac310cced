//! An outside consumer of the Lakestream library crates: writes a stream with the writer on
//! the embedded stores, compacts it, and reads it back twice, through the reader and through
//! `lakestream-format` alone. See README.md.
//!
//! Usage: `lakestream-outside-consumer DIR` (a directory that does not exist yet, or is empty).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lakestream_catalog::{Catalog, CatalogConfig};
use lakestream_compactor::{Compactor, CompactorConfig, CompactorDeps, no_progress};
use lakestream_format::compacted::{self, CompactedFileReader, KNOWN_BINDINGS};
use lakestream_format::companion;
use lakestream_format::entry_index::{self, IndexValue};
use lakestream_format::keys::{self, IndexKey};
use lakestream_format::wal::WalObject;
use lakestream_format::{LogRef, SystemClock};
use lakestream_meta::lease::RandomTokens;
use lakestream_meta::{EmbeddedStore, MetaStore};
use lakestream_objstore::{LocalFsStore, ObjectRoot, ObjectStore};
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps};
use lakestream_writer::{Writer, WriterConfig, WriterDeps};

type Error = Box<dyn std::error::Error>;

/// An entry as appended or read: first offset, record count, payload.
type Entry = (u64, u32, Bytes);

const NAMESPACE: &str = "outside";
const STREAM: &str = "orders";
const PARTITIONS: u32 = 2;
const ENTRIES_PER_ROUND: u32 = 25;

#[tokio::main]
async fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: lakestream-outside-consumer DIR");
        return ExitCode::from(2);
    };
    match run(Path::new(&dir)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lakestream-outside-consumer: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(dir: &Path) -> Result<(), Error> {
    if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
        return Err(format!("{} is not empty; give a new directory", dir.display()).into());
    }
    std::fs::create_dir_all(dir)?;
    let objects = dir.join("objects");
    let meta: Arc<dyn MetaStore> = Arc::new(EmbeddedStore::open(dir.join("metadata.redb")).await?);
    let wal: Arc<dyn ObjectStore> = Arc::new(LocalFsStore::new(&objects, ObjectRoot::parse("wal")?)?);
    let compacted: Arc<dyn ObjectStore> =
        Arc::new(LocalFsStore::new(&objects, ObjectRoot::parse("compacted")?)?);

    // 1. A stream of two partitions, one log each.
    let catalog = Catalog::new(meta.clone(), CatalogConfig::default())?;
    catalog.create_namespace(NAMESPACE, BTreeMap::new()).await?;
    let stream = catalog.create_stream(NAMESPACE, STREAM, PARTITIONS, BTreeMap::new()).await?;
    let logs: Vec<LogRef> = (0..stream.partition_count()).filter_map(|p| stream.log_ref(p)).collect();
    let log_ids: Vec<String> = stream.logs.iter().map(ToString::to_string).collect();
    println!("stream {NAMESPACE}/{STREAM}: partitions on logs {}", log_ids.join(", "));

    // 2. Appends to both partitions.
    let writer = Writer::start(
        WriterConfig::default(),
        WriterDeps {
            meta: meta.clone(),
            objects: wal.clone(),
            clock: Arc::new(SystemClock),
            tokens: Arc::new(RandomTokens),
        },
    )?;
    let mut appended: Vec<Vec<Entry>> = vec![Vec::new(); logs.len()];
    for round in 0..2 {
        append_round(&writer, &logs, round, &mut appended).await?;
    }

    // 3. One compaction pass over everything appended so far, then more appends, which stay
    //    in the WAL: the logs now have PARQUET and RAW index records.
    let compactor = Compactor::new(
        CompactorConfig { max_range_age: Duration::ZERO, ..CompactorConfig::default() },
        CompactorDeps {
            meta: meta.clone(),
            wal: wal.clone(),
            compacted: compacted.clone(),
            clock: Arc::new(SystemClock),
            tokens: Arc::new(RandomTokens),
        },
    )?;
    let report = compactor.compact_once(&logs, &no_progress).await;
    if !report.failed.is_empty() {
        return Err(format!("compaction failed: {:?}", report.failed).into());
    }
    let compacted_entries: u64 = report.ranges.iter().map(|r| r.rows).sum();
    if compacted_entries != 2 * u64::from(ENTRIES_PER_ROUND) * logs.len() as u64 {
        return Err(
            format!("compaction wrote {compacted_entries} rows; expected every entry appended").into()
        );
    }
    println!("compacted {} range(s), {compacted_entries} entries", report.ranges.len());
    append_round(&writer, &logs, 2, &mut appended).await?;
    writer.close().await;

    // 4. Through the reader.
    let reader = Reader::new(ReaderConfig::default(), ReaderDeps { meta: meta.clone(), wal, compacted })?;
    for (log, expected) in logs.iter().zip(&appended) {
        let read = read_with_reader(&reader, log).await?;
        check(log, "the reader", &read, expected)?;
    }

    // 5. Through lakestream-format alone, on the files.
    let mut kinds = (0, 0);
    for (log, expected) in logs.iter().zip(&appended) {
        let read = read_with_format(meta.as_ref(), &objects, log, &mut kinds).await?;
        check(log, "lakestream-format", &read, expected)?;
    }
    if kinds.0 == 0 || kinds.1 == 0 {
        return Err(format!(
            "expected both kinds of index records, read {} RAW and {} PARQUET",
            kinds.0, kinds.1
        )
        .into());
    }
    println!(
        "every entry read back identically through the reader and through lakestream-format \
         ({} RAW and {} PARQUET index records)",
        kinds.0, kinds.1
    );
    Ok(())
}

/// Appends `ENTRIES_PER_ROUND` entries to each log, each log's as one ordered unit, the logs
/// concurrently (they share WAL objects); records what was acknowledged.
async fn append_round(
    writer: &Writer,
    logs: &[LogRef],
    round: u32,
    appended: &mut [Vec<Entry>],
) -> Result<(), Error> {
    let mut tasks = Vec::new();
    for log in logs {
        let batch: Vec<(Bytes, u32)> = (0..ENTRIES_PER_ROUND)
            .map(|i| (Bytes::from(format!("log {} round {round} entry {i}", log.log_id)), 1 + i % 3))
            .collect();
        let (writer, log_id) = (writer.clone(), log.log_id);
        tasks.push(tokio::spawn(async move {
            let acks = writer.append_many(log_id, batch.clone()).await;
            (batch, acks)
        }));
    }
    for (task, entries) in tasks.into_iter().zip(appended.iter_mut()) {
        let (batch, acks) = task.await?;
        for (ack, (payload, record_count)) in acks.into_iter().zip(batch) {
            let ack = ack?;
            let expected_offset = entries.last().map_or(0, |(offset, count, _)| offset + u64::from(*count));
            if ack.offset != expected_offset || ack.record_count != record_count {
                return Err(format!(
                    "log {}: acknowledged at {}, expected {expected_offset}",
                    ack.log_id, ack.offset
                )
                .into());
            }
            entries.push((ack.offset, record_count, payload));
        }
    }
    Ok(())
}

/// The whole log, from its first offset to its end, through `lakestream-reader`.
async fn read_with_reader(reader: &Reader, log: &LogRef) -> Result<Vec<Entry>, Error> {
    let mut offset = reader.first_offset(log.log_id).await?;
    let end = reader.next_offset(log.log_id).await?;
    let mut entries = Vec::new();
    while offset < end {
        let batch = reader.read(log, offset, 64 * 1024, Duration::ZERO).await?;
        if batch.entries.is_empty() {
            return Err(format!(
                "log {}: the reader returned nothing at {offset}, before the end {end}",
                log.log_id
            )
            .into());
        }
        entries.extend(batch.entries.into_iter().map(|e| (e.offset, e.record_count, e.payload)));
        offset = batch.next_offset;
    }
    Ok(entries)
}

/// The whole log through `lakestream-format` alone: the log's index records from the
/// metadata store, decoded; each RAW record's WAL object and each PARQUET record's compacted
/// files and companions read as files of the local layout (`{root}/{object name}`) and
/// decoded. Counts the records of each kind in `kinds` (RAW, PARQUET).
async fn read_with_format(
    meta: &dyn MetaStore,
    objects: &Path,
    log: &LogRef,
    kinds: &mut (usize, usize),
) -> Result<Vec<Entry>, Error> {
    let log_id = log.log_id;
    let records =
        meta.scan(&keys::partition(log_id), &keys::first_key(log_id), &keys::last_key(log_id), None).await?;
    let mut entries = Vec::new();
    for record in records {
        let key = IndexKey::parse(&record.key)?;
        let value = entry_index::decode(&record.value)?;
        let start = key.end_offset - u64::from(value.message_count());
        match value {
            IndexValue::Raw(raw) => {
                kinds.0 += 1;
                let object =
                    WalObject::parse(Bytes::from(std::fs::read(objects.join("wal").join(&raw.location))?))?;
                let section = object
                    .section(log_id)
                    .ok_or_else(|| format!("{} has no section of log {log_id}", raw.location))?;
                section.check_matches_record(&raw)?;
                let payloads = object.payloads(log_id)?.unwrap_or_default();
                let mut offset = start;
                for (payload, record_count) in payloads.into_iter().zip(raw.record_counts()) {
                    entries.push((offset, record_count, payload));
                    offset += u64::from(record_count);
                }
            }
            IndexValue::Parquet(parquet) => {
                kinds.1 += 1;
                parquet.check_range(key.end_offset)?;
                let stream_dir = objects.join("compacted").join(&log.namespace).join(&log.stream);
                for file in parquet.file_index.entries() {
                    let index = std::fs::read(stream_dir.join(compacted::companion_name(&file.name)?))?;
                    let rows = companion::read_companion(&index, companion::ReadOptions::default())?;
                    let data = CompactedFileReader::open(
                        Bytes::from(std::fs::read(stream_dir.join(&file.name))?),
                        KNOWN_BINDINGS,
                    )?;
                    let payloads = data.read_payloads(0..data.row_count())?;
                    for (row, payload) in rows.rows().iter().zip(payloads) {
                        // A file may hold entries outside this record's range (after a trim).
                        if (start..key.end_offset).contains(&row.offset) {
                            entries.push((row.offset, row.record_count, payload));
                        }
                    }
                }
            }
        }
    }
    Ok(entries)
}

fn check(log: &LogRef, how: &str, read: &[Entry], expected: &[Entry]) -> Result<(), Error> {
    if read != expected {
        let first_difference =
            read.iter().zip(expected).position(|(r, e)| r != e).unwrap_or(read.len().min(expected.len()));
        return Err(format!(
            "log {}: {how} read {} entries, {} were appended; first difference at entry {first_difference}",
            log.log_id,
            read.len(),
            expected.len()
        )
        .into());
    }
    println!("log {}: {} entries read back through {how}", log.log_id, read.len());
    Ok(())
}
