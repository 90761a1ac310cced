//! Consumer groups' committed offsets: per group, stream partition and namespace, guarded by
//! a generation so that a stale consumer cannot move a group backwards. Membership and
//! rebalancing are the Kafka front end's; this is the offset store it (and HTTP and gRPC
//! consumers) use through [`crate::api::Api`].
//!
//! ## Records
//!
//! Every record lives in the metadata partition [`GROUPS_PARTITION`]. A group belongs to a
//! namespace (tokens are granted per namespace). Offsets are keyed by the partition's log id,
//! so a stream dropped and created again (new logs) starts with no committed offsets.
//!
//! ```text
//! key                                              value (JSON)
//! /lakestream-groups/{ns}/{group}                  {"v":1,"created_ms":…}            the group exists
//! /lakestream-groups/{ns}/{group}/{L:020}          {"v":1,"stream":"s","partition":0,"offset":42,
//!                                                   "generation":3,"metadata":"…","committed_ms":…}
//! ```
//!
//! Each kind of key has a fixed depth (three and four `/`), so one scan over
//! `[prefix, prefix + U+10FFFF)` sees exactly the groups of a namespace, or one group's
//! offsets, in the store's hierarchical key order.
//!
//! ## Commit rule
//!
//! A commit carries the committer's generation. It is refused (409, nothing written) when the
//! stored generation is greater (a consumer of an older generation), or when it is equal and
//! the offset is lower than the stored one (a late commit of the same consumer). A greater
//! generation may set any offset (the new owner resets). The Kafka front end, whose
//! coordinator has already checked the member's generation, lets a commit of the stored
//! generation set a lower offset too, as Kafka does ([`SameGeneration::Any`]). The offset may not exceed the
//! partition's next offset. The write is a compare-and-set on the record's version
//! ([`lakestream_meta::cas_update`]), retried after a jittered pause and re-checking when
//! another commit won the race; a commit that keeps losing is [`ErrorKind::Contended`], as
//! every lost race is.

use std::sync::atomic::AtomicU64;

use bytes::Bytes;
use lakestream_format::LogId;
use lakestream_format::retry::{Backoff, BackoffPolicy};
use lakestream_meta::{
    CasError, CasOptions, CasRecord, Change, Current, MetaError, MetaStore, PutCondition, Record,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde::{Deserialize, Serialize};

use crate::api::{ApiError, ApiResult, ErrorKind};

/// The metadata partition holding every group record.
pub const GROUPS_PARTITION: &str = "lakestream-groups";

/// The prefix of every group key.
pub const GROUPS_PREFIX: &str = "/lakestream-groups/";

/// The longest group id.
pub const MAX_GROUP_ID: usize = 128;

/// The longest commit metadata string.
pub const MAX_METADATA_BYTES: usize = 4096;

/// Records read per page of a scan over one group's offsets.
const SCAN_PAGE: usize = 1000;

/// How many writes a commit tries before it reports contention.
const COMMIT_ATTEMPTS: u32 = 8;

/// Checks a group id: 1 to [`MAX_GROUP_ID`] characters of `A-Z a-z 0-9 . _ -`.
pub fn check_group_id(id: &str) -> ApiResult<()> {
    if id.is_empty() || id.len() > MAX_GROUP_ID {
        return Err(ApiError::invalid(format!(
            "group: must be 1 to {MAX_GROUP_ID} characters, not {}",
            id.len()
        )));
    }
    if let Some(c) = id.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(ApiError::invalid(format!(
            "group: {c:?} is not allowed; use A-Z, a-z, 0-9, '.', '_' and '-'"
        )));
    }
    Ok(())
}

fn group_key(namespace: &str, group: &str) -> String {
    format!("{GROUPS_PREFIX}{namespace}/{group}")
}

fn offset_key(namespace: &str, group: &str, log_id: LogId) -> String {
    format!("{GROUPS_PREFIX}{namespace}/{group}/{:020}", log_id.0)
}

/// The end of a scan over the keys `prefix…` of one depth.
fn scan_end(prefix: &str) -> String {
    format!("{prefix}\u{10FFFF}")
}

/// What a consumer commits for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommit {
    /// The next offset the group will read (Kafka's convention: one past the last processed).
    pub offset: u64,
    /// The committer's generation (a Kafka group's generation id; 0 for a lone consumer).
    pub generation: u64,
    /// Free text kept with the offset, at most [`MAX_METADATA_BYTES`].
    pub metadata: String,
}

/// Whether a commit of the stored generation may set an offset below the stored one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SameGeneration {
    /// Only forward: a late commit of the same consumer cannot move the group backwards (the
    /// HTTP and gRPC rule).
    #[default]
    Forward,
    /// Any offset: a Kafka member may seek back and commit; its coordinator checked its
    /// membership and generation.
    Any,
}

/// A committed offset, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedOffset {
    /// The format version, 1.
    pub v: u32,
    /// The stream.
    pub stream: String,
    /// The partition.
    pub partition: usize,
    /// The committed offset.
    pub offset: u64,
    /// The generation that committed it.
    pub generation: u64,
    /// The committer's free text.
    #[serde(default)]
    pub metadata: String,
    /// When it was committed, in ms since the Unix epoch (the store's time).
    #[serde(default)]
    pub committed_ms: i64,
}

/// A partition's committed offset and lag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    /// The partition.
    pub partition: usize,
    /// What the group committed, if it did.
    pub committed: Option<CommittedOffset>,
    /// The partition's next offset.
    pub next_offset: u64,
    /// Records between the committed offset and the next offset (the next offset when nothing
    /// was committed).
    pub lag: u64,
}

fn meta_error(what: &str, e: MetaError) -> ApiError {
    ApiError::new(ErrorKind::of_class(e.class()), format!("{what}: {e}"))
}

impl CasRecord for CommittedOffset {
    type Error = ApiError;

    fn decode(record: &Record) -> ApiResult<Self> {
        decode(&record.key, &record.value)
    }

    fn encode(&self) -> ApiResult<Bytes> {
        serde_json::to_vec(self)
            .map(Bytes::from)
            .map_err(|e| ApiError::new(ErrorKind::Internal, e.to_string()))
    }
}

/// The group store over a metadata store.
#[derive(Debug, Clone)]
pub struct GroupStore<'a> {
    meta: &'a dyn MetaStore,
    commits: CasOptions,
}

impl<'a> GroupStore<'a> {
    /// The store over `meta`; lost commit races pause with the process's jitter.
    pub fn new(meta: &'a dyn MetaStore) -> Self {
        let backoff = Backoff::process(BackoffPolicy::compare_and_set(COMMIT_ATTEMPTS));
        GroupStore { meta, commits: CasOptions::new(backoff) }
    }

    /// This store, pausing between lost commit races as `backoff` says (its attempt bound
    /// included).
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.commits.backoff = backoff;
        self
    }

    /// Commits `commit` for `group` on the log of `stream`'s `partition` (see the commit rule).
    pub async fn commit(
        &self,
        namespace: &str,
        group: &str,
        stream: &str,
        partition: usize,
        log_id: LogId,
        commit: &OffsetCommit,
    ) -> ApiResult<CommittedOffset> {
        self.commit_with(namespace, group, stream, partition, log_id, commit, SameGeneration::Forward).await
    }

    /// [`GroupStore::commit`], with `same` deciding whether a commit of the stored generation
    /// may move the offset back.
    #[allow(clippy::too_many_arguments)]
    pub async fn commit_with(
        &self,
        namespace: &str,
        group: &str,
        stream: &str,
        partition: usize,
        log_id: LogId,
        commit: &OffsetCommit,
        same: SameGeneration,
    ) -> ApiResult<CommittedOffset> {
        check_group_id(group)?;
        if commit.metadata.len() > MAX_METADATA_BYTES {
            return Err(ApiError::invalid(format!("metadata: at most {MAX_METADATA_BYTES} bytes")));
        }
        // The group's marker, for listing; it is never removed while offsets exist.
        let marker = serde_json::json!({ "v": 1 }).to_string();
        match self
            .meta
            .put(GROUPS_PARTITION, &group_key(namespace, group), Bytes::from(marker), PutCondition::IfAbsent)
            .await
        {
            Ok(_) | Err(MetaError::KeyExists { .. }) => {}
            Err(e) => return Err(meta_error("creating the group", e)),
        }
        let key = offset_key(namespace, group, log_id);
        let value = CommittedOffset {
            v: 1,
            stream: stream.to_owned(),
            partition,
            offset: commit.offset,
            generation: commit.generation,
            metadata: commit.metadata.clone(),
            committed_ms: 0,
        };
        let check = |current: Option<&Current<CommittedOffset>>| {
            if let Some(stored) = current.map(|c| &c.value) {
                if commit.generation < stored.generation {
                    return Err(ApiError::new(
                        ErrorKind::Conflict,
                        format!(
                            "generation {} is stale: group {group} is at generation {} on {stream}/{partition}",
                            commit.generation, stored.generation
                        ),
                    ));
                }
                if commit.generation == stored.generation
                    && commit.offset < stored.offset
                    && same == SameGeneration::Forward
                {
                    return Err(ApiError::new(
                        ErrorKind::Conflict,
                        format!(
                            "offset {} is below the committed offset {} of generation {}: a commit of one \
                             generation cannot move the group backwards (a new generation can)",
                            commit.offset, stored.offset, stored.generation
                        ),
                    ));
                }
            }
            Ok(Change::Write(value.clone()))
        };
        match lakestream_meta::cas_update(self.meta, GROUPS_PARTITION, &key, &self.commits, check).await {
            Ok(updated) => {
                let written = updated.record.map(|c| (c.value, c.modified_ms));
                let (mut value, modified_ms) = written.unwrap_or((value, 0));
                value.committed_ms = modified_ms;
                Ok(value)
            }
            Err(CasError::Record(e)) => Err(e),
            Err(CasError::Contended { attempts, .. }) => Err(ApiError::new(
                ErrorKind::Contended,
                format!("commit of group {group} on {stream}/{partition} lost {attempts} races; retry"),
            )),
            Err(CasError::Meta(e)) => Err(meta_error("committing the offset", e)),
        }
    }

    /// Whether the group has committed anything in the namespace.
    pub async fn exists(&self, namespace: &str, group: &str) -> ApiResult<bool> {
        check_group_id(group)?;
        let found = self
            .meta
            .get(GROUPS_PARTITION, &group_key(namespace, group))
            .await
            .map_err(|e| meta_error("reading the group", e))?;
        Ok(found.is_some())
    }

    /// The group's committed offset on a log, if any.
    pub async fn committed(
        &self,
        namespace: &str,
        group: &str,
        log_id: LogId,
    ) -> ApiResult<Option<CommittedOffset>> {
        let key = offset_key(namespace, group, log_id);
        let found = self
            .meta
            .get(GROUPS_PARTITION, &key)
            .await
            .map_err(|e| meta_error("reading the committed offset", e))?;
        match found {
            None => Ok(None),
            Some(record) => {
                let mut committed = decode(&key, &record.value)?;
                committed.committed_ms = record.modified_ms;
                Ok(Some(committed))
            }
        }
    }

    /// Every offset the group has committed in the namespace, in log order.
    pub async fn offsets(&self, namespace: &str, group: &str) -> ApiResult<Vec<CommittedOffset>> {
        check_group_id(group)?;
        let prefix = format!("{}/", group_key(namespace, group));
        let end = scan_end(&prefix);
        let mut start = prefix.clone();
        let mut out = Vec::new();
        loop {
            let page = self
                .meta
                .scan(GROUPS_PARTITION, &start, &end, Some(SCAN_PAGE))
                .await
                .map_err(|e| meta_error("reading the group's offsets", e))?;
            for record in &page {
                let Some(rest) = record.key.strip_prefix(&prefix) else { continue };
                if rest.contains('/') {
                    continue;
                }
                let mut committed = decode(&record.key, &record.value)?;
                committed.committed_ms = record.modified_ms;
                out.push(committed);
            }
            match page.last() {
                Some(last) if page.len() == SCAN_PAGE => start = format!("{}\u{0}", last.key),
                _ => return Ok(out),
            }
        }
    }

    /// The namespace's groups after `after`, at most `limit`, and whether more remain.
    pub async fn list(
        &self,
        namespace: &str,
        after: Option<&str>,
        limit: usize,
    ) -> ApiResult<(Vec<String>, bool)> {
        let prefix = format!("{GROUPS_PREFIX}{namespace}/");
        let start = match after {
            Some(a) => format!("{prefix}{a}\u{0}"),
            None => prefix.clone(),
        };
        let records = self
            .meta
            .scan(GROUPS_PARTITION, &start, &scan_end(&prefix), Some(limit + 1))
            .await
            .map_err(|e| meta_error("listing groups", e))?;
        let mut names: Vec<String> = records
            .iter()
            .filter_map(|r| r.key.strip_prefix(&prefix))
            .filter(|rest| !rest.contains('/'))
            .map(str::to_owned)
            .collect();
        let more = names.len() > limit;
        names.truncate(limit);
        Ok((names, more))
    }
}

fn decode(key: &str, value: &[u8]) -> ApiResult<CommittedOffset> {
    serde_json::from_slice(value)
        .map_err(|e| ApiError::new(ErrorKind::CorruptData, format!("committed offset {key}: {e}")))
}

/// Consumer groups' lag per partition, as of each group's last commit or offset fetch
/// (`lakestream_group_lag_records{namespace, group, stream, partition}`), recorded by the
/// operations that commit and fetch offsets.
#[derive(Debug)]
pub struct GroupLagMetrics {
    lags: Family<GroupPartitionLabels, Gauge<u64, AtomicU64>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GroupPartitionLabels {
    namespace: String,
    group: String,
    stream: String,
    partition: usize,
}

impl GroupLagMetrics {
    /// New lag metrics, registered in `registry`.
    pub(crate) fn registered(registry: &mut prometheus_client::registry::Registry) -> Self {
        let metrics = GroupLagMetrics { lags: Family::default() };
        registry.register(
            "lakestream_group_lag_records",
            "Records between a consumer group's committed offset and the partition's next offset, as of the group's last commit or offset fetch",
            crate::metrics::Announced(metrics.lags.clone()),
        );
        metrics
    }

    /// Records a group's lag on a partition.
    pub fn record(&self, namespace: &str, group: &str, stream: &str, partition: usize, lag: u64) {
        let labels = GroupPartitionLabels {
            namespace: namespace.to_owned(),
            group: group.to_owned(),
            stream: stream.to_owned(),
            partition,
        };
        self.lags.get_or_create(&labels).set(lag);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn kafka_commits_may_move_back_within_a_generation_and_a_group_lists_its_offsets() {
        let meta = lakestream_meta::memory::InMemoryStore::new();
        let store = GroupStore::new(&meta);
        let commit = |offset, generation| OffsetCommit { offset, generation, metadata: String::new() };
        store.commit("ns", "g", "s", 0, LogId(7), &commit(10, 2)).await.unwrap();
        // The HTTP rule refuses moving back within a generation; Kafka's allows it.
        let back = store.commit("ns", "g", "s", 0, LogId(7), &commit(4, 2)).await.unwrap_err();
        assert_eq!(back.kind(), ErrorKind::Conflict);
        let any = SameGeneration::Any;
        assert_eq!(
            store.commit_with("ns", "g", "s", 0, LogId(7), &commit(4, 2), any).await.unwrap().offset,
            4
        );
        // A stale generation stays refused either way.
        let stale = store.commit_with("ns", "g", "s", 0, LogId(7), &commit(9, 1), any).await.unwrap_err();
        assert_eq!(stale.kind(), ErrorKind::Conflict);
        store.commit("ns", "g", "s", 1, LogId(8), &commit(3, 2)).await.unwrap();
        store.commit("ns", "g2", "s", 0, LogId(7), &commit(1, 0)).await.unwrap();
        let offsets = store.offsets("ns", "g").await.unwrap();
        let found: Vec<(usize, u64)> = offsets.iter().map(|c| (c.partition, c.offset)).collect();
        assert_eq!(found, [(0, 4), (1, 3)]);
        assert!(store.offsets("ns", "nobody").await.unwrap().is_empty());
    }

    /// A commit that keeps losing compare-and-set races to other commits of the same
    /// partition (real ones, on the embedded store) ends `Contended` after its policy's
    /// attempts — the one answer of every lost race: 409 with `Retry-After` and the code
    /// `contended` — having written nothing of its own; once the races stop it succeeds.
    #[tokio::test]
    async fn a_commit_that_keeps_losing_races_is_contended() {
        use std::sync::Arc;
        use std::time::Duration;

        use lakestream_format::retry::{Backoff, BackoffPolicy};
        use lakestream_meta::hooked::{Call, HookedStore, Op};

        let dir = tempfile::tempdir().unwrap();
        let embedded = lakestream_meta::EmbeddedStore::open(dir.path().join("metadata.redb")).await.unwrap();
        let meta = HookedStore::new(Arc::new(embedded));
        let policy = BackoffPolicy::new(Duration::ZERO, Duration::ZERO, 3);
        let store = GroupStore::new(meta.as_ref()).with_backoff(Backoff::seeded(policy, 1));
        let commit = |offset| OffsetCommit { offset, generation: 1, metadata: String::new() };
        store.commit("ns", "g", "s", 0, LogId(7), &commit(5)).await.unwrap();

        let key = offset_key("ns", "g", LogId(7));
        let puts = meta.on(Op::Put).key(&key).when(Call::is_conditional_put).observe(|_| ());
        let race = meta.on(Op::Put).key(&key).lose_race();
        let err = store.commit("ns", "g", "s", 0, LogId(7), &commit(9)).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Contended, "{err:?}");
        assert_eq!(
            (err.http_status(), err.code(), err.retry_after_secs()),
            (http::StatusCode::CONFLICT, "contended", Some(1))
        );
        assert_eq!(puts.fired(), 3, "the policy's attempts, no more");

        race.remove();
        let offsets = store.offsets("ns", "g").await.unwrap();
        assert_eq!(offsets.iter().map(|c| c.offset).collect::<Vec<_>>(), [5], "nothing of ours written");
        assert_eq!(store.commit("ns", "g", "s", 0, LogId(7), &commit(9)).await.unwrap().offset, 9);
    }

    #[test]
    fn group_ids_are_checked() {
        assert!(check_group_id("billing.v2_a-1").is_ok());
        for bad in ["", "a/b", "sp ace", &"g".repeat(129)] {
            assert!(check_group_id(bad).unwrap_err().message().starts_with("group"), "{bad:?}");
        }
    }
}
