//! Idempotent producers (`enable.idempotence=true`, the default of modern clients) on the
//! service layer's idempotent-producer path ([`lakestream_service::producers`]).
//!
//! ## Vocabulary
//!
//! - **Producer id** (Kafka's `producerId`): an `i64` handed out by InitProducerId, unique
//!   across every front-end process (the service layer's `Api::new_producer_id`).
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
//! for the producer id (the service layer's `Api::admit_producer_epoch`) is
//! `INVALID_PRODUCER_EPOCH`.

use lakestream_service::api::ApiResult;
use lakestream_service::producers::{ProducerId, ProducerSequence};

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

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
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
}
