//! Log-ID allocation: a counter record advanced by compare-and-set.
//!
//! The counter `/lakestream-catalog/log-id-counter` holds the smallest ID not yet handed
//! out. To take `n` IDs, read the counter at version `v` (value `next`), then write
//! `next + n` with `CompareAndSet(.., v)` (or `CreateIfAbsent` when there is no counter).
//! The IDs `[next, next + n)` belong to the caller whose write succeeds.
//!
//! Why this never hands out an ID twice: every successful write replaces the version it
//! read, so two writes based on the same read cannot both succeed (the partition is
//! linearizable), and each success moves the counter strictly up. The ranges handed out are
//! therefore disjoint and increasing. A write whose outcome is unknown may have moved the
//! counter; the allocator then reads it again, so at worst the range it might have taken is
//! skipped: a gap, never a reuse. Nothing ever moves the counter down, and deleting a log
//! leaves it alone, so IDs are never reused after deletion either.
//!
//! Why it makes progress: a lost compare-and-set means another allocation succeeded, so
//! the system as a whole always advances. The loop is [`lakestream_meta::cas_update`]: a lost
//! round pauses (jittered, growing) before it reads again, and the loop is bounded by
//! [`crate::CatalogConfig::max_cas_attempts`] only to stop pathological storms. The counter
//! record's rule — it only moves up — is checked before every write.
//!
//! The alternative, a sequenced put on a dedicated prefix, needs no retry loop but leaves
//! one record per allocation, and deleting its greatest key would restart the sequence at
//! zero, reusing IDs. One small record under CAS is easier to keep safe.

use std::ops::Range;

use lakestream_format::LogId;
use lakestream_meta::{CasOptions, Change, Current, MetaStore, cas_update};

use crate::error::{CatalogError, Result};
use crate::records::{LogIdCounterRecord, RECORD_VERSION, log_id_counter_key};

/// Takes `count` (≥ 1) fresh log IDs from the counter in `partition`; no ID below
/// `first_log_id` is handed out. `options` should re-read after an unknown outcome: a
/// write that landed unseen only wastes its range (the next round starts above it), and
/// never hands it out twice.
pub(crate) async fn allocate_log_ids(
    store: &dyn MetaStore,
    partition: &str,
    first_log_id: u64,
    count: u64,
    options: &CasOptions,
) -> Result<Range<u64>> {
    let key = log_id_counter_key();
    let mut taken = 0..0;
    cas_update(store, partition, &key, options, |current: Option<&Current<LogIdCounterRecord>>| {
        let next = current.map_or(first_log_id, |c| c.value.next_log_id.max(first_log_id));
        let end = next
            .checked_add(count)
            .filter(|&end| end <= LogId::MAX.0 + 1)
            .ok_or(CatalogError::LogIdsExhausted { next, requested: count })?;
        taken = next..end;
        Ok(Change::Write(LogIdCounterRecord { version: RECORD_VERSION, next_log_id: end }))
    })
    .await?;
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use lakestream_format::retry::{Backoff, BackoffPolicy};
    use lakestream_meta::{InMemoryStore, PutCondition};

    use super::*;
    use crate::records::CatalogRecord;

    const P: &str = "lakestream-catalog";

    fn options() -> CasOptions {
        CasOptions::new(Backoff::seeded(BackoffPolicy::compare_and_set(10), 1)).reread_unknown_outcomes()
    }

    async fn next_of(store: &InMemoryStore) -> u64 {
        let record = store.get(P, &log_id_counter_key()).await.unwrap().unwrap();
        LogIdCounterRecord::decode(&record.key, &record.value).unwrap().next_log_id
    }

    #[tokio::test]
    async fn ranges_are_disjoint_and_increasing_from_the_floor() {
        let store = InMemoryStore::new();
        assert_eq!(allocate_log_ids(&store, P, 5, 3, &options()).await.unwrap(), 5..8);
        assert_eq!(allocate_log_ids(&store, P, 5, 1, &options()).await.unwrap(), 8..9);
        // Raising the floor jumps ahead; lowering it never goes back.
        assert_eq!(allocate_log_ids(&store, P, 100, 2, &options()).await.unwrap(), 100..102);
        assert_eq!(allocate_log_ids(&store, P, 0, 1, &options()).await.unwrap(), 102..103);
        assert_eq!(next_of(&store).await, 103);
    }

    #[tokio::test]
    async fn exhaustion_is_an_error_and_changes_nothing() {
        let store = InMemoryStore::new();
        let last = LogId::MAX.0;
        assert_eq!(allocate_log_ids(&store, P, last - 1, 2, &options()).await.unwrap(), last - 1..last + 1);
        let err = allocate_log_ids(&store, P, 0, 1, &options()).await.unwrap_err();
        assert!(
            matches!(err, CatalogError::LogIdsExhausted { next, requested: 1 } if next == last + 1),
            "{err}"
        );
        assert_eq!(next_of(&store).await, last + 1);
    }

    #[tokio::test]
    async fn a_corrupt_counter_is_reported_not_overwritten() {
        let store = InMemoryStore::new();
        store.put(P, &log_id_counter_key(), Bytes::from_static(b"12"), PutCondition::None).await.unwrap();
        let err = allocate_log_ids(&store, P, 0, 1, &options()).await.unwrap_err();
        assert!(matches!(err, CatalogError::CorruptRecord { .. }), "{err}");
        let stored = store.get(P, &log_id_counter_key()).await.unwrap().unwrap();
        assert_eq!(&stored.value[..], b"12");
    }
}
