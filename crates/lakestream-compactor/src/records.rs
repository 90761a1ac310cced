//! A log's index records as the compactor sees them: key, range, decoded value.

use bytes::Bytes;
use lakestream_format::entry_index::{self, IndexValue};
use lakestream_format::keys::{self, IndexKey};
use lakestream_format::{FileType, LogId, Offset};
use lakestream_meta::{MetaStore, Record, Version};

use crate::error::{CompactError, CompactResult};

/// How many records one metadata scan fetches.
const SCAN_PAGE: usize = 1000;

/// One index record of a log, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexRecord {
    /// The parsed key: end offset `e` and cumulative size `c_e`.
    pub key: IndexKey,
    /// The start offset: end offset minus `message_count`.
    pub start: Offset,
    /// The decoded value.
    pub value: IndexValue,
    /// The value bytes as stored.
    pub value_bytes: Bytes,
    /// The record's creation timestamp: the timestamp of each of its entries (RAW records).
    pub created_ms: i64,
    /// The record's version.
    pub version: Version,
}

impl IndexRecord {
    /// Parses a stored record of `log_id`; a key or value that breaks the format is an error
    /// naming the record.
    pub fn parse(log_id: LogId, record: &Record) -> CompactResult<IndexRecord> {
        let corrupt = |detail: String| CompactError::Corrupt {
            log_id,
            what: format!("index record {}", record.key),
            detail,
        };
        let key = IndexKey::parse(&record.key).map_err(|e| corrupt(e.to_string()))?;
        let value = entry_index::decode(&record.value).map_err(|e| corrupt(e.to_string()))?;
        let start = key.end_offset.checked_sub(u64::from(value.message_count())).ok_or_else(|| {
            corrupt(format!("message_count {} exceeds the end offset", value.message_count()))
        })?;
        let cumulative_start = key.cumulative_size.checked_sub(value.entry_size_bytes());
        if cumulative_start.is_none() {
            return Err(corrupt(format!(
                "entry_size_bytes {} exceeds the cumulative size {}",
                value.entry_size_bytes(),
                key.cumulative_size
            )));
        }
        Ok(IndexRecord {
            key,
            start,
            value,
            value_bytes: record.value.clone(),
            created_ms: record.created_ms,
            version: record.version,
        })
    }

    /// The exclusive end offset.
    pub fn end(&self) -> Offset {
        self.key.end_offset
    }

    /// The cumulative size at the record's start (`c` of the previous adjacent record).
    pub fn cumulative_start(&self) -> u64 {
        self.key.cumulative_size - self.value.entry_size_bytes()
    }

    /// Whether the record is RAW.
    pub fn is_raw(&self) -> bool {
        self.value.file_type() == FileType::Raw
    }

    /// The WAL object a RAW record names.
    pub fn wal_object(&self) -> Option<&str> {
        match &self.value {
            IndexValue::Raw(raw) => Some(&raw.location),
            IndexValue::Parquet(_) => None,
        }
    }

    /// The compacted file names a PARQUET record's file index lists.
    pub fn compacted_files(&self) -> Vec<&str> {
        match &self.value {
            IndexValue::Raw(_) => Vec::new(),
            IndexValue::Parquet(pq) => pq.file_index.entries().iter().map(|f| f.name.as_str()).collect(),
        }
    }
}

/// Every index record of `log_id`, in key order (ascending end offset), scanned page by page.
pub async fn scan_log(meta: &dyn MetaStore, log_id: LogId) -> CompactResult<Vec<IndexRecord>> {
    let partition = keys::partition(log_id);
    let end = keys::last_key(log_id);
    let mut start = keys::first_key(log_id);
    let mut out = Vec::new();
    loop {
        let page = meta
            .scan(&partition, &start, &end, Some(SCAN_PAGE))
            .await
            .map_err(CompactError::meta(log_id, "scanning index records"))?;
        let full = page.len() == SCAN_PAGE;
        for record in &page {
            if !keys::is_index_key_of(&record.key, log_id) {
                continue; // another partition placed on the same shard
            }
            out.push(IndexRecord::parse(log_id, record)?);
        }
        match (full, out.last()) {
            // K(L, e, MAX) sorts after the key of the record ending at e and before the next.
            (true, Some(last)) => start = keys::covering_lookup_key(log_id, last.end()),
            _ => return Ok(out),
        }
    }
}

/// The trim marker B of `log_id`, 0 when absent.
pub async fn trim_marker(meta: &dyn MetaStore, log_id: LogId) -> CompactResult<Offset> {
    let record = meta
        .get(&keys::partition(log_id), &keys::trim_marker_key(log_id))
        .await
        .map_err(CompactError::meta(log_id, "reading the trim marker"))?;
    match record {
        None => Ok(0),
        Some(r) => keys::decode_trim_marker(&r.value).map_err(|e| CompactError::Corrupt {
            log_id,
            what: keys::trim_marker_key(log_id),
            detail: e.to_string(),
        }),
    }
}
