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

use lakestream_format::kafka::PayloadBatch;
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
/// batches without a producer id; an error message when the batches disagree on it, their
/// sequences do not follow each other, or a unit is a magic-0/1 message (which has no
/// producer fields; Produce v3 and later carries magic-2 batches only, as Kafka requires).
pub(crate) fn producer_of(batches: &[PayloadBatch<'_>]) -> Result<Option<BatchProducer>, String> {
    let mut first: Option<BatchProducer> = None;
    let mut next_sequence = 0i64;
    let mut plain = false;
    for unit in batches {
        let PayloadBatch::RecordBatch(batch) = unit else {
            return Err(format!(
                "a magic-{} message: Produce takes magic-2 record batches only",
                unit.magic()
            ));
        };
        let header = batch.header();
        let (id, epoch, base_sequence) = (header.producer_id, header.producer_epoch, header.base_sequence);
        if !header.has_producer() {
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
        next_sequence = i64::from(base_sequence) + i64::from(header.last_offset_delta) + 1;
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

    /// One batch encoded by kafka-protocol, as a client encodes it.
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
                // kafka-protocol starts a new batch where `offset - sequence` changes: a batch
                // without a producer id (base sequence -1) needs it kept too.
                sequence: sequence + i as i32,
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

    fn producer_of(payload: &[u8]) -> Result<Option<BatchProducer>, String> {
        let batches = lakestream_format::kafka::payload_batches(payload).map_err(|e| e.to_string())?;
        super::producer_of(&batches)
    }

    #[test]
    fn batches_name_their_producer() {
        assert_eq!(lakestream_format::kafka::count_records(&batch(-1, -1, -1, 3)), Ok(3), "one batch");
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
        // Magic-1 messages, which the binding takes, carry no producer fields.
        let legacy = include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../lakestream-format/tests/vectors/kafka/v1_plain.bin"
        ));
        assert!(lakestream_format::kafka::count_records(legacy).is_ok());
        let error = producer_of(legacy).unwrap_err();
        assert!(error.contains("magic-1 message"), "{error}");
    }
}
