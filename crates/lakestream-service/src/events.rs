//! CloudEvents on every stream: deduplicated ingest and consumption as CloudEvents
//! (docs/cloudevents.md).
//!
//! | method | path | what |
//! |---|---|---|
//! | POST | `/v1/namespaces/{ns}/streams/{stream}/events[?partition=p]` | ingest: binary, structured or batched mode |
//! | GET | `…/streams/{stream}/partitions/{p}/events?offset=&max_bytes=&max_wait_ms=&mode=` | consume as CloudEvents |
//!
//! [`Api::ingest_events`] and [`Api::consume_events`] are operations like any other: the HTTP
//! and gRPC bindings of the server only decode and encode, and share their errors, metrics
//! and permissions.
//!
//! **Offsets.** An ingest request appends one entry per stream partition it touches: one
//! Kafka record batch holding that partition's new events in request order. An entry whose
//! first offset is `o` and which holds `n` records takes offsets `[o, o+n)` (as the writer
//! assigns them), so the event at record index `i` has offset `o + i`; that is the offset
//! ingest answers and consume takes and reports.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lakestream_catalog::Stream;
use lakestream_cloudevents::ledger::{ClaimResult, EventClaim, Key, Placement, Scope, Unsure};
use lakestream_cloudevents::{AttrType, Attribute, CloudEvent, Data, json, kafka};
use lakestream_format::{Entry, LogRef};
use serde::Serialize;

use crate::api::{Api, ApiError, ApiResult, ErrorKind, FetchParams, PartitionRef};
use crate::auth::{Caller, Operation};
use crate::stack::Stack;

/// The `type` of a synthesized envelope around a record that is not a CloudEvent.
pub const RECORD_EVENT_TYPE: &str = "dev.lakestream.record";

/// The response header naming the offset to consume from next.
pub const NEXT_OFFSET_HEADER: &str = "lakestream-next-offset";

/// The response header naming the offset of each event returned (comma-separated, in order).
pub const OFFSETS_HEADER: &str = "lakestream-offsets";

/// How often the server deletes expired ledger records.
pub const CLEANUP_INTERVAL: Duration = Duration::from_secs(60);

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

fn partition_u32(p: usize) -> u32 {
    u32::try_from(p).unwrap_or(u32::MAX)
}

impl Api {
    /// Ingests `events` into `namespace/stream`, deduplicated on source + id (see the module
    /// and docs/cloudevents.md): claim every key, append each partition's new events as one
    /// entry, record where they landed. `partition` forces the partition of every event;
    /// otherwise each event goes where Kafka's default partitioner puts its key
    /// (`partitionkey`, else `subject`), or, without a key, where its deduplication key hashes.
    ///
    /// An event being appended by another request fails the whole request with
    /// [`ErrorKind::InFlight`] (naming its index and when to retry), having appended nothing.
    pub async fn ingest_events(
        &self,
        caller: &Caller,
        namespace: &str,
        stream: &str,
        partition: Option<u32>,
        events: Vec<CloudEvent>,
    ) -> ApiResult<Vec<EventResult>> {
        self.authorize_operation(caller, Some(namespace), Operation::IngestEvents)?;
        let outcome = self.ingest(namespace, stream, partition, events).await;
        let m = &self.metrics;
        match &outcome {
            Ok(results) => {
                for result in results {
                    let counter = match result.status {
                        EventStatus::Appended => &m.events_ingested,
                        EventStatus::Duplicate => &m.events_duplicate,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) if e.kind() == ErrorKind::InFlight => {
                m.events_in_flight.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {}
        }
        outcome
    }

    async fn ingest(
        &self,
        namespace: &str,
        stream: &str,
        partition: Option<u32>,
        events: Vec<CloudEvent>,
    ) -> ApiResult<Vec<EventResult>> {
        let writer = self.writer()?;
        let stream = self.stack.catalog.get_stream(namespace, stream).await?;
        let count = partition_u32(stream.partition_count());
        let Some(&first_log) = stream.logs.first() else {
            return Err(ApiError::new(
                ErrorKind::NotFound,
                format!("stream {namespace}/{} has no partitions", stream.name),
            ));
        };
        if let Some(p) = partition.filter(|p| *p >= count) {
            return Err(ApiError::new(
                ErrorKind::NotFound,
                format!(
                    "partition: stream {namespace}/{} has {count} partitions; no partition {p}",
                    stream.name
                ),
            ));
        }
        if events.is_empty() {
            return Ok(Vec::new());
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
        let ledger = &self.stack.ledger;
        // Beside the claims: each target partition's next offset, before anything of this
        // request is appended. An entry of it lands at or after that offset, which is where an
        // append with an unknown outcome is looked for.
        let partitions: BTreeSet<u32> = targets.iter().copied().collect();
        let reader = &self.stack.events_reader;
        let next_offsets = partitions.iter().map(|&p| {
            let log = stream.logs[p as usize];
            async move { (p, reader.next_offset(log).await.ok()) }
        });
        let (claimed, next_offsets) =
            tokio::join!(ledger.claim(Scope(first_log), &keys), futures::future::join_all(next_offsets));
        let before: HashMap<u32, Option<u64>> = next_offsets.into_iter().collect();
        let mut claim = match claimed? {
            ClaimResult::Claimed(claim) => claim,
            ClaimResult::InFlight { index, retry_after } => {
                let mut error = ApiError::new(
                    ErrorKind::InFlight,
                    format!(
                        "event {index} of the request is being appended by another request; nothing was \
                         appended; retry the whole request"
                    ),
                );
                error.event_index = Some(index);
                error.retry_after = Some(retry_after);
                return Err(error);
            }
        };

        // New events whose earlier append had an unknown outcome: looked for where it would
        // have put them. One found there is a duplicate at the offset found.
        let found = match self.find_unsure(&stream, &keys, &claim).await {
            Ok(found) => found,
            Err(e) => {
                ledger.release(&mut claim).await;
                return Err(e);
            }
        };
        // New events grouped per partition, in request order: one entry (one record batch) each.
        let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (index, state) in claim.events().iter().enumerate() {
            if *state == EventClaim::New && !found.contains_key(&keys[index]) {
                groups.entry(targets[index]).or_default().push(index);
            }
        }
        let now_ms = ledger.clock().now_ms();
        let max_entry_bytes = writer.config().max_entry_bytes;
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
            if encoded.len() > max_entry_bytes {
                ledger.release(&mut claim).await;
                return Err(ApiError::new(
                    ErrorKind::TooLarge,
                    format!(
                        "the {} events for partition {p} encode to {} bytes, more than the largest entry ({max_entry_bytes})",
                        batch.len(),
                        encoded.len(),
                    ),
                ));
            }
            let log = stream.logs[*p as usize];
            payloads.push((*p, log, indexes.clone(), Bytes::from(encoded)));
        }
        if !claim.is_fresh(ledger.clock().now_ms()) {
            ledger.release(&mut claim).await;
            return Err(ApiError::new(
                ErrorKind::Unavailable,
                "the request's deduplication claims aged before the append could start; retry",
            ));
        }
        let started = Instant::now();
        let appends = payloads.iter().map(|(_, log, indexes, payload)| {
            writer.append(*log, payload.clone(), u32::try_from(indexes.len()).unwrap_or(u32::MAX))
        });
        let acks = futures::future::join_all(appends).await;
        let mut placements: HashMap<Key, Placement> = found.clone();
        let mut first_error = None;
        for ((p, log, indexes, payload), ack) in payloads.iter().zip(acks) {
            self.metrics.record_append(&ack, payload.len(), started);
            match ack {
                Ok(ack) => {
                    if let Some(reader) = &self.stack.reader {
                        reader.notify_appended_to(*log, ack.end_offset());
                    }
                    for (record, &i) in indexes.iter().enumerate() {
                        placements
                            .insert(keys[i], Placement { partition: *p, offset: ack.offset + record as u64 });
                    }
                }
                Err(e) => {
                    let mut error = ApiError::from(e);
                    error.message = format!("append to partition {p}: {}", error.message);
                    if error.kind() == ErrorKind::OutcomeUnknown {
                        // The entry may be in the log, or may still land: look now, and if it
                        // is not there (yet), keep the claims naming where it would be.
                        let group: Vec<Key> = indexes.iter().map(|&i| keys[i]).collect();
                        let from = before.get(p).copied().flatten();
                        let seen =
                            self.find_appended(&stream, *p, from, &group.iter().copied().collect()).await;
                        if let Ok(seen) = seen
                            && seen.len() == group.len()
                        {
                            placements.extend(seen);
                            continue;
                        }
                        let unsure = Unsure { partition: *p, from: from.unwrap_or(0) };
                        ledger.keep_unsure(&mut claim, &group, unsure).await;
                        let lapse = ledger.config().claim_lapse;
                        error.message = format!(
                            "{}; its events' claims are kept for {lapse:?}: a retry after that finds them if \
                             they landed, and appends them only if not",
                            error.message
                        );
                        error.retry_after = Some(lapse);
                    }
                    if first_error.is_none() {
                        first_error = Some(error);
                    }
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
                // Found where an earlier append with an unknown outcome put it.
                EventClaim::New if found.contains_key(&keys[index]) => {
                    (EventStatus::Duplicate, placement_of(index))
                }
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
        Ok(results)
    }
}

impl Api {
    /// The new events of `claim` whose earlier appends had unknown outcomes, found where
    /// those appends would have put them ([`lakestream_cloudevents::ledger::Claim::unsure`]).
    async fn find_unsure(
        &self,
        stream: &Stream,
        keys: &[Key],
        claim: &lakestream_cloudevents::ledger::Claim,
    ) -> ApiResult<HashMap<Key, Placement>> {
        let mut wanted: BTreeMap<Unsure, HashSet<Key>> = BTreeMap::new();
        for (index, key) in keys.iter().enumerate() {
            for place in claim.unsure(index) {
                wanted.entry(*place).or_default().insert(*key);
            }
        }
        let mut found = HashMap::new();
        for (place, keys) in wanted {
            let keys: HashSet<Key> = keys.into_iter().filter(|k| !found.contains_key(k)).collect();
            if keys.is_empty() || place.partition as usize >= stream.partition_count() {
                continue;
            }
            found.extend(self.find_appended(stream, place.partition, Some(place.from), &keys).await?);
        }
        Ok(found)
    }

    /// Where the events with `keys` are in `partition` of `stream`, from offset `from` (the
    /// first readable offset when unknown) to the partition's end now: for appends whose
    /// outcome is unknown. Rare, so it reads every entry in that range; only entries of
    /// Kafka record batches can hold ingested events.
    async fn find_appended(
        &self,
        stream: &Stream,
        partition: u32,
        from: Option<u64>,
        keys: &HashSet<Key>,
    ) -> ApiResult<HashMap<Key, Placement>> {
        const READ_BYTES: usize = 8 << 20;
        let reader = &self.stack.events_reader;
        let log = stream.log_ref(partition as usize).ok_or_else(|| {
            ApiError::new(ErrorKind::NotFound, format!("stream {} has no partition {partition}", stream.name))
        })?;
        let end = reader.next_offset(log.log_id).await?;
        let mut offset = match from {
            Some(from) => from,
            None => reader.first_offset(log.log_id).await?,
        };
        let mut found = HashMap::new();
        while offset < end && found.len() < keys.len() {
            let batch = reader.read(&log, offset, READ_BYTES, Duration::ZERO).await?;
            for entry in &batch.entries {
                let Ok(records) = kafka::decode_record_batches(&entry.payload) else { continue };
                for (i, record) in records.iter().enumerate() {
                    let Ok(event) = kafka::record_to_event(record) else { continue };
                    let key = event.dedup_key();
                    if keys.contains(&key) {
                        found.entry(key).or_insert(Placement { partition, offset: entry.offset + i as u64 });
                    }
                }
            }
            if batch.entries.is_empty() || batch.next_offset <= offset {
                break;
            }
            offset = batch.next_offset;
        }
        Ok(found)
    }
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

/// What a consume read ([`crate::Api::consume_events`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    /// The events from the requested offset on, in offset order.
    pub events: Vec<ServedEvent>,
    /// Where the next read starts.
    pub next_offset: u64,
}

impl Api {
    /// Reads a partition from `params.offset` as CloudEvents, waiting up to
    /// `params.max_wait_ms` at the tail: at least one event, then as many as fit in
    /// `params.max_bytes` (default [`crate::api::DEFAULT_FETCH_BYTES`]) counted as their JSON
    /// event format. Records stored with valid `ce_` headers come back as stored; any other
    /// record, and any entry that is not uncompressed Kafka record batches, gets a synthesized
    /// envelope (see [`synthesize`]).
    pub async fn consume_events(
        &self,
        caller: &Caller,
        target: PartitionRef<'_>,
        params: FetchParams,
    ) -> ApiResult<Consumed> {
        self.authorize_operation(caller, Some(target.namespace), Operation::ConsumeEvents)?;
        let (max_bytes, wait) = self.fetch_limits(&params)?;
        let reader = self.reader()?;
        let stream = self.stack.catalog.get_stream(target.namespace, target.stream).await?;
        let partition = partition_u32(target.partition);
        let log = stream.log_ref(target.partition).ok_or_else(|| {
            ApiError::new(
                ErrorKind::NotFound,
                format!(
                    "stream {}/{} has {} partitions; no partition {partition}",
                    target.namespace,
                    stream.name,
                    stream.partition_count()
                ),
            )
        })?;
        let offset = params.offset;
        let started = Instant::now();
        let batch = reader.read(&log, offset, max_bytes, wait).await?;
        self.metrics.record_fetch(&batch, started);
        let mut events = Vec::new();
        for entry in &batch.entries {
            events.extend(
                events_of_entry(&stream, partition, &log, entry)?
                    .into_iter()
                    .filter(|e| e.next_offset > offset),
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
) -> ApiResult<Vec<ServedEvent>> {
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
) -> ApiResult<CloudEvent> {
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
    CloudEvent::new(attributes, data.map(Data::Binary)).map_err(|e| {
        ApiError::new(ErrorKind::Internal, format!("synthesized envelope at offset {offset} refused: {e}"))
    })
}

/// Deletes expired deduplication records every [`CLEANUP_INTERVAL`] until `stopped` turns
/// true.
pub(crate) async fn run_cleanup(stack: Stack, mut stopped: tokio::sync::watch::Receiver<bool>) {
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
