//! [`cas_update`]: read-modify-write of one record by compare-and-set, the one loop every
//! such update in Lakestream runs (catalog records, the log-ID and producer-ID counters,
//! group offsets, the compactor's ledger).
//!
//! One round: **read** the record (or its absence); give it to a pure **mutation**, which
//! returns the new value ([`Change::Write`]), leaves the record as it is ([`Change::Keep`]),
//! or refuses with the caller's error; **check** the record type's invariants
//! ([`CasRecord::check_write`]) on the change; **write** conditionally — `CreateIfAbsent`
//! when there was no record, `CompareAndSet` on the version read otherwise.
//!
//! A write that finds another version (or, creating, an existing record) lost a race with a
//! concurrent writer, who succeeded: the loop pauses ([`lakestream_format::retry`]: full
//! jitter, so that the losers spread out) and starts the next round from a fresh read. The
//! mutation therefore runs once per round and must not have effects of its own. After
//! [`BackoffPolicy::max_attempts`](lakestream_format::retry::BackoffPolicy) writes the update
//! gives up with [`CasError::Contended`], whose class is [`ErrorClass::Contended`]: retrying
//! later may succeed.
//!
//! A write whose outcome is unknown may have landed. By default the update stops with that
//! error ([`UnknownOutcome::Fail`]); a caller whose mutation recognises its own earlier write
//! in the record it reads — or for which applying it twice only wastes something, like a
//! counter's range — opts into [`UnknownOutcome::Reread`], and the next round decides from
//! what is there.

use bytes::Bytes;
use lakestream_format::ErrorClass;
use lakestream_format::retry::Backoff;

use crate::error::MetaError;
use crate::store::{MetaStore, PutCondition, Record, Version};

/// A record type updated by [`cas_update`]: its codec, and the rules every write of it keeps.
pub trait CasRecord: Sized {
    /// The caller's error: a record that does not decode, a refused mutation, a broken rule.
    type Error;

    /// Decodes a stored record (its key is `record.key`).
    fn decode(record: &Record) -> Result<Self, Self::Error>;

    /// Encodes a value for writing.
    fn encode(&self) -> Result<Bytes, Self::Error>;

    /// The invariants of a change from `before` (`None`: no record) to `after`, checked
    /// before each write: a mutation that breaks one is a bug, and nothing is written.
    /// Default: none.
    fn check_write(_before: Option<&Self>, _after: &Self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// A decoded record with the store's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current<T> {
    /// The value.
    pub value: T,
    /// The record's version (what a compare-and-set names).
    pub version: Version,
    /// When the record was created, in ms since the Unix epoch.
    pub created_ms: i64,
    /// When it was last written, in ms since the Unix epoch.
    pub modified_ms: i64,
}

/// What a mutation decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change<T> {
    /// Write this value.
    Write(T),
    /// Leave the record as it is (or absent); the update ends with it.
    Keep,
}

/// What [`cas_update`] does after a write whose outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownOutcome {
    /// Stop with the [`MetaError::OutcomeUnknown`] (the write may still land).
    #[default]
    Fail,
    /// Pause, read again and let the mutation decide from what is there (it sees its own
    /// write if it landed). Each such round counts as an attempt.
    Reread,
}

/// How [`cas_update`] retries: the backoff (its pauses and attempt bound) and what an
/// unknown outcome means.
#[derive(Debug, Clone)]
pub struct CasOptions {
    /// Pauses between rounds, and the most writes tried.
    pub backoff: Backoff,
    /// After a write with an unknown outcome.
    pub unknown_outcome: UnknownOutcome,
}

impl CasOptions {
    /// `backoff`, failing on an unknown outcome.
    pub fn new(backoff: Backoff) -> Self {
        CasOptions { backoff, unknown_outcome: UnknownOutcome::Fail }
    }

    /// These options, re-reading after an unknown outcome.
    pub fn reread_unknown_outcomes(mut self) -> Self {
        self.unknown_outcome = UnknownOutcome::Reread;
        self
    }
}

/// How an update ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Updated<T> {
    /// The record as the update left it: the value written, or the one the mutation kept
    /// (`None`: there is no record, and the mutation kept it so).
    pub record: Option<Current<T>>,
    /// Whether this update wrote it.
    pub written: bool,
    /// Rounds run (1 when the first one ended it).
    pub rounds: u32,
}

impl<T> Updated<T> {
    /// The value the record holds, if any.
    pub fn value(&self) -> Option<&T> {
        self.record.as_ref().map(|c| &c.value)
    }

    /// The record's value, if any, without the metadata.
    pub fn into_value(self) -> Option<T> {
        self.record.map(|c| c.value)
    }
}

/// Why an update did not complete. Nothing was written, except that a
/// [`MetaError::OutcomeUnknown`] may have landed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CasError<E> {
    /// The record did not decode or encode, the mutation refused, or the change broke an
    /// invariant: the record type's error.
    #[error(transparent)]
    Record(E),
    /// Every write lost a race with a concurrent writer.
    #[error("{key}: lost {attempts} compare-and-set races to concurrent writers; retry")]
    Contended {
        /// The record's key.
        key: String,
        /// Writes tried.
        attempts: u32,
    },
    /// The store failed.
    #[error(transparent)]
    Meta(MetaError),
}

impl<E> CasError<E> {
    /// The class, with `record` giving the record error's.
    pub fn class_with(&self, record: impl FnOnce(&E) -> ErrorClass) -> ErrorClass {
        match self {
            CasError::Record(e) => record(e),
            CasError::Contended { .. } => ErrorClass::Contended,
            CasError::Meta(e) => e.class(),
        }
    }
}

/// Reads the record `key` of `partition`, applies `mutate`, and writes the result
/// conditionally, retrying lost races as [`CasOptions`] says (see the module documentation).
///
/// `mutate` gets the current record (`None`: absent) and returns what to do, or refuses with
/// the record type's error, which ends the update with [`CasError::Record`].
pub async fn cas_update<T, F>(
    store: &dyn MetaStore,
    partition: &str,
    key: &str,
    options: &CasOptions,
    mut mutate: F,
) -> Result<Updated<T>, CasError<T::Error>>
where
    T: CasRecord,
    F: FnMut(Option<&Current<T>>) -> Result<Change<T>, T::Error>,
{
    let mut rounds = 0;
    loop {
        rounds += 1;
        let current = match store.get(partition, key).await.map_err(CasError::Meta)? {
            None => None,
            Some(record) => Some(Current {
                value: T::decode(&record).map_err(CasError::Record)?,
                version: record.version,
                created_ms: record.created_ms,
                modified_ms: record.modified_ms,
            }),
        };
        let next = match mutate(current.as_ref()).map_err(CasError::Record)? {
            Change::Keep => return Ok(Updated { record: current, written: false, rounds }),
            Change::Write(next) => next,
        };
        T::check_write(current.as_ref().map(|c| &c.value), &next).map_err(CasError::Record)?;
        let condition = match &current {
            None => PutCondition::IfAbsent,
            Some(c) => PutCondition::IfVersion(c.version),
        };
        let value = next.encode().map_err(CasError::Record)?;
        match store.put(partition, key, value, condition).await {
            Ok(written) => {
                let record = Current {
                    value: next,
                    version: written.version,
                    created_ms: written.created_ms,
                    modified_ms: written.modified_ms,
                };
                return Ok(Updated { record: Some(record), written: true, rounds });
            }
            // A concurrent writer won: start again from what it wrote.
            Err(MetaError::VersionMismatch { .. } | MetaError::KeyExists { .. }) => {}
            Err(MetaError::OutcomeUnknown(_)) if options.unknown_outcome == UnknownOutcome::Reread => {}
            Err(other) => return Err(CasError::Meta(other)),
        }
        if !options.backoff.allows_another(rounds) {
            return Err(CasError::Contended { key: key.to_owned(), attempts: rounds });
        }
        let pause = options.backoff.delay(rounds - 1);
        tracing::debug!(partition, key, rounds, ?pause, "compare-and-set lost a race; reading again");
        tokio::time::sleep(pause).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use lakestream_format::retry::BackoffPolicy;

    use super::*;
    use crate::embedded::EmbeddedStore;
    use crate::hooked::{Call, Hook, HookedStore, Op};

    const P: &str = "cas";
    const K: &str = "/cas/counter";

    /// A counter that may only grow.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Counter(u64);

    impl CasRecord for Counter {
        type Error = String;

        fn decode(record: &Record) -> Result<Self, String> {
            let text = std::str::from_utf8(&record.value).map_err(|e| e.to_string())?;
            text.parse().map(Counter).map_err(|e| format!("{}: {e}", record.key))
        }

        fn encode(&self) -> Result<Bytes, String> {
            Ok(Bytes::from(self.0.to_string()))
        }

        fn check_write(before: Option<&Self>, after: &Self) -> Result<(), String> {
            match before {
                Some(b) if after.0 <= b.0 => Err(format!("counter moved from {} to {}", b.0, after.0)),
                _ => Ok(()),
            }
        }
    }

    fn options(max_attempts: u32) -> CasOptions {
        CasOptions::new(Backoff::seeded(BackoffPolicy::compare_and_set(max_attempts), 3))
    }

    fn increment(current: Option<&Current<Counter>>) -> Result<Change<Counter>, String> {
        Ok(Change::Write(Counter(current.map_or(0, |c| c.value.0) + 1)))
    }

    async fn stored(store: &dyn MetaStore) -> Option<u64> {
        store.get(P, K).await.unwrap().map(|r| Counter::decode(&r).unwrap().0)
    }

    /// The embedded (redb) store in a fresh directory, behind a [`HookedStore`] (which
    /// forwards everything until a test hooks it): the loop runs over a durable backend's
    /// real compare-and-set. The directory lives as long as the store is used.
    async fn racing() -> (tempfile::TempDir, Arc<HookedStore>) {
        let dir = tempfile::tempdir().unwrap();
        let embedded = EmbeddedStore::open(dir.path().join("metadata.redb")).await.unwrap();
        (dir, HookedStore::new(Arc::new(embedded)))
    }

    /// The next `count` conditional puts of K lose a real race to another writer (`u64::MAX`:
    /// every one). Answers a hook that notes when each conditional put of K is made.
    fn race(store: &HookedStore, count: u64) -> Hook {
        let puts = store.on(Op::Put).key(K).when(Call::is_conditional_put).observe(|_| ());
        store.on(Op::Put).key(K).times(count).lose_race();
        puts
    }

    /// The next conditional put of K takes effect, but its answer is lost.
    fn lose_answer(store: &HookedStore) {
        store.on(Op::Put).key(K).when(Call::is_conditional_put).once().lose_answer();
    }

    #[tokio::test]
    async fn creates_then_updates_and_returns_the_version_written() {
        let (_dir, store) = racing().await;
        let first = cas_update(store.as_ref(), P, K, &options(3), increment).await.unwrap();
        assert_eq!((first.value(), first.written, first.rounds), (Some(&Counter(1)), true, 1));
        let second = cas_update(store.as_ref(), P, K, &options(3), increment).await.unwrap();
        assert_eq!(second.value(), Some(&Counter(2)));
        let record = store.get(P, K).await.unwrap().unwrap();
        assert_eq!(second.record.as_ref().map(|c| c.version), Some(record.version));
        assert_eq!(second.record.map(|c| c.created_ms), Some(record.created_ms), "creation time kept");
    }

    #[tokio::test(start_paused = true)]
    async fn lost_races_are_retried_after_growing_jittered_pauses() {
        let (_dir, store) = racing().await;
        cas_update(store.as_ref(), P, K, &options(10), increment).await.unwrap();
        let puts = race(&store, 4);
        let updated = cas_update(store.as_ref(), P, K, &options(10), increment).await.unwrap();
        // Rounds 1–4 lost to the concurrent writer; round 5 incremented, once.
        assert_eq!((updated.rounds, updated.value()), (5, Some(&Counter(2))));
        assert_eq!(stored(store.as_ref()).await, Some(2));
        // The pauses are the backoff's draws for retries 0..4, on tokio's clock.
        let times = puts.fired_at();
        let pauses: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
        let replay = Backoff::seeded(BackoffPolicy::compare_and_set(10), 3);
        let expected: Vec<Duration> = (0..4).map(|n| replay.delay(n)).collect();
        assert_eq!(pauses.len(), 4);
        for (pause, want) in pauses.iter().zip(&expected) {
            // Paused time advances by the sleep, rounded up to the timer's 1 ms.
            assert!(*pause >= *want && *pause <= *want + Duration::from_millis(1), "{pause:?} vs {want:?}");
        }
        assert!(expected.iter().any(|d| !d.is_zero()), "the loop pauses");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_create_race_is_retried_as_an_update() {
        let (_dir, store) = racing().await;
        race(&store, 1);
        let updated = cas_update(store.as_ref(), P, K, &options(10), increment).await.unwrap();
        // The other writer created 1 first; our second round read it and wrote 2.
        assert_eq!((updated.rounds, updated.value()), (2, Some(&Counter(2))));
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_are_bounded_and_nothing_of_ours_is_written() {
        let (_dir, store) = racing().await;
        cas_update(store.as_ref(), P, K, &options(4), increment).await.unwrap();
        let puts = race(&store, u64::MAX);
        let err = cas_update(store.as_ref(), P, K, &options(4), increment).await.unwrap_err();
        assert_eq!(err, CasError::Contended { key: K.to_owned(), attempts: 4 });
        assert_eq!(err.class_with(|_| ErrorClass::Internal), ErrorClass::Contended);
        assert_eq!(puts.fired(), 4, "exactly max_attempts writes");
        assert_eq!(stored(store.as_ref()).await, Some(1), "only the other writer's rewrites landed");
    }

    #[tokio::test]
    async fn a_refusing_mutation_stops_at_once() {
        let (_dir, store) = racing().await;
        cas_update(store.as_ref(), P, K, &options(3), increment).await.unwrap();
        let mut calls = 0;
        let err = cas_update(store.as_ref(), P, K, &options(3), |current: Option<&Current<Counter>>| {
            calls += 1;
            match current {
                Some(c) if c.value.0 >= 1 => Err(format!("already at {}", c.value.0)),
                _ => increment(current),
            }
        })
        .await
        .unwrap_err();
        assert_eq!(err, CasError::Record("already at 1".to_owned()));
        assert_eq!(calls, 1);
        assert_eq!(stored(store.as_ref()).await, Some(1));
    }

    #[tokio::test]
    async fn keep_writes_nothing_and_reports_the_record() {
        let (_dir, store) = racing().await;
        let absent =
            cas_update(store.as_ref(), P, K, &options(3), |_: Option<&Current<Counter>>| Ok(Change::Keep))
                .await
                .unwrap();
        assert_eq!((absent.record, absent.written), (None, false));
        assert_eq!(stored(store.as_ref()).await, None);
        cas_update(store.as_ref(), P, K, &options(3), increment).await.unwrap();
        let kept =
            cas_update(store.as_ref(), P, K, &options(3), |_: Option<&Current<Counter>>| Ok(Change::Keep))
                .await
                .unwrap();
        assert_eq!((kept.value(), kept.written), (Some(&Counter(1)), false));
    }

    #[tokio::test]
    async fn invariants_are_checked_before_the_write() {
        let (_dir, store) = racing().await;
        cas_update(store.as_ref(), P, K, &options(3), increment).await.unwrap();
        let version = store.get(P, K).await.unwrap().unwrap().version;
        let err = cas_update(store.as_ref(), P, K, &options(3), |_: Option<&Current<Counter>>| {
            Ok(Change::Write(Counter(0)))
        })
        .await
        .unwrap_err();
        assert_eq!(err, CasError::Record("counter moved from 1 to 0".to_owned()));
        assert_eq!(store.get(P, K).await.unwrap().unwrap().version, version, "nothing written");
    }

    #[tokio::test]
    async fn a_record_that_does_not_decode_is_reported_not_overwritten() {
        let (_dir, store) = racing().await;
        store.put(P, K, Bytes::from_static(b"twelve"), PutCondition::None).await.unwrap();
        let err = cas_update(store.as_ref(), P, K, &options(3), increment).await.unwrap_err();
        assert!(matches!(&err, CasError::Record(e) if e.starts_with(K)), "{err:?}");
        assert_eq!(&store.get(P, K).await.unwrap().unwrap().value[..], b"twelve");
    }

    #[tokio::test(start_paused = true)]
    async fn an_unknown_outcome_fails_or_is_reread_as_asked() {
        let (_dir, store) = racing().await;
        lose_answer(&store);
        let err = cas_update(store.as_ref(), P, K, &options(5), increment).await.unwrap_err();
        assert!(matches!(err, CasError::Meta(MetaError::OutcomeUnknown(_))), "{err:?}");
        assert_eq!(stored(store.as_ref()).await, Some(1), "the write landed after all");

        // Re-reading, the mutation sees its own write and decides from it: "set to 2 unless
        // it is 2 already" writes once.
        lose_answer(&store);
        let updated =
            cas_update(store.as_ref(), P, K, &options(5).reread_unknown_outcomes(), |current| match current
                .map(|c: &Current<Counter>| c.value.0)
            {
                Some(2) => Ok(Change::Keep),
                _ => Ok(Change::Write(Counter(2))),
            })
            .await
            .unwrap();
        assert_eq!((updated.value(), updated.written, updated.rounds), (Some(&Counter(2)), false, 2));
    }
}
