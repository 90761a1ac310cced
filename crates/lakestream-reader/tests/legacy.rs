//! Reading deployments that predate format version 3 (Appendix C): per-entry index records
//! with string values and legacy WAL objects, when the reader is configured for them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::keys;
use lakestream_format::{LogId, LogRef, SystemClock};
use lakestream_meta::{InMemoryStore, MetaStore};
use lakestream_objstore::{InMemoryStore as MemObjects, ObjectPath, ObjectStore};
use lakestream_reader::{ReadError, Reader, ReaderConfig, ReaderDeps};

/// A legacy WAL object: int64 index length, 32-byte tuples (log id, entry id, payload offset,
/// payload length), then the payload region.
fn legacy_object(entries: &[(u64, u64, &[u8])]) -> Bytes {
    let mut index = Vec::new();
    let mut payloads = Vec::new();
    for (log, entry_id, payload) in entries {
        for v in [*log, *entry_id, payloads.len() as u64, payload.len() as u64] {
            index.extend_from_slice(&v.to_be_bytes());
        }
        payloads.extend_from_slice(payload);
    }
    let mut out = (index.len() as u64).to_be_bytes().to_vec();
    out.extend(index);
    out.extend(payloads);
    Bytes::from(out)
}

async fn setup(version: u8) -> (Arc<dyn MetaStore>, Reader) {
    let meta: Arc<dyn MetaStore> = Arc::new(InMemoryStore::new());
    let wal: Arc<dyn ObjectStore> = Arc::new(MemObjects::new(Arc::new(SystemClock)));
    // Log 5's entries are ids 0 and 2 of the object; entry 1 belongs to log 6.
    let object = legacy_object(&[(5, 0, b"abc"), (6, 1, b"zz"), (5, 2, b"defgh")]);
    wal.put(&ObjectPath::new("legacy/obj-1").unwrap(), object).await.unwrap();
    let p = keys::partition(LogId(5));
    let prefix = keys::index_prefix(LogId(5));
    let values: [(u64, &[u8], u64); 2] = [(2, b"abc", 0), (1, b"defgh", 2)];
    for (count, payload, entry_id) in values {
        let value = match version {
            1 => format!("{count:020}-{:020}-legacy/obj-1-{entry_id}", payload.len()),
            _ => format!("{count:020}-{:020}-legacy/obj-1-{entry_id}-RAW", payload.len()),
        };
        meta.sequenced_put(&p, &prefix, &[count, payload.len() as u64], Bytes::from(value)).await.unwrap();
    }
    let compacted: Arc<dyn ObjectStore> = Arc::new(MemObjects::new(Arc::new(SystemClock)));
    let config = ReaderConfig { format_version: version, ..ReaderConfig::default() };
    let reader = Reader::new(config, ReaderDeps { meta: meta.clone(), wal, compacted }).unwrap();
    (meta, reader)
}

fn log5() -> LogRef {
    LogRef { log_id: LogId(5), namespace: "ns".into(), stream: "s".into() }
}

// spec-rule: f315275c0f [All] All WAL objects and index records of a deployment MUST use one format versio…
#[tokio::test]
async fn version_1_and_2_deployments_are_read_when_configured() {
    for version in [1u8, 2] {
        let (_, reader) = setup(version).await;
        let batch = reader.read(&log5(), 0, 1 << 20, Duration::ZERO).await.unwrap();
        let got: Vec<_> =
            batch.entries.iter().map(|e| (e.offset, e.record_count, e.payload.to_vec())).collect();
        assert_eq!(got, vec![(0, 2, b"abc".to_vec()), (2, 1, b"defgh".to_vec())], "version {version}");
        // An offset inside the first entry returns that entry.
        let mid = reader.read(&log5(), 1, 1, Duration::ZERO).await.unwrap();
        assert_eq!(mid.entries[0].offset, 0);
    }
}

// spec-rule: f315275c0f [All] All WAL objects and index records of a deployment MUST use one format versio…
#[tokio::test]
async fn a_version_3_reader_refuses_legacy_values_with_a_clear_error() {
    let (meta, _) = setup(2).await;
    let wal: Arc<dyn ObjectStore> = Arc::new(MemObjects::new(Arc::new(SystemClock)));
    let compacted: Arc<dyn ObjectStore> = Arc::new(MemObjects::new(Arc::new(SystemClock)));
    let reader = Reader::new(ReaderConfig::default(), ReaderDeps { meta, wal, compacted }).unwrap();
    let err = reader.read(&log5(), 0, 1024, Duration::ZERO).await.unwrap_err();
    assert!(matches!(err, ReadError::Corrupt { .. }), "{err}");
    assert!(err.to_string().to_lowercase().contains("version"), "the error names the version: {err}");
}

#[test]
fn format_version_is_validated() {
    let bad = ReaderConfig { format_version: 4, ..ReaderConfig::default() };
    let deps = ReaderDeps {
        meta: Arc::new(InMemoryStore::new()),
        wal: Arc::new(MemObjects::new(Arc::new(SystemClock))),
        compacted: Arc::new(MemObjects::new(Arc::new(SystemClock))),
    };
    assert_eq!(Reader::new(bad, deps).unwrap_err().field, "format_version");
}
