//! Retention: how far a log's oldest entries have expired under a stream's policy, and the
//! soft trim that makes them unreadable. The compactor's hard trim then removes their index
//! records and reclamation their objects.
//!
//! Only the offset index is read, never the data: an index record's key carries the log's
//! cumulative payload size at its end (`K(L, end, size)`), and its store metadata the time it
//! was created (kept when compaction replaces the value). The expiry boundary is found by a
//! binary search over offsets with covering lookups (`Higher(K(L, o, MAX))`, as R2 does), so a
//! pass costs O(log n) reads per log however long the log is.

use lakestream_format::keys::{self, IndexKey};
use lakestream_format::{LogId, Offset, entry_index};
use lakestream_meta::{Comparison, MetaError, Record};

use crate::error::TrimError;
use crate::trim::TrimOutcome;
use crate::writer::Writer;

/// A stream's retention settings; an entry expires when either limit says so.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Entries whose index record was created more than this many milliseconds ago expire.
    pub max_age_ms: Option<u64>,
    /// Entries expire once the payload bytes appended after them reach this many.
    pub max_bytes: Option<u64>,
}

impl RetentionPolicy {
    /// Whether the policy limits anything.
    pub fn is_unlimited(&self) -> bool {
        self.max_age_ms.is_none() && self.max_bytes.is_none()
    }
}

/// One index record as retention sees it.
struct Covering {
    start: Offset,
    end: Offset,
    cumulative_size: u64,
    created_ms: i64,
}

impl Writer {
    /// The first offset that `policy` keeps at `now_ms`, looking only at index records at or
    /// above `from` (the trim marker): every entry below it has expired. `None` when nothing
    /// at or above `from` has expired.
    pub async fn retention_boundary(
        &self,
        log_id: LogId,
        policy: RetentionPolicy,
        from: Offset,
        now_ms: i64,
    ) -> Result<Option<Offset>, TrimError> {
        if policy.is_unlimited() {
            return Ok(None);
        }
        let meta = self.meta();
        let partition = keys::partition(log_id);
        let meta_err = |source: MetaError| TrimError::Meta { log_id, source };
        let corrupt = |detail: String| TrimError::Corrupt { log_id, detail };
        let parse = |r: &Record| -> Result<Covering, TrimError> {
            let key = IndexKey::parse(&r.key).map_err(|e| corrupt(e.to_string()))?;
            let value =
                entry_index::decode(&r.value).map_err(|e| corrupt(format!("record {}: {e}", r.key)))?;
            let start = key
                .end_offset
                .checked_sub(u64::from(value.message_count()))
                .ok_or_else(|| corrupt(format!("record {} holds more records than its end offset", r.key)))?;
            Ok(Covering {
                start,
                end: key.end_offset,
                cumulative_size: key.cumulative_size,
                created_ms: r.created_ms,
            })
        };
        let last =
            meta.get_cmp(&partition, &keys::last_key(log_id), Comparison::Floor).await.map_err(meta_err)?;
        let Some(last) = last.filter(|r| keys::is_index_key_of(&r.key, log_id)) else {
            return Ok(None);
        };
        let last = parse(&last)?;
        let expired = |c: &Covering| {
            policy.max_age_ms.is_some_and(|age| now_ms.saturating_sub(c.created_ms) > age as i64)
                || policy
                    .max_bytes
                    .is_some_and(|max| last.cumulative_size.saturating_sub(c.cumulative_size) >= max)
        };
        // The smallest offset in [from, last.end) whose covering record has not expired.
        let (mut lo, mut hi) = (from, last.end);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let found = meta
                .get_cmp(&partition, &keys::covering_lookup_key(log_id, mid), Comparison::Higher)
                .await
                .map_err(meta_err)?;
            let Some(record) = found.filter(|r| keys::is_index_key_of(&r.key, log_id)) else {
                hi = mid; // nothing covers `mid` or anything above it
                continue;
            };
            let c = parse(&record)?;
            if expired(&c) {
                lo = c.end.max(mid + 1);
            } else {
                // The answer is at most this record's start; nothing starts in (start, mid].
                hi = c.start.clamp(lo, mid);
            }
        }
        Ok((lo > from).then_some(lo))
    }

    /// Soft-trims what `policy` expires at `now_ms`: through the entry before
    /// [`Writer::retention_boundary`] above the current trim marker (the soft trim itself
    /// keeps the log's last record). `None` when nothing more has expired.
    pub async fn enforce_retention(
        &self,
        log_id: LogId,
        policy: RetentionPolicy,
        now_ms: i64,
    ) -> Result<Option<TrimOutcome>, TrimError> {
        let marker = match self
            .meta()
            .get(&keys::partition(log_id), &keys::trim_marker_key(log_id))
            .await
            .map_err(|source| TrimError::Meta { log_id, source })?
        {
            None => 0,
            Some(r) => keys::decode_trim_marker(&r.value)
                .map_err(|e| TrimError::Corrupt { log_id, detail: format!("trim marker: {e}") })?,
        };
        match self.retention_boundary(log_id, policy, marker, now_ms).await? {
            Some(boundary) => Ok(Some(self.soft_trim(log_id, boundary - 1).await?)),
            None => Ok(None),
        }
    }
}
