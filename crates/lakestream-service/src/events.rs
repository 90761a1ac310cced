//! CloudEvents on every stream: deduplicated ingest and consumption as CloudEvents
//! (docs/cloudevents.md).
//!
//! | method | path | what |
//! |---|---|---|
//! | POST | `/v1/namespaces/{ns}/streams/{stream}/events[?partition=p]` | ingest: binary, structured or batched mode |
//! | GET | `…/streams/{stream}/partitions/{p}/events?offset=&max_bytes=&max_wait_ms=&mode=` | consume as CloudEvents |
//!
//! [`ingest`] and [`consume`] take a [`Stack`] and are shared by the HTTP and gRPC bindings of
//! the server, which only decode and encode.
//!
//! **Offsets.** An ingest request appends one entry per stream partition it touches: one
//! Kafka record batch holding that partition's new events in request order. An entry whose
//! first offset is `o` and which holds `n` records takes offsets `[o, o+n)` (as the writer
//! assigns them), so the event at record index `i` has offset `o + i`; that is the offset
//! ingest answers and consume takes and reports.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bytes::Bytes;
use lakestream_catalog::{CatalogError, Stream};
use lakestream_cloudevents::ledger::{ClaimResult, EventClaim, Key, LedgerError, Placement, Scope};
use lakestream_cloudevents::{AttrType, Attribute, CeError, CloudEvent, Data, json, kafka};
use lakestream_format::{Entry, ErrorClass, LogRef};
use lakestream_reader::ReadError;
use lakestream_writer::AppendError;
use serde::Serialize;

use crate::stack::Stack;

/// The `type` of a synthesized envelope around a record that is not a CloudEvent.
pub const RECORD_EVENT_TYPE: &str = "dev.lakestream.record";

/// The response header naming the offset to consume from next.
pub const NEXT_OFFSET_HEADER: &str = "lakestream-next-offset";

/// The response header naming the offset of each event returned (comma-separated, in order).
pub const OFFSETS_HEADER: &str = "lakestream-offsets";

/// How often the server deletes expired ledger records.
pub const CLEANUP_INTERVAL: Duration = Duration::from_secs(60);

/// Why an ingest or consume call failed. Each variant has an [`ErrorClass`].
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    /// An event, or the message carrying it, breaks a CloudEvents rule (names the attribute).
    #[error(transparent)]
    Event(#[from] CeError),
    /// A bad request parameter.
    #[error("{0}")]
    InvalidArgument(String),
    /// The request is not a CloudEvents message at all (HTTP 415).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The partition does not exist.
    #[error("{0}")]
    NoPartition(String),
    /// A partition's entry would exceed the writer's largest entry.
    #[error("{0}")]
    TooLarge(String),
    /// This process does not serve the role the call needs.
    #[error("this process does not serve the {0} role")]
    RoleNotServed(&'static str),
    /// The catalog failed (including an unknown stream).
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The deduplication ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// An append failed.
    #[error("append to partition {partition}: {source}")]
    Append {
        /// The stream partition.
        partition: u32,
        /// Why.
        source: AppendError,
    },
    /// A read failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The claims grew too old to append safely (the process stalled); nothing was appended.
    #[error("the request's deduplication claims aged before the append could start; retry")]
    Stale,
    /// A bug: something we built ourselves was refused.
    #[error("internal error: {0}")]
    Internal(String),
}

impl EventsError {
    /// Its row in the API's error table (HTTP status, gRPC code, stable code).
    pub fn kind(&self) -> crate::api::ErrorKind {
        use crate::api::ErrorKind;
        match self {
            EventsError::UnsupportedMediaType(_) => ErrorKind::UnsupportedMediaType,
            EventsError::TooLarge(_) => ErrorKind::TooLarge,
            EventsError::RoleNotServed(_) => ErrorKind::RoleNotServed,
            EventsError::Append { source: AppendError::Backpressure, .. } => ErrorKind::Backpressure,
            other => ErrorKind::of_class(other.class()),
        }
    }

    /// What the caller should do about the error.
    pub fn class(&self) -> ErrorClass {
        match self {
            EventsError::Event(e) => e.class(),
            EventsError::InvalidArgument(_)
            | EventsError::UnsupportedMediaType(_)
            | EventsError::TooLarge(_) => ErrorClass::InvalidInput,
            EventsError::NoPartition(_) => ErrorClass::NotFound,
            EventsError::RoleNotServed(_) => ErrorClass::Internal,
            EventsError::Catalog(e) => e.class(),
            EventsError::Ledger(e) => e.class(),
            EventsError::Append { source, .. } => source.class(),
            EventsError::Read(e) => e.class(),
            EventsError::Stale => ErrorClass::Retryable,
            EventsError::Internal(_) => ErrorClass::Internal,
        }
    }
}

/// How one event of an ingest request ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventResult {
    /// The event's `id`.
    pub id: String,
    /// The event's `source`.
    pub source: String,
    /// `appended`, or `duplicate` of an event appended before (within the window or earlier
    /// in the same request); `partition` and `offset` then name the original.
    pub status: EventStatus,
    /// The stream partition.
    pub partition: u32,
    /// The event's offset in that partition.
    pub offset: u64,
}

/// An ingested event's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventStatus {
    /// Appended by this request.
    Appended,
    /// Appended before; not appended again.
    Duplicate,
}

/// The answer to [`ingest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IngestOutcome {
    /// Every event is appended or a duplicate, in request order.
    Done(Vec<EventResult>),
    /// An event is being appended by another request; nothing was appended. Retrying the
    /// whole request after `retry_after` is safe.
    InFlight {
        /// The request index of the first event found in flight.
        index: usize,
        /// When to retry.
        retry_after: Duration,
    },
}

fn partition_u32(p: usize) -> u32 {
    u32::try_from(p).unwrap_or(u32::MAX)
}

/// Ingests `events` into `namespace/stream`, deduplicated on source + id (see the module
/// and docs/cloudevents.md): claim every key, append each partition's new events as one
/// entry, record where they landed. `partition` forces the partition of every event;
/// otherwise each event goes where Kafka's default partitioner puts its key (`partitionkey`,
/// else `subject`), or, without a key, where its deduplication key hashes.
pub async fn ingest(
    stack: &Stack,
    namespace: &str,
    stream: &str,
    partition: Option<u32>,
    events: Vec<CloudEvent>,
) -> Result<IngestOutcome, EventsError> {
    let writer = stack.writer.as_ref().ok_or(EventsError::RoleNotServed("writer"))?;
    let stream = stack.catalog.get_stream(namespace, stream).await?;
    let count = partition_u32(stream.partition_count());
    let Some(&first_log) = stream.logs.first() else {
        return Err(EventsError::NoPartition(format!(
            "stream {namespace}/{} has no partitions",
            stream.name
        )));
    };
    if let Some(p) = partition.filter(|p| *p >= count) {
        return Err(EventsError::NoPartition(format!(
            "partition: stream {namespace}/{} has {count} partitions; no partition {p}",
            stream.name
        )));
    }
    if events.is_empty() {
        return Ok(IngestOutcome::Done(Vec::new()));
    }
    let targets: Vec<u32> = events
        .iter()
        .map(|e| {
            partition
                .or_else(|| lakestream_cloudevents::partition::partition_for_event(e, count))
                .unwrap_or(0)
        })
        .collect();
    let keys: Vec<Key> = events.iter().map(CloudEvent::dedup_key).collect();
    let ledger = &stack.ledger;
    let mut claim = match ledger.claim(Scope(first_log), &keys).await? {
        ClaimResult::Claimed(claim) => claim,
        ClaimResult::InFlight { index, retry_after } => {
            return Ok(IngestOutcome::InFlight { index, retry_after });
        }
    };

    // New events grouped per partition, in request order: one entry (one record batch) each.
    let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (index, state) in claim.events().iter().enumerate() {
        if *state == EventClaim::New {
            groups.entry(targets[index]).or_default().push(index);
        }
    }
    let now_ms = ledger.clock().now_ms();
    let mut payloads = Vec::with_capacity(groups.len());
    for (p, indexes) in &groups {
        let batch: Vec<CloudEvent> = indexes.iter().map(|&i| events[i].clone()).collect();
        let encoded = match kafka::encode_events(&batch, now_ms) {
            Ok(encoded) => encoded,
            Err(e) => {
                ledger.release(&mut claim).await;
                return Err(e.into());
            }
        };
        if encoded.len() > writer.config().max_entry_bytes {
            ledger.release(&mut claim).await;
            return Err(EventsError::TooLarge(format!(
                "the {} events for partition {p} encode to {} bytes, more than the largest entry ({})",
                batch.len(),
                encoded.len(),
                writer.config().max_entry_bytes
            )));
        }
        let log = stream.logs[*p as usize];
        payloads.push((*p, log, indexes.clone(), Bytes::from(encoded)));
    }
    if !claim.is_fresh(ledger.clock().now_ms()) {
        ledger.release(&mut claim).await;
        return Err(EventsError::Stale);
    }
    let appends = payloads.iter().map(|(_, log, indexes, payload)| {
        writer.append(*log, payload.clone(), u32::try_from(indexes.len()).unwrap_or(u32::MAX))
    });
    let acks = futures::future::join_all(appends).await;
    let mut placements: HashMap<Key, Placement> = HashMap::new();
    let mut first_error = None;
    for ((p, log, indexes, _), ack) in payloads.iter().zip(acks) {
        match ack {
            Ok(ack) => {
                if let Some(reader) = &stack.reader {
                    reader.notify_appended_to(*log, ack.end_offset());
                }
                for (record, &i) in indexes.iter().enumerate() {
                    placements
                        .insert(keys[i], Placement { partition: *p, offset: ack.offset + record as u64 });
                }
            }
            Err(e) => {
                if e.class() == ErrorClass::OutcomeUnknown {
                    // The entry may be in the log: leave these claims to lapse rather than
                    // let a retry append them again at once.
                    for &i in indexes {
                        claim.abandon(&keys[i]);
                    }
                }
                first_error.get_or_insert(EventsError::Append { partition: *p, source: e });
            }
        }
    }
    // Claims without a placement (definitely failed appends) are released by `complete`.
    match ledger.complete(&mut claim, &placements).await {
        Ok(done) if done.lost > 0 => tracing::warn!(
            lost = done.lost,
            "ingest completed after its claims lapsed and were taken over: those events may be appended twice"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(
            error = %e,
            "could not record appended events in the deduplication ledger; their claims lapse and a retry after that appends them again"
        ),
    }
    if let Some(e) = first_error {
        // Partitions appended before the failure are recorded: a retry of the whole request
        // answers them as duplicates and appends only the rest.
        return Err(e);
    }
    let placement_of = |index: usize| match claim.events()[index] {
        EventClaim::Duplicate(placement) => Some(placement),
        _ => placements.get(&keys[index]).copied(),
    };
    let mut results = Vec::with_capacity(events.len());
    for (index, event) in events.iter().enumerate() {
        let (status, placement) = match claim.events()[index] {
            EventClaim::New => (EventStatus::Appended, placement_of(index)),
            EventClaim::Duplicate(placement) => (EventStatus::Duplicate, Some(placement)),
            // A repeat answers with its first occurrence's placement, appended now or before.
            EventClaim::SameAs(first) => (EventStatus::Duplicate, placement_of(first)),
        };
        // Every new key got a placement (an append error returned above).
        let placement = placement.unwrap_or(Placement { partition: targets[index], offset: 0 });
        results.push(EventResult {
            id: event.id().to_string(),
            source: event.source().to_string(),
            status,
            partition: placement.partition,
            offset: placement.offset,
        });
    }
    Ok(IngestOutcome::Done(results))
}

/// One event as consume serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedEvent {
    /// The event's offset.
    pub offset: u64,
    /// The offset after it (for a synthesized envelope around a whole plain entry, the
    /// entry's end).
    pub next_offset: u64,
    /// The event: stored byte for byte, or a synthesized envelope.
    pub event: CloudEvent,
}

/// What [`consume`] read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    /// The events from the requested offset on, in offset order.
    pub events: Vec<ServedEvent>,
    /// Where the next read starts.
    pub next_offset: u64,
}

/// Reads partition `partition` of `namespace/stream` from `offset` as CloudEvents, waiting up
/// to `max_wait` at the tail: at least one event, then as many as fit in `max_bytes` counted
/// as their JSON event format ([`served_size`]). Records stored
/// with valid `ce_` headers come back as stored; any other record, and any entry that is not
/// uncompressed Kafka record batches, gets a synthesized envelope (see [`synthesize`]).
pub async fn consume(
    stack: &Stack,
    namespace: &str,
    stream: &str,
    partition: u32,
    offset: u64,
    max_bytes: usize,
    max_wait: Duration,
) -> Result<Consumed, EventsError> {
    let reader = stack.reader.as_ref().ok_or(EventsError::RoleNotServed("reader"))?;
    let stream = stack.catalog.get_stream(namespace, stream).await?;
    let log = stream.log_ref(partition as usize).ok_or_else(|| {
        EventsError::NoPartition(format!(
            "stream {namespace}/{} has {} partitions; no partition {partition}",
            stream.name,
            stream.partition_count()
        ))
    })?;
    if max_bytes == 0 {
        return Err(EventsError::InvalidArgument("max_bytes: must be at least 1".into()));
    }
    let batch = reader.read(&log, offset, max_bytes, max_wait).await?;
    let mut events = Vec::new();
    for entry in &batch.entries {
        events.extend(
            events_of_entry(&stream, partition, &log, entry)?.into_iter().filter(|e| e.next_offset > offset),
        );
    }
    let mut next_offset = batch.next_offset;
    // The reader bounds whole entries, but one entry holds a whole ingest request's events:
    // bound the events too. At least one, then none that would take the total over.
    let mut taken = 0usize;
    let keep = events
        .iter()
        .take_while(|e| {
            let size = served_size(&e.event);
            let fits = taken == 0 || taken.saturating_add(size) <= max_bytes;
            taken = taken.saturating_add(size);
            fits
        })
        .count();
    if keep < events.len() {
        events.truncate(keep);
        if let Some(last) = events.last() {
            next_offset = last.next_offset;
        }
    }
    Ok(Consumed { events, next_offset })
}

/// An event's size as `max_bytes` counts it: its JSON event format, as a structured consume
/// serves it.
fn served_size(event: &CloudEvent) -> usize {
    json::encode_event(event).len()
}

/// The events of one stored entry.
fn events_of_entry(
    stream: &Stream,
    partition: u32,
    log: &LogRef,
    entry: &Entry,
) -> Result<Vec<ServedEvent>, EventsError> {
    if let Ok(records) = kafka::decode_record_batches(&entry.payload)
        && records.len() == entry.record_count as usize
    {
        return records
            .iter()
            .enumerate()
            .map(|(i, record)| {
                let offset = entry.offset + i as u64;
                let event = match kafka::record_to_event(record) {
                    Ok(event) => event,
                    Err(_) => {
                        synthesize(stream, partition, log, offset, record.timestamp_ms, record.value.clone())?
                    }
                };
                Ok(ServedEvent { offset, next_offset: offset + 1, event })
            })
            .collect();
    }
    // Not uncompressed Kafka batches of exactly its records: one envelope for the entry.
    let data = (!entry.payload.is_empty()).then(|| entry.payload.to_vec());
    let event = synthesize(stream, partition, log, entry.offset, entry.timestamp_ms, data)?;
    Ok(vec![ServedEvent { offset: entry.offset, next_offset: entry.end_offset(), event }])
}

/// The envelope around a record that is not a CloudEvent: `id` `{log id}-{offset}` (the
/// partition's log ID: never reused, so the pair is unique), `source`
/// `/v1/namespaces/{ns}/streams/{stream}/partitions/{p}`, `type` [`RECORD_EVENT_TYPE`], `time`
/// from the record timestamp, and the record value as `application/octet-stream` data.
pub fn synthesize(
    stream: &Stream,
    partition: u32,
    log: &LogRef,
    offset: u64,
    timestamp_ms: i64,
    data: Option<Vec<u8>>,
) -> Result<CloudEvent, EventsError> {
    let mut attributes = vec![
        Attribute::string("specversion", "1.0"),
        Attribute::string("id", format!("{}-{offset}", log.log_id.0)),
        Attribute::string(
            "source",
            format!("/v1/namespaces/{}/streams/{}/partitions/{partition}", stream.namespace, stream.name),
        ),
        Attribute::string("type", RECORD_EVENT_TYPE),
    ];
    let nanos = u32::try_from(timestamp_ms.rem_euclid(1000) * 1_000_000).unwrap_or(0);
    if let Some(time) = lakestream_cloudevents::time::format_utc(timestamp_ms.div_euclid(1000), nanos) {
        attributes.push(Attribute::new("time", time, AttrType::Timestamp));
    }
    if data.is_some() {
        attributes.push(Attribute::string("datacontenttype", "application/octet-stream"));
    }
    // Catalog names hold no control characters or noncharacters, so this envelope is
    // always valid; an error here is a bug, reported rather than served.
    CloudEvent::new(attributes, data.map(Data::Binary))
        .map_err(|e| EventsError::Internal(format!("synthesized envelope at offset {offset} refused: {e}")))
}

/// Deletes expired deduplication records every [`CLEANUP_INTERVAL`] until `stopped` turns
/// true.
pub async fn run_cleanup(stack: Stack, mut stopped: tokio::sync::watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(CLEANUP_INTERVAL) => {}
            _ = stopped.changed() => {}
        }
        if *stopped.borrow() {
            return;
        }
        match stack.ledger.cleanup().await {
            Ok(stats) => tracing::debug!(scanned = stats.scanned, deleted = stats.deleted, "ledger cleanup"),
            Err(e) => tracing::warn!(error = %e, "ledger cleanup failed; retrying next interval"),
        }
    }
}
