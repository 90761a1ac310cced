//! Idempotent producers (`enable.idempotence=true`, the default of modern clients) on the
//! service layer's idempotent-producer path ([`lakestream_service::producers`]).
//!
//! ## Vocabulary
//!
//! - **Producer id** (Kafka's `producerId`): an `i64` handed out by InitProducerId, unique
//!   across every front-end process: each process takes blocks of [`ID_BLOCK`] ids from one
//!   counter record in the metadata store (compare-and-set), as Kafka's brokers take blocks
//!   from the controller.
//! - **Epoch** (`producerEpoch`): a producer bumps it itself (the Java client does after a
//!   batch's outcome is lost), and then starts its sequences again at 0.
//! - **Sequence** (`baseSequence`): per producer, epoch and partition, the number of a batch's
//!   first record; a batch of `n` records takes `base .. base + n`.
//!
//! ## Mapping
//!
//! Kafka's `(producerId, epoch)` is the service layer's producer `kafka-{producerId}-{epoch}`,
//! Kafka's base sequence its sequence, and a request advances it by its record count
//! ([`ProducerSequence::advance`]). So a new epoch is a new producer whose first sequence is
//! 0, as in Kafka, and the service layer keeps, per partition, the next sequence and the last
//! request's offsets. A request whose sequence is the next one is appended; a retry of the
//! last request is answered with its original offsets; an older sequence is
//! `DUPLICATE_SEQUENCE_NUMBER` (its records were appended: clients count it a success); a
//! gap is `OUT_OF_ORDER_SEQUENCE_NUMBER`. An epoch below the highest this process has seen
//! for the producer id is `INVALID_PRODUCER_EPOCH`.
//!
//! ```text
//! key (metadata partition `lakestream-kafka`)   value (JSON)
//! /lakestream-kafka/producer-ids                {"v":1,"next":4000}   the next unallocated block
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use lakestream_meta::{MetaError, MetaStore, PutCondition};
use lakestream_service::api::{ApiError, ApiResult, ErrorKind};
use lakestream_service::producers::{ProducerId, ProducerSequence};
use serde::{Deserialize, Serialize};

/// The metadata partition of the front end's own records.
pub(crate) const KAFKA_PARTITION: &str = "lakestream-kafka";

/// The producer-id counter's key.
const ID_COUNTER_KEY: &str = "/lakestream-kafka/producer-ids";

/// How many producer ids a process takes from the counter at once.
pub(crate) const ID_BLOCK: i64 = 1000;

/// How many times taking a block re-reads after losing a race.
const ID_ATTEMPTS: usize = 16;

/// A batch's producer: who sent it, in which epoch, and its first sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchProducer {
    pub id: i64,
    pub epoch: i16,
    pub base_sequence: i32,
}

impl BatchProducer {
    /// The service layer's producer for this one's batches of `records` records.
    pub fn sequence(&self, records: u64) -> ApiResult<ProducerSequence> {
        Ok(ProducerSequence {
            id: ProducerId::parse(&format!("kafka-{}-{}", self.id, self.epoch))?,
            sequence: self.base_sequence as u64,
            advance: Some(records),
        })
    }
}

/// The producer of a request's record batches (already checked by the binding): `None` for
/// batches without a producer id; an error message when the batches disagree on it or their
/// sequences do not follow each other.
pub(crate) fn producer_of(records: &[u8]) -> Result<Option<BatchProducer>, String> {
    const HEADER: usize = 61;
    let mut at = 0;
    let mut first: Option<BatchProducer> = None;
    let mut next_sequence = 0i64;
    let mut plain = false;
    while at < records.len() {
        let batch = &records[at..];
        if batch.len() < HEADER {
            return Err("a record batch shorter than its header".into());
        }
        let field = |from: usize, len: usize| &batch[from..from + len];
        let length = i32::from_be_bytes(field(8, 4).try_into().unwrap_or_default());
        let id = i64::from_be_bytes(field(43, 8).try_into().unwrap_or_default());
        let epoch = i16::from_be_bytes(field(51, 2).try_into().unwrap_or_default());
        let base_sequence = i32::from_be_bytes(field(53, 4).try_into().unwrap_or_default());
        let last_delta = i32::from_be_bytes(field(23, 4).try_into().unwrap_or_default());
        if id < 0 {
            if first.is_some() {
                return Err("batches with and without a producer id in one partition".into());
            }
            plain = true;
        } else if plain {
            return Err("batches with and without a producer id in one partition".into());
        } else if let Some(f) = first {
            if (id, epoch) != (f.id, f.epoch) || i64::from(base_sequence) != next_sequence {
                return Err(format!(
                    "the batches of one partition name producers {}/{} and {id}/{epoch}, or do not follow \
                     each other's sequences",
                    f.id, f.epoch
                ));
            }
        } else {
            if epoch < 0 || base_sequence < 0 {
                return Err(format!(
                    "producer id {id} with epoch {epoch} and base sequence {base_sequence}: an idempotent \
                     batch needs both"
                ));
            }
            first = Some(BatchProducer { id, epoch, base_sequence });
        }
        next_sequence = i64::from(base_sequence) + i64::from(last_delta) + 1;
        at += 12 + usize::try_from(length).map_err(|_| "a negative batch length".to_owned())?;
    }
    Ok(first)
}

/// The highest epoch this process has seen per producer id, to refuse batches of an older one
/// (`INVALID_PRODUCER_EPOCH`). Per process: a client's requests go to the process it is
/// connected to. Forgotten when it grows past [`MAX_EPOCHS`] (a fenced epoch is then only
/// refused by sequence).
#[derive(Debug, Default)]
pub(crate) struct Epochs {
    seen: Mutex<HashMap<i64, i16>>,
}

/// The most producer ids [`Epochs`] remembers.
const MAX_EPOCHS: usize = 1 << 16;

impl Epochs {
    /// Records `producer`'s epoch; false when a higher one was seen (the batch is stale).
    pub fn admit(&self, producer: &BatchProducer) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(&highest) = seen.get(&producer.id) {
            if producer.epoch < highest {
                return false;
            }
            if producer.epoch == highest {
                return true;
            }
        }
        if seen.len() >= MAX_EPOCHS {
            seen.clear();
        }
        seen.insert(producer.id, producer.epoch);
        true
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Counter {
    v: u32,
    next: i64,
}

/// Hands out producer ids, a block at a time from the counter record.
#[derive(Debug)]
pub(crate) struct ProducerIds {
    meta: Arc<dyn MetaStore>,
    /// The ids left in this process's block: `[next, end)`.
    block: tokio::sync::Mutex<(i64, i64)>,
}

impl ProducerIds {
    pub fn new(meta: Arc<dyn MetaStore>) -> Self {
        ProducerIds { meta, block: tokio::sync::Mutex::new((0, 0)) }
    }

    /// A producer id no other call, in any process, gets.
    pub async fn allocate(&self) -> ApiResult<i64> {
        let mut block = self.block.lock().await;
        if block.0 >= block.1 {
            *block = self.take_block().await?;
        }
        let id = block.0;
        block.0 += 1;
        Ok(id)
    }

    async fn take_block(&self) -> ApiResult<(i64, i64)> {
        let meta_error =
            |e: MetaError| ApiError::new(ErrorKind::of_class(e.class()), format!("producer ids: {e}"));
        for _ in 0..ID_ATTEMPTS {
            let current = self.meta.get(KAFKA_PARTITION, ID_COUNTER_KEY).await.map_err(meta_error)?;
            let (start, condition) = match &current {
                None => (0, PutCondition::IfAbsent),
                Some(record) => {
                    let counter: Counter = serde_json::from_slice(&record.value).map_err(|e| {
                        ApiError::new(ErrorKind::CorruptData, format!("{ID_COUNTER_KEY}: {e}"))
                    })?;
                    (counter.next, PutCondition::IfVersion(record.version))
                }
            };
            let end = start
                .checked_add(ID_BLOCK)
                .ok_or_else(|| ApiError::new(ErrorKind::Internal, "producer ids are exhausted"))?;
            let value = serde_json::to_vec(&Counter { v: 1, next: end })
                .map_err(|e| ApiError::new(ErrorKind::Internal, e.to_string()))?;
            match self.meta.put(KAFKA_PARTITION, ID_COUNTER_KEY, Bytes::from(value), condition).await {
                Ok(_) => return Ok((start, end)),
                Err(MetaError::VersionMismatch { .. } | MetaError::KeyExists { .. }) => continue,
                Err(e) => return Err(meta_error(e)),
            }
        }
        Err(ApiError::new(ErrorKind::Contended, "producer ids: lost every race for a block; retry"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    fn batch(producer_id: i64, epoch: i16, sequence: i32, records: usize) -> Vec<u8> {
        let records: Vec<Record> = (0..records)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id,
                producer_epoch: epoch,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: if sequence < 0 { -1 } else { sequence + i as i32 },
                timestamp: 1,
                key: None,
                value: Some(Bytes::from_static(b"v")),
                headers: Default::default(),
            })
            .collect();
        let mut out = bytes::BytesMut::new();
        let options = RecordEncodeOptions { version: 2, compression: Compression::None };
        RecordBatchEncoder::encode(&mut out, &records, &options).unwrap();
        out.to_vec()
    }

    #[test]
    fn batches_name_their_producer() {
        assert_eq!(producer_of(&batch(-1, -1, -1, 3)).unwrap(), None);
        let p = producer_of(&batch(42, 3, 10, 5)).unwrap().unwrap();
        assert_eq!(p, BatchProducer { id: 42, epoch: 3, base_sequence: 10 });
        let s = p.sequence(5).unwrap();
        assert_eq!((s.id.as_str(), s.sequence, s.advance), ("kafka-42-3", 10, Some(5)));
        // Two batches of one producer whose sequences follow each other.
        let two = [batch(42, 3, 10, 5), batch(42, 3, 15, 2)].concat();
        assert_eq!(producer_of(&two).unwrap(), Some(p));
        for bad in [
            [batch(42, 3, 10, 5), batch(42, 3, 16, 2)].concat(),
            [batch(42, 3, 10, 5), batch(43, 3, 15, 2)].concat(),
            [batch(-1, -1, -1, 5), batch(42, 3, 0, 2)].concat(),
            [batch(42, 3, 0, 5), batch(-1, -1, -1, 2)].concat(),
        ] {
            assert!(producer_of(&bad).is_err());
        }
    }

    #[test]
    fn older_epochs_are_refused() {
        let epochs = Epochs::default();
        let at = |epoch| BatchProducer { id: 7, epoch, base_sequence: 0 };
        assert!(epochs.admit(&at(1)));
        assert!(epochs.admit(&at(2)));
        assert!(!epochs.admit(&at(1)));
        assert!(epochs.admit(&at(2)));
    }

    #[tokio::test]
    async fn producer_ids_are_unique_across_allocators() {
        let meta: Arc<dyn MetaStore> = Arc::new(lakestream_meta::memory::InMemoryStore::new());
        let (a, b) = (ProducerIds::new(meta.clone()), ProducerIds::new(meta));
        let mut seen = std::collections::HashSet::new();
        for _ in 0..(ID_BLOCK + 5) {
            assert!(seen.insert(a.allocate().await.unwrap()));
            assert!(seen.insert(b.allocate().await.unwrap()));
        }
    }
}
