//! Producer ids and epochs of the Kafka protocol's idempotent producers, kept beside their
//! sequences (the parent module) so that a producer's id, epoch and sequence live in one place.
//!
//! - **Producer id** (Kafka's `producerId`): an `i64` handed out by [`crate::Api::new_producer_id`],
//!   unique across every process: each process takes blocks of [`ID_BLOCK`] ids from one
//!   counter record in the metadata store ([`lakestream_meta::cas_update`]: compare-and-set,
//!   a lost race retried after a jittered pause), as Kafka's brokers take blocks from the
//!   controller.
//! - **Epoch** (`producerEpoch`): a producer bumps it itself (the Java client does after a
//!   batch's outcome is lost), and then starts its sequences again at 0. A batch of an epoch
//!   below the highest this process has seen for the id is refused
//!   ([`crate::Api::admit_producer_epoch`]).
//!
//! ```text
//! key (metadata partition `lakestream-kafka`)   value (JSON)
//! /lakestream-kafka/producer-ids                {"v":1,"next":4000}   the next unallocated block
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use lakestream_format::retry::{Backoff, BackoffPolicy};
use lakestream_meta::{CasError, CasOptions, CasRecord, Change, Current, MetaStore, Record, cas_update};
use serde::{Deserialize, Serialize};

use crate::api::{ApiError, ApiResult, ErrorKind};

/// The metadata partition of the producer-id counter (the Kafka front end's partition, where
/// the counter has always been).
const ID_COUNTER_PARTITION: &str = "lakestream-kafka";

/// The producer-id counter's key.
const ID_COUNTER_KEY: &str = "/lakestream-kafka/producer-ids";

/// How many producer ids a process takes from the counter at once.
pub const ID_BLOCK: i64 = 1000;

/// How many writes taking a block tries before it reports contention.
const ID_ATTEMPTS: u32 = 16;

/// The highest epoch this process has seen per producer id. Per process: a client's requests
/// go to the process it is connected to. Forgotten when it grows past [`MAX_EPOCHS`] (a
/// fenced epoch is then only refused by sequence).
#[derive(Debug, Default)]
pub(crate) struct Epochs {
    seen: Mutex<HashMap<i64, i16>>,
}

/// The most producer ids [`Epochs`] remembers.
const MAX_EPOCHS: usize = 1 << 16;

impl Epochs {
    /// Records `epoch` of producer `id`; false when a higher one was seen (the batch is stale).
    pub(crate) fn admit(&self, id: i64, epoch: i16) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(&highest) = seen.get(&id) {
            if epoch < highest {
                return false;
            }
            if epoch == highest {
                return true;
            }
        }
        if seen.len() >= MAX_EPOCHS {
            seen.clear();
        }
        seen.insert(id, epoch);
        true
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Counter {
    v: u32,
    next: i64,
}

impl CasRecord for Counter {
    type Error = ApiError;

    fn decode(record: &Record) -> ApiResult<Self> {
        serde_json::from_slice(&record.value)
            .map_err(|e| ApiError::new(ErrorKind::CorruptData, format!("{ID_COUNTER_KEY}: {e}")))
    }

    fn encode(&self) -> ApiResult<Bytes> {
        serde_json::to_vec(self)
            .map(Bytes::from)
            .map_err(|e| ApiError::new(ErrorKind::Internal, e.to_string()))
    }

    /// The counter only moves up: a block once taken is never handed out again.
    fn check_write(before: Option<&Self>, after: &Self) -> ApiResult<()> {
        match before {
            Some(b) if after.next <= b.next => Err(ApiError::new(
                ErrorKind::Internal,
                format!("{ID_COUNTER_KEY}: the counter would move from {} to {}", b.next, after.next),
            )),
            _ => Ok(()),
        }
    }
}

/// Hands out producer ids, a block at a time from the counter record.
#[derive(Debug)]
pub(crate) struct ProducerIds {
    meta: Arc<dyn MetaStore>,
    /// The ids left in this process's block: `[next, end)`.
    block: tokio::sync::Mutex<(i64, i64)>,
    /// Lost races for a block pause with the process's jitter. An unknown outcome fails:
    /// repeating the write would only skip a block, but the caller's retry does that too.
    cas: CasOptions,
}

impl ProducerIds {
    pub(crate) fn new(meta: Arc<dyn MetaStore>) -> Self {
        let cas = CasOptions::new(Backoff::process(BackoffPolicy::compare_and_set(ID_ATTEMPTS)));
        ProducerIds { meta, block: tokio::sync::Mutex::new((0, 0)), cas }
    }

    /// A producer id no other call, in any process, gets.
    pub(crate) async fn allocate(&self) -> ApiResult<i64> {
        let mut block = self.block.lock().await;
        if block.0 >= block.1 {
            *block = self.take_block().await?;
        }
        let id = block.0;
        block.0 += 1;
        Ok(id)
    }

    async fn take_block(&self) -> ApiResult<(i64, i64)> {
        let mut block = (0, 0);
        let take = |current: Option<&Current<Counter>>| {
            let start = current.map_or(0, |c| c.value.next);
            let end = start
                .checked_add(ID_BLOCK)
                .ok_or_else(|| ApiError::new(ErrorKind::Internal, "producer ids are exhausted"))?;
            block = (start, end);
            Ok(Change::Write(Counter { v: 1, next: end }))
        };
        let taken =
            cas_update(self.meta.as_ref(), ID_COUNTER_PARTITION, ID_COUNTER_KEY, &self.cas, take).await;
        match taken {
            Ok(_) => Ok(block),
            Err(CasError::Record(e)) => Err(e),
            Err(CasError::Contended { attempts, .. }) => Err(ApiError::new(
                ErrorKind::Contended,
                format!("producer ids: lost {attempts} races for a block; retry"),
            )),
            Err(CasError::Meta(e)) => {
                Err(ApiError::new(ErrorKind::of_class(e.class()), format!("producer ids: {e}")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_epochs_are_refused() {
        let epochs = Epochs::default();
        assert!(epochs.admit(7, 1));
        assert!(epochs.admit(7, 2));
        assert!(!epochs.admit(7, 1));
        assert!(epochs.admit(7, 2));
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
