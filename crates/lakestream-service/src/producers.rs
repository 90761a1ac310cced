//! Idempotent producers: a producer id and a per-partition sequence number make a produce
//! request safe to retry. A retry of an acknowledged request, or of one whose outcome was
//! unknown, answers the original offsets and appends nothing; a request that skips sequence
//! numbers is refused.
//!
//! ## Vocabulary
//!
//! - **Producer id**: 1 to 64 characters of `A-Z a-z 0-9 . _ -`, chosen by the client (a
//!   UUID is a good choice). One id names one producer's state in every partition.
//! - **Sequence**: the sequence number of a request's first entry in this partition; the
//!   request's `n` entries take `sequence .. sequence + n`. A producer's first request to a
//!   partition has sequence 0; each following one starts where the last acknowledged ended.
//!   A caller may number something else than entries: the Kafka front end numbers records,
//!   as Kafka producers do, and says how far each request moves the sequence
//!   ([`ProducerSequence::advance`], kept in the state as `advance`).
//!
//! ## The state record
//!
//! One record per producer and partition, in the partition's own metadata partition `P(L)`
//! (so a stream's producers spread over the store like its logs):
//!
//! ```text
//! key                                         value (JSON)
//! /lakestream-producers/{L:020}/{producer}    {"v":1,"next_sequence":7,"last":{"sequence":5,"entries":2,
//!                                              "state":"done","first_offset":40,"end_offset":42,"timestamp_ms":…}}
//!                                             {"v":1,"next_sequence":5,"last":{"sequence":5,"entries":2,
//!                                              "state":"pending","tail_before":40,"object":"…"}}
//! ```
//!
//! Keys begin with `/`, so they never take the form `{L:020}-…` of index records.
//!
//! ## One request
//!
//! 1. Read the state. A `pending` last request (its outcome unknown: the server crashed or the
//!    index put's outcome was unknown) is **resolved** first: it committed if and only if an
//!    index record of the log above `tail_before` points at its WAL object `object` (no
//!    `object` means its index put was never issued). A committed one becomes `done` with
//!    the offsets found; one that did not commit frees its sequence.
//! 2. Decide: sequence = `next_sequence` is new; sequence = the last request's (done) is a
//!    retry, answered with the stored offsets (the entries' record counts must match); any
//!    other is refused with `out_of_sequence`, naming the expected sequence.
//! 3. A new request writes `pending` (compare-and-set on the version read), appends with a
//!    publish gate that records the WAL object's name in the pending state (compare-and-set
//!    again) just before the index put, and then writes `done`. Any compare-and-set lost to a
//!    concurrent request for the same producer refuses the request before its index put, so
//!    two concurrent requests with one sequence never both append.
//!
//! In one process, requests of one producer to one partition run one at a time, each to its
//! end even if its client went away, so a retry never overtakes the request it retries.
//!
//! ## Expiry
//!
//! A producer's state on a partition that nothing has written for `[producers] idle_expiry`
//! (default 7 days) is deleted by a sweep of the writer role ([`expire_idle`]), with a delete
//! conditional on the version it read, so a request racing the sweep keeps its record. A
//! producer that comes back after that starts again: its next request must have sequence 0
//! (any other is refused with `out_of_sequence`, naming 0), and a retry of a request made
//! before the expiry is no longer recognized. Kafka expires idle producer ids the same way.
//!
//! ## Guarantee and limits
//!
//! Every entry is stored exactly once while the log's index records above the unresolved
//! request are RAW records (compaction rewrites records into PARQUET ones, which no longer
//! name the WAL object; it works on data older than its minimum age, minutes by default). A
//! request's index put still in flight on the network from a process that died is assumed to
//! have landed or been dropped by the time a retry reaches a new process.

use std::sync::Arc;

use bytes::Bytes;
use lakestream_catalog::Stream;
use lakestream_format::entry_index::{self, IndexValue};
use lakestream_format::keys::{self, IndexKey};
use lakestream_format::{ErrorClass, LogId, LogRef};
use lakestream_meta::{MetaError, MetaStore, PutCondition, Version};
use lakestream_writer::{AppendAck, AppendError};
use serde::{Deserialize, Serialize};

use crate::api::{ApiError, ApiResult, ErrorKind};

/// The longest producer id.
pub const MAX_PRODUCER_ID: usize = 64;

/// Index records read per page while resolving an unknown outcome.
const RESOLVE_PAGE: usize = 1000;

/// A validated producer id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProducerId(String);

impl ProducerId {
    /// Checks `id`: 1 to [`MAX_PRODUCER_ID`] characters of `A-Z a-z 0-9 . _ -`.
    pub fn parse(id: &str) -> ApiResult<Self> {
        if id.is_empty() || id.len() > MAX_PRODUCER_ID {
            return Err(ApiError::invalid(format!(
                "producer_id: must be 1 to {MAX_PRODUCER_ID} characters, not {}",
                id.len()
            )));
        }
        if let Some(c) = id.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
            return Err(ApiError::invalid(format!(
                "producer_id: {c:?} is not allowed; use A-Z, a-z, 0-9, '.', '_' and '-'"
            )));
        }
        Ok(ProducerId(id.to_owned()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An idempotent producer's part of a produce request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerSequence {
    /// The producer.
    pub id: ProducerId,
    /// The sequence number of the request's first entry in this partition.
    pub sequence: u64,
    /// How far the request moves the producer's sequence: `None`, by its entry count (the
    /// HTTP and gRPC rule); `Some(n)`, by `n` (the Kafka front end: a Kafka producer numbers
    /// records, so `n` is the request's record count). At least 1.
    pub advance: Option<u64>,
}

impl ProducerSequence {
    /// How far a request of `entries` entries moves the sequence.
    pub fn advance_of(&self, entries: u32) -> u64 {
        self.advance.unwrap_or(u64::from(entries))
    }
}

/// The state record's key for `producer` on `log_id`.
pub fn state_key(log_id: LogId, producer: &ProducerId) -> String {
    keys::producer_state_key(log_id, producer.as_str())
}

/// What one expiry sweep of a log did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExpiryStats {
    /// State records read.
    pub scanned: usize,
    /// Records deleted (idle for longer than the expiry).
    pub expired: usize,
    /// Idle records written again between the scan and the delete, and so kept.
    pub raced: usize,
}

/// Records read per page of a sweep.
const EXPIRY_PAGE: usize = 1000;

/// Deletes the producer states of `log_id` that nothing has written for `idle_ms` by
/// `now_ms` (by the metadata store's modification time). Each delete is conditional on the
/// version read: a state written meanwhile is kept.
pub async fn expire_idle(
    meta: &dyn MetaStore,
    log_id: LogId,
    now_ms: i64,
    idle_ms: i64,
) -> ApiResult<ExpiryStats> {
    let partition = keys::partition(log_id);
    let (mut start, end) = keys::producer_state_range(log_id);
    let mut stats = ExpiryStats::default();
    loop {
        let page = meta
            .scan(&partition, &start, &end, Some(EXPIRY_PAGE))
            .await
            .map_err(|e| meta_error("listing producer states", e))?;
        stats.scanned += page.len();
        for record in &page {
            if now_ms.saturating_sub(record.modified_ms) <= idle_ms {
                continue;
            }
            match meta.delete_if_version(&partition, &record.key, record.version).await {
                Ok(()) => stats.expired += 1,
                Err(MetaError::VersionMismatch { .. }) => stats.raced += 1,
                Err(e) => return Err(meta_error("deleting an idle producer state", e)),
            }
        }
        match page.last() {
            // The next page starts just after the last key read: '-' is the smallest
            // character a producer id may hold, so no id sorts between the two.
            Some(last) if page.len() == EXPIRY_PAGE => start = format!("{}-", last.key),
            _ => return Ok(stats),
        }
    }
}

/// Sweeps every partition of every stream each `interval`, deleting producer states idle for
/// longer than `idle`, until `stop`.
pub(crate) async fn run_expiry(
    stack: crate::stack::Stack,
    idle: std::time::Duration,
    interval: std::time::Duration,
    metrics: Arc<crate::metrics::Metrics>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    use std::sync::atomic::Ordering;
    let idle_ms = i64::try_from(idle.as_millis()).unwrap_or(i64::MAX);
    // References moved into each visit: the visits borrow from this function, not the closure.
    let (stack, metrics) = (&stack, &metrics);
    let visit = move |p: usize, log: LogRef, ()| async move {
        match expire_idle(stack.meta.as_ref(), log.log_id, stack.clock.now_ms(), idle_ms).await {
            Ok(stats) => {
                metrics.producer_states_expired.fetch_add(stats.expired as u64, Ordering::Relaxed);
                if stats.expired > 0 {
                    tracing::info!(namespace = %log.namespace, stream = %log.stream, partition = p, expired = stats.expired, "idle producer states deleted");
                }
            }
            Err(e) => {
                metrics.producer_expiry_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(namespace = %log.namespace, stream = %log.stream, partition = p, error = %e, "producer expiry failed; retried next sweep");
            }
        }
    };
    let every_stream = |_: &Stream| Some(());
    crate::background::sweep::every_partition(
        stack,
        interval,
        "producer expiry skipped",
        stop,
        every_stream,
        visit,
    )
    .await;
}

/// The last request of a producer on a partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastRequest {
    /// Its sequence number.
    pub sequence: u64,
    /// How many entries it held.
    pub entries: u32,
    /// How far it moved the sequence, when not by `entries` ([`ProducerSequence::advance`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advance: Option<u64>,
    /// Its outcome.
    #[serde(flatten)]
    pub state: RequestState,
}

impl LastRequest {
    /// The sequence after this request.
    pub fn next_sequence(&self) -> u64 {
        self.sequence + self.advance.unwrap_or(u64::from(self.entries))
    }
}

/// Where a request stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RequestState {
    /// Being appended, or its outcome is unknown.
    Pending {
        /// The log's next offset before the request was appended: its entries, if appended,
        /// are above it.
        tail_before: u64,
        /// The WAL object holding the entries, once its index put is about to be made.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        object: Option<String>,
    },
    /// Appended at these offsets.
    Done {
        /// The first entry's offset.
        first_offset: u64,
        /// The offset after the last entry's last record.
        end_offset: u64,
        /// The entries' timestamp.
        timestamp_ms: i64,
    },
}

/// A producer's state on one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerState {
    /// The format version, 1.
    pub v: u32,
    /// The sequence the next new request must start at.
    pub next_sequence: u64,
    /// The last request, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<LastRequest>,
}

impl Default for ProducerState {
    fn default() -> Self {
        ProducerState { v: 1, next_sequence: 0, last: None }
    }
}

fn meta_error(what: &str, e: MetaError) -> ApiError {
    let kind = match e.class() {
        ErrorClass::Conflict => ErrorKind::Contended,
        class => ErrorKind::of_class(class),
    };
    ApiError::new(kind, format!("{what}: {e}"))
}

/// The state record of one producer on one log, with compare-and-set writes.
#[derive(Debug, Clone)]
pub struct StateRecord {
    meta: Arc<dyn MetaStore>,
    log_id: LogId,
    key: String,
}

impl StateRecord {
    /// The record of `producer` on `log_id`.
    pub fn new(meta: Arc<dyn MetaStore>, log_id: LogId, producer: &ProducerId) -> Self {
        StateRecord { meta, log_id, key: state_key(log_id, producer) }
    }

    /// The state and its version (`None`: no record yet).
    pub async fn read(&self) -> ApiResult<(ProducerState, Option<Version>)> {
        let record = self
            .meta
            .get(&keys::partition(self.log_id), &self.key)
            .await
            .map_err(|e| meta_error("reading the producer state", e))?;
        match record {
            None => Ok((ProducerState::default(), None)),
            Some(r) => {
                let state: ProducerState = serde_json::from_slice(&r.value).map_err(|e| {
                    ApiError::new(ErrorKind::CorruptData, format!("producer state {}: {e}", self.key))
                })?;
                Ok((state, Some(r.version)))
            }
        }
    }

    /// Writes `state` if the record is still at `version` (`None`: absent). A lost race is
    /// [`ErrorKind::Contended`].
    pub async fn write(&self, state: &ProducerState, version: Option<Version>) -> ApiResult<Version> {
        let value = Bytes::from(
            serde_json::to_vec(state).map_err(|e| ApiError::new(ErrorKind::Internal, e.to_string()))?,
        );
        let condition = match version {
            None => PutCondition::IfAbsent,
            Some(v) => PutCondition::IfVersion(v),
        };
        match self.meta.put(&keys::partition(self.log_id), &self.key, value, condition).await {
            Ok(written) => Ok(written.version),
            Err(MetaError::VersionMismatch { .. } | MetaError::KeyExists { .. }) => Err(ApiError::new(
                ErrorKind::Contended,
                "producer state changed concurrently (another request of the same producer); retry",
            )),
            Err(e) => Err(meta_error("writing the producer state", e)),
        }
    }

    /// Whether the pending request's entries were published: the offsets of the RAW index
    /// record above `tail_before` that points at `object`, if there is one.
    pub async fn find_published(&self, tail_before: u64, object: &str) -> ApiResult<Option<(u64, u64, i64)>> {
        let partition = keys::partition(self.log_id);
        let end = keys::last_key(self.log_id);
        let mut start = keys::covering_lookup_key(self.log_id, tail_before);
        loop {
            let page = self
                .meta
                .scan(&partition, &start, &end, Some(RESOLVE_PAGE))
                .await
                .map_err(|e| meta_error("resolving an unknown outcome", e))?;
            let full = page.len() == RESOLVE_PAGE;
            for record in &page {
                if !keys::is_index_key_of(&record.key, self.log_id) {
                    continue;
                }
                let (Ok(key), Ok(value)) = (IndexKey::parse(&record.key), entry_index::decode(&record.value))
                else {
                    continue;
                };
                if let IndexValue::Raw(raw) = value
                    && raw.location == object
                {
                    let first = key.end_offset.saturating_sub(u64::from(raw.message_count));
                    return Ok(Some((first, key.end_offset, record.created_ms)));
                }
            }
            match page.last() {
                Some(last) if full => start = format!("{}\u{0}", last.key),
                _ => return Ok(None),
            }
        }
    }
}

/// What to do with a request, given the producer's (resolved) state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// A new request: append it.
    Append,
    /// A retry of the last request, which was appended: answer these acknowledgements.
    Duplicate(Vec<AppendAck>),
}

/// Decides what a request with `sequence` and entries of `record_counts` is, against a state
/// with no pending request.
pub fn decide(
    log_id: LogId,
    state: &ProducerState,
    sequence: u64,
    record_counts: &[u32],
) -> ApiResult<Decision> {
    if sequence == state.next_sequence {
        return Ok(Decision::Append);
    }
    if let Some(LastRequest {
        sequence: last,
        entries,
        state: RequestState::Done { first_offset, end_offset, timestamp_ms },
        ..
    }) = &state.last
        && *last == sequence
    {
        let records: u64 = record_counts.iter().map(|n| u64::from(*n)).sum();
        if *entries as usize != record_counts.len() || records != end_offset - first_offset {
            return Err(ApiError::new(
                ErrorKind::OutOfSequence,
                format!(
                    "sequence {sequence} was a request of {entries} entries and {} records; this retry \
                     has {} entries and {records} records",
                    end_offset - first_offset,
                    record_counts.len()
                ),
            )
            .with_next_sequence(state.next_sequence));
        }
        let mut offset = *first_offset;
        let acks = record_counts
            .iter()
            .map(|n| {
                let ack = AppendAck { log_id, offset, record_count: *n, timestamp_ms: *timestamp_ms };
                offset += u64::from(*n);
                ack
            })
            .collect();
        return Ok(Decision::Duplicate(acks));
    }
    let why = if sequence > state.next_sequence {
        "a gap: sequences must follow each other"
    } else {
        "already used, and only the last request's offsets are kept"
    };
    Err(ApiError::new(
        ErrorKind::OutOfSequence,
        format!("sequence {sequence}: the next expected sequence is {}; {why}", state.next_sequence),
    )
    .with_next_sequence(state.next_sequence))
}

/// The pending state of a request about to be appended.
pub fn pending(state: &ProducerState, sequence: u64, entries: u32, tail_before: u64) -> ProducerState {
    ProducerState {
        v: 1,
        next_sequence: state.next_sequence,
        last: Some(LastRequest {
            sequence,
            entries,
            advance: None,
            state: RequestState::Pending { tail_before, object: None },
        }),
    }
}

/// The pending state of `producer`'s request of `entries` entries, about to be appended:
/// [`pending`], keeping how far the request moves the sequence.
pub fn pending_of(
    state: &ProducerState,
    producer: &ProducerSequence,
    entries: u32,
    tail_before: u64,
) -> ProducerState {
    let mut out = pending(state, producer.sequence, entries, tail_before);
    if let Some(last) = out.last.as_mut() {
        last.advance = producer.advance;
    }
    out
}

/// Turns an error of the publish gate into the writer's refusal.
pub fn gate_refusal(log_id: LogId, e: &ApiError) -> AppendError {
    let class = match e.kind() {
        ErrorKind::OutcomeUnknown => ErrorClass::Retryable, // The index put was not made.
        ErrorKind::Contended => ErrorClass::Conflict,
        _ => ErrorClass::Retryable,
    };
    AppendError::GateRefused { log_id, reason: e.message().to_owned(), class }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_ids_are_checked() {
        assert!(ProducerId::parse("p-1_a.B").is_ok());
        for bad in ["", "has space", "ü", "a/b", &"x".repeat(65)] {
            let e = ProducerId::parse(bad).unwrap_err();
            assert!(e.message().starts_with("producer_id"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn decisions_follow_the_sequence() {
        let log = LogId(3);
        let fresh = ProducerState::default();
        assert_eq!(decide(log, &fresh, 0, &[1]).unwrap(), Decision::Append);
        assert_eq!(decide(log, &fresh, 1, &[1]).unwrap_err().kind(), ErrorKind::OutOfSequence);
        let done = ProducerState {
            v: 1,
            next_sequence: 7,
            last: Some(LastRequest {
                sequence: 5,
                entries: 2,
                advance: None,
                state: RequestState::Done { first_offset: 40, end_offset: 43, timestamp_ms: 9 },
            }),
        };
        assert_eq!(decide(log, &done, 7, &[1]).unwrap(), Decision::Append);
        let Decision::Duplicate(acks) = decide(log, &done, 5, &[2, 1]).unwrap() else { panic!() };
        assert_eq!((acks[0].offset, acks[1].offset, acks[1].record_count), (40, 42, 1));
        assert_eq!(decide(log, &done, 5, &[1]).unwrap_err().kind(), ErrorKind::OutOfSequence);
        assert_eq!(decide(log, &done, 4, &[1]).unwrap_err().kind(), ErrorKind::OutOfSequence);
        assert_eq!(decide(log, &done, 8, &[1]).unwrap_err().kind(), ErrorKind::OutOfSequence);
        // Every refusal names the expected sequence.
        for (sequence, counts) in [(5, &[1][..]), (4, &[1]), (8, &[1])] {
            assert_eq!(decide(log, &done, sequence, counts).unwrap_err().next_sequence(), Some(7));
        }
    }

    #[test]
    fn a_request_may_advance_the_sequence_by_its_records() {
        // A Kafka producer's batch of 10 records at sequence 20 is one entry; the next batch
        // starts at 30.
        let producer =
            ProducerSequence { id: ProducerId::parse("kafka-7-0").unwrap(), sequence: 20, advance: Some(10) };
        assert_eq!(producer.advance_of(1), 10);
        let last = LastRequest {
            sequence: 20,
            entries: 1,
            advance: Some(10),
            state: RequestState::Pending { tail_before: 3, object: None },
        };
        assert_eq!(last.next_sequence(), 30);
        assert_eq!(LastRequest { advance: None, ..last }.next_sequence(), 21);
    }

    #[test]
    fn state_round_trips_as_documented() {
        let state = pending(&ProducerState::default(), 0, 2, 40);
        let json = serde_json::to_string(&state).unwrap();
        assert_eq!(
            json,
            r#"{"v":1,"next_sequence":0,"last":{"sequence":0,"entries":2,"state":"pending","tail_before":40}}"#
        );
        assert_eq!(serde_json::from_str::<ProducerState>(&json).unwrap(), state);
        let producer =
            ProducerSequence { id: ProducerId::parse("kafka-1-0").unwrap(), sequence: 0, advance: Some(10) };
        let kafka = pending_of(&ProducerState::default(), &producer, 1, 40);
        let json = serde_json::to_string(&kafka).unwrap();
        assert_eq!(
            json,
            r#"{"v":1,"next_sequence":0,"last":{"sequence":0,"entries":1,"advance":10,"state":"pending","tail_before":40}}"#
        );
        assert_eq!(serde_json::from_str::<ProducerState>(&json).unwrap(), kafka);
    }
}
