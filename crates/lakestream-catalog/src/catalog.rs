//! The [`Catalog`]: namespaces, streams and their layouts, over any [`MetaStore`].
//!
//! Vocabulary. A stream *identity* is the pair (namespace, name). Its *stream record* is
//! never removed: it is live (`active`), or a tombstone (`dropping`, then `dropped`). The
//! *layout* is the list of the stream's log IDs, partition `i` at position `i`; it is what
//! readers see. A *pending expansion* is a list of log IDs claimed for new partitions but
//! not yet published. A *log record* registers one log: its stream and partition.
//!
//! Creating a stream and adding partitions share one protocol, so that a layout never
//! names a log whose record does not exist yet:
//!
//! 1. allocate the new log IDs (see [`crate::allocator`]);
//! 2. **claim**: write the IDs as the stream record's pending expansion, with
//!    `CreateIfAbsent` for a new stream or `CompareAndSet` for an existing one;
//! 3. create the log record of every new log (`CreateIfAbsent`; an existing record that
//!    says the same counts as created);
//! 4. **publish**: `CompareAndSet` the stream record, appending the pending IDs to the
//!    layout and clearing the pending expansion.
//!
//! A crash after step 2 leaves a pending expansion: every later operation on the stream
//! (adding partitions, [`Catalog::complete_pending_expansion`], dropping) finishes it or
//! deletes its logs, and steps 3–4 are idempotent. Until step 4 the new logs are invisible:
//! the layout does not name them, and [`Catalog::open_log`] refuses them.

use std::collections::BTreeMap;
use std::sync::Arc;

use lakestream_format::compacted::Binding;
use lakestream_format::retry::{Backoff, BackoffPolicy, Jitter};
use lakestream_format::{LogId, LogRef, kafka, keys, native};
use lakestream_meta::{
    CasOptions, CasRecord, Change, Current, MetaError, MetaStore, PutCondition, Updated, cas_update, lease,
};
use tracing::{debug, info, warn};

use crate::allocator::allocate_log_ids;
use crate::config::CatalogConfig;
use crate::error::{CatalogError, Result};
use crate::names::{validate_namespace, validate_stream_name};
use crate::records::{
    CatalogRecord, LogRecord, NamespaceRecord, NamespaceState, PendingExpansion, RECORD_VERSION,
    StreamRecord, StreamState, listing_end, log_key, namespace_key, namespaces_prefix, stream_key,
    streams_prefix,
};

/// A namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    /// Its name.
    pub name: String,
    /// Free-form properties given at creation.
    pub properties: BTreeMap<String, String>,
    /// When it was created, in ms since the Unix epoch (the store's creation timestamp).
    pub created_ms: i64,
}

/// A live stream and its published layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stream {
    /// The namespace.
    pub namespace: String,
    /// The stream name.
    pub name: String,
    /// Free-form properties given at creation.
    pub properties: BTreeMap<String, String>,
    /// The published layout: the log of partition `i` at position `i`.
    pub logs: Vec<LogId>,
    /// Logs of an expansion claimed but not yet published (normally empty; non-empty only
    /// while an expansion runs or after one was interrupted).
    pub pending_logs: Vec<LogId>,
    /// When the identity was created, in ms since the Unix epoch.
    pub created_ms: i64,
}

impl Stream {
    /// The number of published partitions.
    pub fn partition_count(&self) -> usize {
        self.logs.len()
    }

    /// What a reader needs to read partition `partition`, if the layout has it.
    pub fn log_ref(&self, partition: usize) -> Option<LogRef> {
        self.logs.get(partition).map(|&log_id| LogRef {
            log_id,
            namespace: self.namespace.clone(),
            stream: self.name.clone(),
        })
    }

    /// The binding the stream's payloads follow, fixed by the properties it was created with:
    /// the Kafka binding for a Kafka topic's stream, the native binding otherwise. It names
    /// the stream's compacted files, and a front end appending to a Kafka topic's stream
    /// checks every payload against it.
    pub fn binding(&self) -> Binding {
        native::binding_of_stream(&self.properties)
    }
}

/// The properties that decide a stream's binding ([`Stream::binding`]); they cannot change
/// after creation, or a stream's entries would follow one binding and its files another.
pub const BINDING_PROPERTIES: &[&str] = &[kafka::TOPIC_NAME_PROPERTY, kafka::LEGACY_TOPIC_PROPERTY];

/// What the catalog knows of one log: the [`LogRef`] a reader or compactor needs, and the
/// log's partition index in its stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogInfo {
    /// The log and its stream's identity.
    pub log_ref: LogRef,
    /// The log's position in the stream's layout.
    pub partition: u32,
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// The items of this page, in name order (bytewise).
    pub items: Vec<T>,
    /// The token of the next page (the last name of this one), or `None` when this is the
    /// last page.
    pub next_page: Option<String>,
}

/// How [`Catalog::add_partitions`] grows a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Growth {
    /// Add this many partitions to whatever the stream has when the expansion is claimed.
    /// Two concurrent calls with `By(2)` and `By(3)` add five. Not idempotent on retry.
    By(u32),
    /// Grow to at least this many partitions; a stream that has as many already is left
    /// unchanged. Idempotent, like Kafka's CreatePartitions.
    To(u32),
}

/// A decoded record with the store's metadata needed to update it.
type Versioned<T> = Current<T>;

/// The Catalog role over a metadata store. Cheap to clone; every method is safe to call
/// concurrently, from one process or many.
///
/// Every change of a catalog record is a compare-and-set; a lost one is retried after a
/// pause ([`BackoffPolicy::compare_and_set`], with full jitter) up to
/// [`CatalogConfig::max_cas_attempts`] times, then reported as
/// [`CatalogError::Contended`].
#[derive(Debug, Clone)]
pub struct Catalog {
    store: Arc<dyn MetaStore>,
    config: Arc<CatalogConfig>,
    /// How lost compare-and-sets are retried. Every loop re-reads after an unknown outcome:
    /// each recognises its own write, or (the allocator) only wastes IDs by repeating it.
    cas: CasOptions,
}

impl Catalog {
    /// A catalog over `store`, after checking `config`. The pauses between compare-and-set
    /// rounds draw their jitter from the process's generator ([`Jitter::process`]);
    /// [`Catalog::with_jitter`] injects it.
    pub fn new(store: Arc<dyn MetaStore>, config: CatalogConfig) -> Result<Self> {
        Self::with_jitter(store, config, Jitter::process())
    }

    /// [`Catalog::new`] with the jitter of its compare-and-set pauses drawn from `jitter`
    /// (seeded, in tests and simulations).
    pub fn with_jitter(
        store: Arc<dyn MetaStore>,
        config: CatalogConfig,
        jitter: Arc<Jitter>,
    ) -> Result<Self> {
        config.validate()?;
        let backoff = Backoff::new(BackoffPolicy::compare_and_set(config.max_cas_attempts), jitter);
        let cas = CasOptions::new(backoff).reread_unknown_outcomes();
        Ok(Self { store, config: Arc::new(config), cas })
    }

    /// The settings in use.
    pub fn config(&self) -> &CatalogConfig {
        &self.config
    }

    // ---- namespaces ----------------------------------------------------------------

    /// Creates a namespace. Fails with `NamespaceExists` if it exists.
    pub async fn create_namespace(
        &self,
        name: &str,
        properties: BTreeMap<String, String>,
    ) -> Result<Namespace> {
        validate_namespace(name)?;
        let key = namespace_key(name);
        let record = NamespaceRecord {
            version: RECORD_VERSION,
            name: name.to_owned(),
            properties,
            state: NamespaceState::Active,
        };
        match self
            .store
            .put(self.partition(), &key, CatalogRecord::encode(&record), PutCondition::IfAbsent)
            .await
        {
            Ok(written) => Ok(namespace_of(record, written.created_ms)),
            Err(MetaError::KeyExists { .. }) => {
                Err(CatalogError::NamespaceExists { namespace: name.to_owned() })
            }
            Err(other) => Err(other.into()),
        }
    }

    /// The namespace with this name.
    pub async fn get_namespace(&self, name: &str) -> Result<Namespace> {
        validate_namespace(name)?;
        match self.read::<NamespaceRecord>(&namespace_key(name)).await? {
            Some(found) => Ok(namespace_of(found.value, found.created_ms)),
            None => Err(CatalogError::NamespaceNotFound { namespace: name.to_owned() }),
        }
    }

    /// Up to `limit` namespaces in name order, after the page token `after` (the
    /// `next_page` of the previous page).
    pub async fn list_namespaces(&self, after: Option<&str>, limit: usize) -> Result<Page<Namespace>> {
        if let Some(token) = after {
            validate_namespace(token)?;
        }
        self.list_page(&namespaces_prefix(), after, limit, |record: NamespaceRecord, created_ms| {
            Some(namespace_of(record, created_ms))
        })
        .await
    }

    /// Deletes a namespace that holds no live stream. Fails with `NamespaceNotEmpty` (and
    /// changes nothing) while it holds one, and with `NamespaceNotFound` when it does not exist.
    ///
    /// No stream can be created in it meanwhile: the namespace is first marked `deleting` by
    /// compare-and-set, and [`Catalog::create_stream`] confirms the namespace is active by a
    /// compare-and-set of its own *after* writing the stream's record. Of the two writes one
    /// comes first: if the creation's, the stream record exists before the deletion lists the
    /// streams (and the deletion is refused); if the deletion's, the creation sees `deleting`
    /// and drops the stream it made. The streams' tombstones stay (their identities remain
    /// dropped should the namespace be created again).
    pub async fn delete_namespace(&self, name: &str) -> Result<()> {
        validate_namespace(name)?;
        let key = namespace_key(name);
        let not_found = || CatalogError::NamespaceNotFound { namespace: name.to_owned() };
        let marked = self
            .update(&key, |current: Option<&Versioned<NamespaceRecord>>| match current {
                None => Err(not_found()),
                // Another deletion is in flight (or crashed): finish it the same way.
                Some(c) if c.value.state == NamespaceState::Deleting => Ok(Change::Keep),
                Some(c) => {
                    Ok(Change::Write(NamespaceRecord { state: NamespaceState::Deleting, ..c.value.clone() }))
                }
            })
            .await?;
        let marked = settled(marked, &key)?;
        let live = self.count_live_streams(name).await?;
        if live > 0 {
            // Back to active, unless someone changed it since (then they decide).
            let mut active = marked.value.clone();
            active.state = NamespaceState::Active;
            let _ = self
                .store
                .put(
                    self.partition(),
                    &key,
                    CatalogRecord::encode(&active),
                    PutCondition::IfVersion(marked.version),
                )
                .await;
            return Err(CatalogError::NamespaceNotEmpty { namespace: name.to_owned(), streams: live });
        }
        self.store.delete(self.partition(), &key).await?;
        info!(namespace = name, "deleted namespace");
        Ok(())
    }

    /// How many live (active or being dropped) streams the namespace holds.
    async fn count_live_streams(&self, namespace: &str) -> Result<usize> {
        let mut live = 0;
        let mut after: Option<String> = None;
        loop {
            let page = self
                .list_page(
                    &streams_prefix(namespace),
                    after.as_deref(),
                    1000,
                    |record: StreamRecord, created_ms| {
                        (record.state != StreamState::Dropped).then(|| {
                            stream_of(Versioned { value: record, version: 0, created_ms, modified_ms: 0 })
                        })
                    },
                )
                .await?;
            live += page.items.len();
            match page.next_page {
                Some(next) => after = Some(next),
                None => return Ok(live),
            }
        }
    }

    /// Confirms, after a stream record was created in `namespace`, that the namespace is
    /// still active, by rewriting its record with compare-and-set (see
    /// [`Catalog::delete_namespace`]). `false` when it is gone or being deleted.
    async fn confirm_namespace_active(&self, namespace: &str) -> Result<bool> {
        let key = namespace_key(namespace);
        let confirmed = self
            .update(&key, |current: Option<&Versioned<NamespaceRecord>>| match current {
                // Rewriting the same value still changes the version a deletion compares.
                Some(c) if c.value.state == NamespaceState::Active => Ok(Change::Write(c.value.clone())),
                _ => Ok(Change::Keep),
            })
            .await?;
        Ok(confirmed.written)
    }

    // ---- streams -------------------------------------------------------------------

    /// Creates a stream of `partitions` logs in an existing namespace, and returns it with
    /// its layout published.
    ///
    /// Fails with `StreamExists` if a live stream has the identity, and with `StreamDropped`
    /// if the identity has been dropped (spec: creating a stream MUST fail when its
    /// identity has been dropped).
    pub async fn create_stream(
        &self,
        namespace: &str,
        name: &str,
        partitions: u32,
        properties: BTreeMap<String, String>,
    ) -> Result<Stream> {
        validate_namespace(namespace)?;
        validate_stream_name(name)?;
        self.check_partition_count(u64::from(partitions))?;
        match self.read::<NamespaceRecord>(&namespace_key(namespace)).await? {
            Some(ns) if ns.value.state == NamespaceState::Active => {}
            _ => return Err(CatalogError::NamespaceNotFound { namespace: namespace.to_owned() }),
        }
        let key = stream_key(namespace, name);
        // Refuse a taken identity before allocating, so that retries waste no IDs.
        if let Some(existing) = self.read::<StreamRecord>(&key).await? {
            return Err(taken(&existing.value));
        }
        let ids = self.allocate(u64::from(partitions)).await?;
        let record = StreamRecord {
            version: RECORD_VERSION,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            state: StreamState::Active,
            properties,
            layout: Vec::new(),
            pending_expansion: Some(PendingExpansion { new_logs: ids.clone().collect() }),
        };
        self.update(&key, |current: Option<&Versioned<StreamRecord>>| match current {
            None => Ok(Change::Write(record.clone())),
            // Ours, if an earlier attempt with an unknown outcome committed.
            Some(found) if found.value.all_logs().any(|l| l.0 == ids.start) => Ok(Change::Keep),
            Some(found) => Err(taken(&found.value)),
        })
        .await?;
        if !self.confirm_namespace_active(namespace).await? {
            // A deletion of the namespace came first: undo, leaving a tombstone.
            self.drop_stream(namespace, name).await?;
            return Err(CatalogError::NamespaceNotFound { namespace: namespace.to_owned() });
        }
        debug!(namespace, name, first_log_id = ids.start, partitions, "claimed stream identity");
        let published = self.complete_expansion(namespace, name).await?;
        let layout = &published.value.layout;
        // A stream may have many thousands of partitions: the log line names the range only.
        let (first_log, last_log) = (layout.first().copied(), layout.last().copied());
        info!(namespace, name, partitions = layout.len(), ?first_log, ?last_log, "created stream");
        Ok(stream_of(published))
    }

    /// The live stream with this identity. Fails with `StreamNotFound`, or `StreamDropped`
    /// for a dropped identity.
    pub async fn get_stream(&self, namespace: &str, name: &str) -> Result<Stream> {
        validate_namespace(namespace)?;
        validate_stream_name(name)?;
        let found = self.read_live_stream(namespace, name).await?;
        Ok(stream_of(found))
    }

    /// Up to `limit` live streams of a namespace in name order, after the page token `after`.
    /// Tombstones are not listed.
    pub async fn list_streams(
        &self,
        namespace: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<Stream>> {
        validate_namespace(namespace)?;
        if let Some(token) = after {
            validate_stream_name(token)?;
        }
        self.list_page(&streams_prefix(namespace), after, limit, |record: StreamRecord, created_ms| {
            (record.state == StreamState::Active)
                .then(|| stream_of(Versioned { value: record, version: 0, created_ms, modified_ms: 0 }))
        })
        .await
    }

    /// Adds partitions to a live stream and returns it with the new layout published.
    ///
    /// Spec: adding stream partitions MUST publish the stream's new layout atomically, and
    /// only after the log of every new partition exists. The new logs are claimed, created
    /// and then published by one compare-and-set (see the module documentation). An
    /// interrupted expansion found on the way is finished first.
    pub async fn add_partitions(&self, namespace: &str, name: &str, growth: Growth) -> Result<Stream> {
        validate_namespace(namespace)?;
        validate_stream_name(name)?;
        if matches!(growth, Growth::By(0) | Growth::To(0)) {
            return Err(CatalogError::InvalidArgument(format!("{growth:?} adds no partition")));
        }
        let key = stream_key(namespace, name);
        // Each round allocates IDs for the layout it read and claims them; a round whose
        // layout changed meanwhile starts again (the IDs it took are skipped, never reused).
        for round in 0..self.config.max_cas_attempts {
            self.pause_before(round).await;
            let current = self.complete_expansion(namespace, name).await?;
            let have = current.value.layout.len() as u64;
            let target = match growth {
                Growth::By(n) => have + u64::from(n),
                Growth::To(n) => u64::from(n),
            };
            if target <= have {
                return Ok(stream_of(current));
            }
            self.check_partition_count(target)?;
            let ids = self.allocate(target - have).await?;
            let claim = PendingExpansion { new_logs: ids.clone().collect() };
            let ours = |record: &StreamRecord| record.all_logs().any(|l| l.0 == ids.start);
            let claimed = self
                .update(&key, |now: Option<&Versioned<StreamRecord>>| {
                    let now = live_stream(now, namespace, name)?;
                    if ours(&now.value)
                        || now.value.pending_expansion.is_some()
                        || now.value.layout.len() as u64 != have
                    {
                        // Claimed already (an unknown outcome that landed), or another
                        // expansion came first: decided below.
                        return Ok(Change::Keep);
                    }
                    let claimed =
                        StreamRecord { pending_expansion: Some(claim.clone()), ..now.value.clone() };
                    Ok(Change::Write(claimed))
                })
                .await?;
            if !ours(&settled(claimed, &key)?.value) {
                continue;
            }
            debug!(namespace, name, first_log_id = ids.start, target, "claimed expansion");
            let published = self.complete_expansion(namespace, name).await?;
            info!(namespace, name, partitions = published.value.layout.len(), "added partitions");
            return Ok(stream_of(published));
        }
        Err(CatalogError::Contended { key, attempts: self.config.max_cas_attempts })
    }

    /// Finishes an expansion that a crashed or slow caller claimed but did not publish, and
    /// returns the stream. Does nothing to a stream without one.
    pub async fn complete_pending_expansion(&self, namespace: &str, name: &str) -> Result<Stream> {
        validate_namespace(namespace)?;
        validate_stream_name(name)?;
        Ok(stream_of(self.complete_expansion(namespace, name).await?))
    }

    /// Drops a stream: records its durable tombstone, deletes its logs, and marks the
    /// tombstone `dropped`. Objects are left to reclamation.
    ///
    /// Spec: dropping a stream MUST record a durable tombstone for its identity, even when
    /// no live stream has that identity. The tombstone is written first, with one
    /// compare-and-set on the identity's record, so creation is refused from that instant.
    ///
    /// If a log's leases do not drain in time, this fails with `LeasesRemain`; the stream
    /// stays a `dropping` tombstone, and calling `drop_stream` again resumes. Dropping a
    /// dropped identity succeeds.
    pub async fn drop_stream(&self, namespace: &str, name: &str) -> Result<()> {
        validate_namespace(namespace)?;
        validate_stream_name(name)?;
        let key = stream_key(namespace, name);
        // 1. The tombstone: an active stream becomes `dropping`; an identity without a record
        //    gets one in the `dropped` state.
        let tombstone = StreamRecord {
            version: RECORD_VERSION,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            state: StreamState::Dropped,
            properties: BTreeMap::new(),
            layout: Vec::new(),
            pending_expansion: None,
        };
        let marked = self
            .update(&key, |current: Option<&Versioned<StreamRecord>>| match current {
                None => Ok(Change::Write(tombstone.clone())),
                Some(c) if c.value.state == StreamState::Active => {
                    Ok(Change::Write(StreamRecord { state: StreamState::Dropping, ..c.value.clone() }))
                }
                Some(_) => Ok(Change::Keep),
            })
            .await?;
        let written = marked.written;
        let marked = settled(marked, &key)?;
        match marked.value.state {
            StreamState::Dropped => {
                if written {
                    info!(namespace, name, "recorded tombstone for an identity without a stream");
                }
                return Ok(());
            }
            StreamState::Dropping if written => info!(namespace, name, "dropping stream"),
            _ => {}
        }
        // 2. Its logs. A `dropping` record's logs cannot change any more: expansions act on
        //    live streams only.
        for log_id in marked.value.all_logs() {
            self.purge_log(log_id).await?;
        }
        // 3. The tombstone becomes `dropped`.
        let dropped = self
            .update(&key, |current: Option<&Versioned<StreamRecord>>| match current {
                Some(c) if c.value.state == StreamState::Dropping => {
                    Ok(Change::Write(StreamRecord { state: StreamState::Dropped, ..c.value.clone() }))
                }
                Some(c) if c.value.state == StreamState::Dropped => Ok(Change::Keep),
                _ => Err(CatalogError::corrupt(
                    &key,
                    "the tombstone of a stream being dropped is gone or live again",
                )),
            })
            .await?;
        if dropped.written {
            info!(namespace, name, "dropped stream");
        }
        Ok(())
    }

    /// Changes a live stream's properties: each `Some` value is set, each `None` removed.
    /// Returns the stream as changed. One compare-and-set, retried on a concurrent change.
    /// The properties that decide the stream's binding ([`BINDING_PROPERTIES`]) are fixed at
    /// creation: a change to one is refused ([`CatalogError::InvalidArgument`]).
    pub async fn update_stream_properties(
        &self,
        namespace: &str,
        name: &str,
        changes: &BTreeMap<String, Option<String>>,
    ) -> Result<Stream> {
        validate_namespace(namespace)?;
        validate_stream_name(name)?;
        let key = stream_key(namespace, name);
        let updated = self
            .update(&key, |current: Option<&Versioned<StreamRecord>>| {
                let current = live_stream(current, namespace, name)?;
                let mut next = current.value.clone();
                for (k, v) in changes {
                    match v {
                        Some(v) => next.properties.insert(k.clone(), v.clone()),
                        None => next.properties.remove(k),
                    };
                }
                if let Some(fixed) = BINDING_PROPERTIES
                    .iter()
                    .find(|k| current.value.properties.get(**k) != next.properties.get(**k))
                {
                    return Err(CatalogError::InvalidArgument(format!(
                        "stream {namespace}/{name}: property {fixed:?} decides the stream's binding and is fixed at creation"
                    )));
                }
                Ok(if next == current.value { Change::Keep } else { Change::Write(next) })
            })
            .await?;
        if updated.written {
            info!(namespace, name, "updated stream properties");
        }
        Ok(stream_of(settled(updated, &key)?))
    }

    /// Whether the identity has been dropped (its tombstone exists).
    pub async fn is_dropped(&self, namespace: &str, name: &str) -> Result<bool> {
        validate_namespace(namespace)?;
        validate_stream_name(name)?;
        let found = self.read::<StreamRecord>(&stream_key(namespace, name)).await?;
        Ok(found.is_some_and(|f| f.value.state != StreamState::Active))
    }

    // ---- logs ----------------------------------------------------------------------

    /// Opens an existing log: which stream and partition it belongs to.
    ///
    /// Spec: opening an existing log MUST NOT allocate a log ID, register a stream
    /// partition, grow a stream, or change catalog metadata. This only reads: the log
    /// record, then the stream record, which must be live and name the log in its
    /// published layout (a log of a pending expansion or a dropped stream is not found).
    pub async fn open_log(&self, log_id: LogId) -> Result<LogInfo> {
        let not_found = || CatalogError::LogNotFound { log_id };
        let log = self.read::<LogRecord>(&log_key(log_id)).await?.ok_or_else(not_found)?.value;
        let stream = self
            .read::<StreamRecord>(&stream_key(&log.namespace, &log.stream))
            .await?
            .ok_or_else(not_found)?;
        let published = stream.value.layout.get(log.partition as usize) == Some(&log_id.0);
        if stream.value.state != StreamState::Active || !published {
            return Err(not_found());
        }
        Ok(LogInfo {
            log_ref: LogRef { log_id, namespace: log.namespace, stream: log.stream },
            partition: log.partition,
        })
    }

    /// Deletes a log that no live stream uses: fence, wait for the leases to drain, then
    /// remove every index record and the log's registration.
    ///
    /// Spec: to delete log L, a catalog MUST fence L; then list the lease records of L until
    /// none remains; and only then delete every index record of L with
    /// `DeleteRange(P(L), K(L,0,0), K(L,MAX,MAX))`. If leases remain when waiting stops
    /// ([`CatalogConfig::drain_timeout`]), nothing but the fence changes and this fails with
    /// `LeasesRemain`.
    ///
    /// Spec: deleting a log MUST be idempotent. The log record is removed last, so a log
    /// without one is already deleted, or was never this catalog's: that succeeds and
    /// changes nothing. (It must not fence: the ID may belong to an expansion claimed but not
    /// yet registered, which would then publish a fenced log.)
    ///
    /// A log that a live stream's layout or pending expansion names is refused with
    /// `LogInUse`, before anything is fenced: drop the stream instead.
    pub async fn delete_log(&self, log_id: LogId) -> Result<()> {
        let Some(log) = self.read::<LogRecord>(&log_key(log_id)).await? else {
            debug!(%log_id, "no log record: nothing to delete");
            return Ok(());
        };
        let stream = self.read::<StreamRecord>(&stream_key(&log.value.namespace, &log.value.stream)).await?;
        if let Some(stream) = stream
            && stream.value.state == StreamState::Active
            && stream.value.all_logs().any(|l| l == log_id)
        {
            return Err(CatalogError::LogInUse {
                log_id,
                namespace: log.value.namespace,
                stream: log.value.stream,
            });
        }
        self.purge_log(log_id).await
    }

    // ---- internals -----------------------------------------------------------------

    fn partition(&self) -> &str {
        &self.config.partition
    }

    fn check_partition_count(&self, count: u64) -> Result<()> {
        if count == 0 || count > u64::from(self.config.max_partitions) {
            return Err(CatalogError::InvalidArgument(format!(
                "a stream has 1 to {} partitions, not {count}",
                self.config.max_partitions
            )));
        }
        Ok(())
    }

    async fn allocate(&self, count: u64) -> Result<std::ops::Range<u64>> {
        allocate_log_ids(self.store.as_ref(), self.partition(), self.config.first_log_id, count, &self.cas)
            .await
    }

    async fn read<R: CatalogRecord>(&self, key: &str) -> Result<Option<Versioned<R>>> {
        let Some(record) = self.store.get(self.partition(), key).await? else {
            return Ok(None);
        };
        let value = <R as CatalogRecord>::decode(key, &record.value)?;
        Ok(Some(Versioned {
            value,
            version: record.version,
            created_ms: record.created_ms,
            modified_ms: record.modified_ms,
        }))
    }

    async fn read_live_stream(&self, namespace: &str, name: &str) -> Result<Versioned<StreamRecord>> {
        let found = self.read::<StreamRecord>(&stream_key(namespace, name)).await?;
        live_stream(found.as_ref(), namespace, name)?;
        found.ok_or_else(|| CatalogError::StreamNotFound {
            namespace: namespace.to_owned(),
            stream: name.to_owned(),
        })
    }

    /// [`cas_update`] of the catalog record `key`, with the catalog's retries.
    async fn update<R>(
        &self,
        key: &str,
        mutate: impl FnMut(Option<&Versioned<R>>) -> Result<Change<R>>,
    ) -> Result<Updated<R>>
    where
        R: CasRecord<Error = CatalogError>,
    {
        Ok(cas_update(self.store.as_ref(), self.partition(), key, &self.cas, mutate).await?)
    }

    /// The pause before round `round` (0-based) of a compare-and-set loop that cannot use
    /// [`cas_update`]: none before the first.
    async fn pause_before(&self, round: u32) {
        if round > 0 {
            tokio::time::sleep(self.cas.backoff.delay(round - 1)).await;
        }
    }

    /// Steps 3 and 4 of the expansion protocol: create the pending logs' records, then
    /// publish them by compare-and-set. Returns the live stream with nothing pending.
    async fn complete_expansion(&self, namespace: &str, name: &str) -> Result<Versioned<StreamRecord>> {
        let key = stream_key(namespace, name);
        // Each round registers the pending logs it read, then publishes them with `cas_update`.
        for round in 0..self.config.max_cas_attempts {
            self.pause_before(round).await;
            let current = self.read_live_stream(namespace, name).await?;
            let Some(pending) = &current.value.pending_expansion else {
                return Ok(current);
            };
            let base = current.value.layout.len();
            for (offset, &id) in pending.new_logs.iter().enumerate() {
                let partition = u32::try_from(base + offset)
                    .map_err(|_| CatalogError::corrupt(&key, "more partitions than fit in 32 bits"))?;
                self.register_log(LogId(id), namespace, name, partition).await?;
            }
            let published = self
                .update(&key, |now: Option<&Versioned<StreamRecord>>| {
                    let now = live_stream(now, namespace, name)?;
                    if now.value.pending_expansion.as_ref() != Some(pending) {
                        // Published by someone else (or ours, after an unknown outcome), or
                        // another expansion claimed since: decided below.
                        return Ok(Change::Keep);
                    }
                    let mut published = now.value.clone();
                    published.layout.extend_from_slice(&pending.new_logs);
                    published.pending_expansion = None;
                    Ok(Change::Write(published))
                })
                .await?;
            let published = settled(published, &key)?;
            if published.value.pending_expansion.is_none() {
                return Ok(published);
            }
            // Another expansion was claimed after ours was published: register its logs too.
        }
        Err(CatalogError::Contended { key, attempts: self.config.max_cas_attempts })
    }

    /// Creates a log record, or accepts the one that exists if it says the same.
    async fn register_log(&self, log_id: LogId, namespace: &str, stream: &str, partition: u32) -> Result<()> {
        let key = log_key(log_id);
        let record = LogRecord {
            version: RECORD_VERSION,
            log_id: log_id.0,
            namespace: namespace.to_owned(),
            stream: stream.to_owned(),
            partition,
        };
        self.update(&key, |current: Option<&Versioned<LogRecord>>| match current {
            None => Ok(Change::Write(record.clone())),
            Some(existing) if existing.value == record => Ok(Change::Keep),
            Some(existing) => Err(CatalogError::corrupt(
                &key,
                format!(
                    "log {log_id} is registered to {}/{} partition {}, but the layout of \
                     {namespace}/{stream} claims it for partition {partition}",
                    existing.value.namespace, existing.value.stream, existing.value.partition
                ),
            )),
        })
        .await?;
        Ok(())
    }

    /// Fence, drain, purge the index records (and the producer states), then remove the log
    /// record.
    async fn purge_log(&self, log_id: LogId) -> Result<()> {
        lease::fence(self.store.as_ref(), log_id).await?;
        let drain = self.config.drain_config();
        match lease::drain(self.store.as_ref(), log_id, &drain).await? {
            lease::DrainOutcome::Drained => {}
            lease::DrainOutcome::TimedOut { remaining } => {
                warn!(%log_id, ?remaining, "leases remain after the drain timeout; log left fenced and intact");
                return Err(CatalogError::LeasesRemain { log_id, remaining, waited: drain.timeout });
            }
        }
        self.store
            .delete_range(&keys::partition(log_id), &keys::first_key(log_id), &keys::last_key(log_id))
            .await?;
        // Idempotent producers' states of the log (implementation-defined records in P(L)):
        // nothing else would ever delete them once the log is gone.
        let (start, end) = keys::producer_state_range(log_id);
        self.store.delete_range(&keys::partition(log_id), &start, &end).await?;
        self.store.delete(self.partition(), &log_key(log_id)).await?;
        info!(%log_id, "deleted log");
        Ok(())
    }

    /// One page of the records under `prefix`, kept or skipped by `keep`.
    async fn list_page<R: CatalogRecord, T>(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        keep: impl Fn(R, i64) -> Option<T>,
    ) -> Result<Page<T>>
    where
        T: Named,
    {
        if limit == 0 {
            return Err(CatalogError::InvalidArgument("a page holds at least one item".to_owned()));
        }
        let end = listing_end(prefix);
        let mut skip = after.map(|name| format!("{prefix}{name}"));
        let mut start = skip.clone().unwrap_or_else(|| prefix.to_owned());
        let mut items = Vec::new();
        loop {
            let batch = self.store.scan(self.partition(), &start, &end, Some(limit + 1)).await?;
            let full_batch = batch.len() == limit + 1;
            for record in batch {
                if skip.as_deref() == Some(record.key.as_str()) {
                    continue;
                }
                let value = R::decode(&record.key, &record.value)?;
                if let Some(item) = keep(value, record.created_ms) {
                    items.push(item);
                }
                start = record.key;
            }
            if items.len() > limit {
                items.truncate(limit);
                let next_page = items.last().map(|item| item.name().to_owned());
                return Ok(Page { items, next_page });
            }
            if !full_batch {
                return Ok(Page { items, next_page: None });
            }
            skip = Some(start.clone());
        }
    }
}

/// Items of a listing, which pages by name.
trait Named {
    fn name(&self) -> &str;
}

impl Named for Namespace {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Named for Stream {
    fn name(&self) -> &str {
        &self.name
    }
}

fn namespace_of(record: NamespaceRecord, created_ms: i64) -> Namespace {
    Namespace { name: record.name, properties: record.properties, created_ms }
}

fn stream_of(found: Versioned<StreamRecord>) -> Stream {
    let record = found.value;
    Stream {
        namespace: record.namespace,
        name: record.name,
        properties: record.properties,
        logs: record.layout.into_iter().map(LogId).collect(),
        pending_logs: record
            .pending_expansion
            .map(|p| p.new_logs.into_iter().map(LogId).collect())
            .unwrap_or_default(),
        created_ms: found.created_ms,
    }
}

/// The record an update left: present whenever its mutation refuses an absent one.
fn settled<R>(updated: Updated<R>, key: &str) -> Result<Versioned<R>> {
    updated.record.ok_or_else(|| CatalogError::corrupt(key, "the record vanished during an update"))
}

/// The live stream of a read, or why there is none.
fn live_stream<'a>(
    found: Option<&'a Versioned<StreamRecord>>,
    namespace: &str,
    name: &str,
) -> Result<&'a Versioned<StreamRecord>> {
    match found {
        None => {
            Err(CatalogError::StreamNotFound { namespace: namespace.to_owned(), stream: name.to_owned() })
        }
        Some(found) if found.value.state != StreamState::Active => {
            Err(CatalogError::StreamDropped { namespace: namespace.to_owned(), stream: name.to_owned() })
        }
        Some(found) => Ok(found),
    }
}

/// The error for creating an identity whose record exists.
fn taken(existing: &StreamRecord) -> CatalogError {
    let (namespace, stream) = (existing.namespace.clone(), existing.name.clone());
    match existing.state {
        StreamState::Active => CatalogError::StreamExists { namespace, stream },
        StreamState::Dropping | StreamState::Dropped => CatalogError::StreamDropped { namespace, stream },
    }
}
