//! The ingest deduplication ledger: which events a stream has already appended, kept in the
//! metadata store for a window (feature `ledger`, on by default).
//!
//! ## Vocabulary
//!
//! - **Key**: an event's [`dedup_key`](crate::dedup_key), SHA-256(source ‖ 0x00 ‖ id).
//! - **Scope**: the stream the key belongs to, named by the log ID of the stream's partition 0.
//!   Log IDs are never reused, so a stream dropped and created again starts with an empty
//!   ledger.
//! - **Claim**: a `pending` ledger record that says "request `token` is appending this event".
//!   It **lapses** [`LedgerConfig::claim_lapse`] (2 minutes) after it was made.
//! - **Done**: a ledger record that says "this event was appended at partition `p`, offset
//!   `o`". It **expires** [`LedgerConfig::dedup_window`] (1 hour by default, at most 24) after
//!   it was written, and [`Ledger::cleanup`] deletes it after that.
//!
//! ## Records
//!
//! Every record lives in the one metadata partition [`LEDGER_PARTITION`], which is not a
//! decimal number (those are the partitions `P(L)` of logs) and not the catalog's:
//!
//! ```text
//! key                                                            value (JSON)
//! /lakestream-cloudevents/ledger/{L0:020}-{sha256 hex}           {"v":1,"state":"pending","token":"…","at":1700000000000}
//!                                                                {"v":1,"state":"pending","token":"…","at":…,"unsure":[{"partition":0,"from":41}]}
//!                                                                {"v":1,"state":"done","partition":0,"offset":41,"at":1700000000123}
//! ```
//!
//! Keys begin with `/`, so they never take the form `{L:020}-…` the spec reserves for index
//! records, and every ledger key has the same depth (three `/`), so one `Scan` over
//! `[/lakestream-cloudevents/ledger/, … + U+10FFFF)` sees all of them in the store's
//! hierarchical key order. `at` is the injected [`Clock`]'s time of the write.
//!
//! ## One request
//!
//! 1. [`Ledger::claim`]: the metadata store has no multi-key atomic write, so every distinct
//!    key of the request is claimed with its own `CreateIfAbsent` (a lapsed claim or an
//!    expired done record is taken over with `CompareAndSet` on the version read). The
//!    smallest key is claimed first and the others concurrently after it, so two requests
//!    for the same batch are ordered by that first key and one of them wins outright. If any
//!    key is pending under another live claim, every claim this request made is deleted again
//!    and the answer is [`ClaimResult::InFlight`]: the batch is all or nothing.
//! 2. The caller appends the claimed events (after checking [`Claim::is_fresh`]).
//! 3. [`Ledger::complete`] rewrites each claimed key as `done` with its partition and offset,
//!    by `CompareAndSet` on the claim's version, all concurrently. On an append that
//!    definitely failed the caller calls [`Ledger::release`] instead.
//!
//! ## Unknown outcomes
//!
//! An append whose outcome is unknown (a timeout: the entry may be in the log, or may still
//! land) neither completes nor releases its claims. [`Ledger::keep_unsure`] rewrites each as a
//! claim that names where the entry could be — the partition, and its next offset read before
//! the append (`unsure`) — and restarts its lapse, which leaves the writer time to settle the
//! put. A request that takes such a claim over after the lapse inherits the `unsure` places
//! ([`Claim::unsure`]) and must read them before appending: an event found there is a
//! duplicate at the offset found ([`Ledger::complete`] records it as done), and only an event
//! found nowhere is appended again. So an append with an unknown outcome is never repeated
//! blindly.
//!
//! A request that appended and then died (or stalled past the lapse) before completing is the
//! one way an event can be appended twice: its claims lapse, and a retry appends again. That
//! is the one duplicate case the CloudEvents document allows.
//!
//! ## Atomicity
//!
//! A request's claims are one record per event, not one write: the metadata store has no
//! multi-key transaction. Two requests sharing events are still ordered (the smallest key is
//! claimed first, and a request that meets a live claim gives back all of its own), but a
//! crash between the claims of one request leaves some of them behind, to lapse.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::retry::{Backoff, BackoffPolicy};
use lakestream_format::{Clock, ErrorClass, LogId};
use lakestream_meta::lease::TokenSource;
use lakestream_meta::{MetaError, MetaStore, PutCondition};
use serde::{Deserialize, Serialize};

/// The metadata partition holding every ledger record.
pub const LEDGER_PARTITION: &str = "lakestream-cloudevents";

/// The prefix of every ledger key.
pub const LEDGER_PREFIX: &str = "/lakestream-cloudevents/ledger/";

/// The longest deduplication window accepted.
pub const MAX_DEDUP_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// Records per page of a cleanup scan.
const CLEANUP_PAGE: usize = 1000;

/// How many times one key's claim re-reads after losing a race before giving up.
const CLAIM_ATTEMPTS: u32 = 8;

/// A deduplication key.
pub type Key = [u8; 32];

/// The ledger's settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LedgerConfig {
    /// How long a done key keeps deduplicating retries. Default 1 h, at most 24 h. Each key
    /// costs about 150 bytes of metadata for this long.
    #[serde(with = "humantime_serde")]
    pub dedup_window: Duration,
    /// How long a claim blocks other requests for the same event before it lapses (the
    /// claimer is presumed dead). Default 2 min. Shorter lapses make a crashed request's
    /// events retryable sooner but widen the duplicate window of a stalled one.
    #[serde(with = "humantime_serde")]
    pub claim_lapse: Duration,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig { dedup_window: Duration::from_secs(3600), claim_lapse: Duration::from_secs(120) }
    }
}

/// A setting that breaks a rule: names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {rule}")]
pub struct LedgerConfigError {
    /// The field, e.g. `dedup_window`.
    pub field: &'static str,
    /// The rule it breaks.
    pub rule: String,
}

impl LedgerConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), LedgerConfigError> {
        if self.dedup_window.is_zero() || self.dedup_window > MAX_DEDUP_WINDOW {
            return Err(LedgerConfigError {
                field: "dedup_window",
                rule: format!("must be greater than 0 and at most 24h, not {:?}", self.dedup_window),
            });
        }
        if self.claim_lapse < Duration::from_secs(1) || self.claim_lapse > Duration::from_secs(3600) {
            return Err(LedgerConfigError {
                field: "claim_lapse",
                rule: format!("must be between 1s and 1h, not {:?}", self.claim_lapse),
            });
        }
        Ok(())
    }
}

/// Where an event was appended: the stream partition and the event's own offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Placement {
    /// The stream partition.
    pub partition: u32,
    /// The event's offset in that partition's log.
    pub offset: u64,
}

/// The stream a key belongs to: the log ID of the stream's partition 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Scope(pub LogId);

impl Scope {
    /// The ledger key of `key` in this scope.
    pub fn record_key(&self, key: &Key) -> String {
        let mut out = format!("{LEDGER_PREFIX}{:020}-", self.0.0);
        for byte in key {
            out.push_str(&format!("{byte:02x}"));
        }
        out
    }
}

/// What happened to one event of a request at claim time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventClaim {
    /// This request holds the event's claim and must append it.
    New,
    /// The event was appended before, within the window, at this placement.
    Duplicate(Placement),
    /// The event repeats the key of the event at this earlier position of the same request;
    /// it is not appended again and answers with that event's placement.
    SameAs(usize),
}

/// Where an earlier append of an event, whose outcome is unknown, may have put it: a
/// partition, from the offset that was its next one before that append.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Unsure {
    /// The stream partition.
    pub partition: u32,
    /// The partition's next offset before the append: the entry, if it landed, is at or
    /// after it.
    pub from: u64,
}

/// A request's claims on its new events.
#[derive(Debug, Clone)]
pub struct Claim {
    scope: Scope,
    token: String,
    claimed_at_ms: i64,
    lapse_ms: i64,
    events: Vec<EventClaim>,
    /// Versions of the claim records this request holds, by key.
    held: HashMap<Key, i64>,
    /// Where earlier appends of held keys with unknown outcomes may have put them.
    unsure: HashMap<Key, Vec<Unsure>>,
    keys: Vec<Key>,
}

impl Claim {
    /// Per event of the request, in order: new, duplicate, or repeat.
    pub fn events(&self) -> &[EventClaim] {
        &self.events
    }

    /// The key of the event at `index`.
    pub fn key(&self, index: usize) -> Option<&Key> {
        self.keys.get(index)
    }

    /// Whether the request holds no new event (everything is a duplicate).
    pub fn nothing_to_append(&self) -> bool {
        self.held.is_empty()
    }

    /// Drops the claim on `key` without completing or releasing it: it lapses. (After an
    /// append with an unknown outcome, [`Ledger::keep_unsure`] keeps it instead.)
    pub fn abandon(&mut self, key: &Key) {
        self.held.remove(key);
        self.unsure.remove(key);
    }

    /// Where an earlier append of the new event at `index`, with an unknown outcome, may have
    /// put it (empty for an event never appended before). The caller reads those places
    /// before appending the event: if it is there, it is a duplicate at the offset found.
    pub fn unsure(&self, index: usize) -> &[Unsure] {
        self.keys.get(index).and_then(|key| self.unsure.get(key)).map_or(&[], Vec::as_slice)
    }

    /// Whether the claims are young enough to start an append: within half the lapse of
    /// their creation, so the append (bounded by the writer's own timeouts) finishes before
    /// another request may take them over.
    pub fn is_fresh(&self, now_ms: i64) -> bool {
        now_ms < self.claimed_at_ms.saturating_add(self.lapse_ms / 2)
    }
}

/// The answer to [`Ledger::claim`].
#[derive(Debug, Clone)]
pub enum ClaimResult {
    /// Every event is new (claimed by this request) or a duplicate.
    Claimed(Claim),
    /// Some event is pending under another request's live claim; this request holds no
    /// claims. Retry after `retry_after` (the whole request is safe to retry).
    InFlight {
        /// The index of the first event found in flight.
        index: usize,
        /// When to try again.
        retry_after: Duration,
    },
}

/// What [`Ledger::complete`] recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Completion {
    /// Keys now done.
    pub recorded: usize,
    /// Keys whose claim another request had taken over (this request stalled past the
    /// lapse): their events may now be appended twice.
    pub lost: usize,
}

/// A key's live ledger record, as [`Ledger::lookup`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// Claimed by a request that has not completed.
    Pending,
    /// Appended at this placement.
    Done(Placement),
}

/// What a cleanup pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanupStats {
    /// Ledger records looked at.
    pub scanned: usize,
    /// Expired done records and lapsed claims deleted.
    pub deleted: usize,
}

/// A ledger operation that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    /// The metadata store failed.
    #[error("deduplication ledger: {0}")]
    Meta(#[from] MetaError),
    /// A ledger record that does not parse.
    #[error("deduplication ledger record {key} is corrupt: {reason}")]
    Corrupt {
        /// The record's key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A key whose record kept changing under us.
    #[error("deduplication ledger record {key} changed {CLAIM_ATTEMPTS} times while claiming it")]
    Contended {
        /// The record's key.
        key: String,
    },
}

impl LedgerError {
    /// What a caller should do about the error.
    pub fn class(&self) -> ErrorClass {
        match self {
            LedgerError::Meta(e) => e.class(),
            LedgerError::Corrupt { .. } => ErrorClass::CorruptData,
            // Lost races with other requests' claims: retrying may win.
            LedgerError::Contended { .. } => ErrorClass::Contended,
        }
    }
}

/// A ledger record's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum Entry {
    Pending {
        token: String,
        at: i64,
        /// Earlier appends of the event with unknown outcomes (absent in most records).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unsure: Vec<Unsure>,
    },
    Done {
        partition: u32,
        offset: u64,
        at: i64,
    },
}

#[derive(Serialize, Deserialize)]
struct Versioned {
    v: u32,
    #[serde(flatten)]
    entry: Entry,
}

fn encode(entry: Entry) -> Bytes {
    // Serializing a plain struct of strings and integers cannot fail.
    Bytes::from(serde_json::to_vec(&Versioned { v: 1, entry }).unwrap_or_default())
}

fn decode(key: &str, value: &[u8]) -> Result<Entry, LedgerError> {
    let corrupt = |reason: String| LedgerError::Corrupt { key: key.to_string(), reason };
    let parsed: Versioned = serde_json::from_slice(value).map_err(|e| corrupt(e.to_string()))?;
    if parsed.v != 1 {
        return Err(corrupt(format!("layout version {} is not 1", parsed.v)));
    }
    Ok(parsed.entry)
}

/// The result of claiming one key.
enum KeyClaim {
    Claimed(i64, Vec<Unsure>),
    Duplicate(Placement),
    InFlight,
}

/// The deduplication ledger. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Ledger {
    meta: Arc<dyn MetaStore>,
    clock: Arc<dyn Clock>,
    tokens: Arc<dyn TokenSource>,
    config: LedgerConfig,
}

impl Ledger {
    /// A ledger over `meta`, with time from `clock` and request tokens from `tokens`.
    pub fn new(
        meta: Arc<dyn MetaStore>,
        clock: Arc<dyn Clock>,
        tokens: Arc<dyn TokenSource>,
        config: LedgerConfig,
    ) -> Result<Self, LedgerConfigError> {
        config.validate()?;
        Ok(Ledger { meta, clock, tokens, config })
    }

    /// The settings.
    pub fn config(&self) -> &LedgerConfig {
        &self.config
    }

    /// The clock the ledger reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    fn window_ms(&self) -> i64 {
        i64::try_from(self.config.dedup_window.as_millis()).unwrap_or(i64::MAX)
    }

    fn lapse_ms(&self) -> i64 {
        i64::try_from(self.config.claim_lapse.as_millis()).unwrap_or(i64::MAX)
    }

    /// Whether a record written at `at` still counts at `now`.
    fn live(&self, entry: &Entry, now: i64) -> bool {
        match entry {
            Entry::Pending { at, .. } => now < at.saturating_add(self.lapse_ms()),
            Entry::Done { at, .. } => now < at.saturating_add(self.window_ms()),
        }
    }

    /// Claims the events with these keys (one per event of the request, in order) in `scope`.
    /// See the module documentation.
    pub async fn claim(&self, scope: Scope, keys: &[Key]) -> Result<ClaimResult, LedgerError> {
        let token = self.tokens.new_token();
        let claimed_at_ms = self.clock.now_ms();
        let mut first_index: HashMap<Key, usize> = HashMap::new();
        let mut events = Vec::with_capacity(keys.len());
        for (index, key) in keys.iter().enumerate() {
            match first_index.get(key) {
                Some(&first) => events.push(EventClaim::SameAs(first)),
                None => {
                    first_index.insert(*key, index);
                    events.push(EventClaim::New);
                }
            }
        }
        let mut distinct: Vec<Key> = first_index.keys().copied().collect();
        distinct.sort_unstable();
        let mut results: Vec<(Key, Result<KeyClaim, LedgerError>)> = Vec::with_capacity(distinct.len());
        if let Some((first, rest)) = distinct.split_first() {
            // The smallest key first: of two requests for the same keys, the one that gets it
            // goes on to claim the rest, and the other stops here without claiming anything.
            let outcome = self.claim_one(scope, first, &token).await;
            let stop = !matches!(outcome, Ok(KeyClaim::Claimed(..)) | Ok(KeyClaim::Duplicate(_)));
            results.push((*first, outcome));
            if !stop {
                let rest_results =
                    futures::future::join_all(rest.iter().map(|key| self.claim_one(scope, key, &token)))
                        .await;
                results.extend(rest.iter().copied().zip(rest_results));
            }
        }
        let mut held = HashMap::new();
        let mut unsure = HashMap::new();
        let mut in_flight: Option<usize> = None;
        let mut failure: Option<LedgerError> = None;
        for (key, outcome) in results {
            let index = first_index[&key];
            match outcome {
                Ok(KeyClaim::Claimed(version, places)) => {
                    held.insert(key, version);
                    if !places.is_empty() {
                        unsure.insert(key, places);
                    }
                }
                Ok(KeyClaim::Duplicate(placement)) => events[index] = EventClaim::Duplicate(placement),
                Ok(KeyClaim::InFlight) => in_flight = Some(in_flight.map_or(index, |i| i.min(index))),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        let mut claim = Claim {
            scope,
            token,
            claimed_at_ms,
            lapse_ms: self.lapse_ms(),
            events,
            held,
            unsure,
            keys: keys.to_vec(),
        };
        if failure.is_some() || in_flight.is_some() {
            // All or nothing: give back what this request took, so the other request (or a
            // retry) is not blocked by half a batch. Best effort: a claim left behind lapses.
            self.release(&mut claim).await;
            if let Some(e) = failure {
                return Err(e);
            }
            return Ok(ClaimResult::InFlight {
                index: in_flight.unwrap_or_default(),
                retry_after: Duration::from_secs(1),
            });
        }
        Ok(ClaimResult::Claimed(claim))
    }

    async fn claim_one(&self, scope: Scope, key: &Key, token: &str) -> Result<KeyClaim, LedgerError> {
        let record_key = scope.record_key(key);
        // Not `cas_update`: a claim is a create, a read, or a takeover of a lapsed claim.
        // Lost rounds pause as every compare-and-set loop does.
        let backoff = Backoff::process(BackoffPolicy::compare_and_set(CLAIM_ATTEMPTS));
        for round in 0..CLAIM_ATTEMPTS {
            if round > 0 {
                tokio::time::sleep(backoff.delay(round - 1)).await;
            }
            let pending = |unsure: Vec<Unsure>| {
                encode(Entry::Pending { token: token.to_string(), at: self.clock.now_ms(), unsure })
            };
            match self
                .meta
                .put(LEDGER_PARTITION, &record_key, pending(Vec::new()), PutCondition::IfAbsent)
                .await
            {
                Ok(written) => return Ok(KeyClaim::Claimed(written.version, Vec::new())),
                Err(MetaError::KeyExists { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            let Some(record) = self.meta.get(LEDGER_PARTITION, &record_key).await? else {
                continue; // deleted since (cleanup or a release): create it again
            };
            let entry = decode(&record_key, &record.value)?;
            let now = self.clock.now_ms();
            if self.live(&entry, now) {
                return Ok(match entry {
                    Entry::Done { partition, offset, .. } => {
                        KeyClaim::Duplicate(Placement { partition, offset })
                    }
                    Entry::Pending { .. } => KeyClaim::InFlight,
                });
            }
            // Expired or lapsed: take it over, unless someone else does first. A lapsed claim's
            // unknown outcomes pass on to the new claim: the new holder must look for them.
            let inherited = match entry {
                Entry::Pending { unsure, .. } => unsure,
                Entry::Done { .. } => Vec::new(),
            };
            match self
                .meta
                .put(
                    LEDGER_PARTITION,
                    &record_key,
                    pending(inherited.clone()),
                    PutCondition::IfVersion(record.version),
                )
                .await
            {
                Ok(written) => return Ok(KeyClaim::Claimed(written.version, inherited)),
                Err(MetaError::VersionMismatch { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(LedgerError::Contended { key: record_key })
    }

    /// Records where the claimed events landed: one `done` record per key this request holds,
    /// each written by compare-and-set on the claim's version, concurrently (a key whose
    /// unknown outcome was found in the log is recorded at the place found). Keys without a
    /// placement in `placements` are released instead, as [`Ledger::release`] does.
    pub async fn complete(
        &self,
        claim: &mut Claim,
        placements: &HashMap<Key, Placement>,
    ) -> Result<Completion, LedgerError> {
        let now = self.clock.now_ms();
        let held: Vec<(Key, i64)> = claim.held.drain().collect();
        let unsure = std::mem::take(&mut claim.unsure);
        let (scope, token, unsure) = (claim.scope, claim.token.as_str(), &unsure);
        let writes = held.iter().map(|(key, version)| async move {
            let record_key = scope.record_key(key);
            let Some(placement) = placements.get(key) else {
                if unsure.contains_key(key) {
                    return Ok(None); // left to lapse with its unknown outcomes (see `release`)
                }
                return self.release_one(&record_key, token).await.map(|_| None);
            };
            let done =
                encode(Entry::Done { partition: placement.partition, offset: placement.offset, at: now });
            match self
                .meta
                .put(LEDGER_PARTITION, &record_key, done.clone(), PutCondition::IfVersion(*version))
                .await
            {
                Ok(_) => Ok(Some(true)),
                Err(MetaError::VersionMismatch { .. }) => {
                    // Either a cleanup deleted our lapsed claim (recreate it as done) or
                    // another request took it over (we lost it).
                    match self.meta.put(LEDGER_PARTITION, &record_key, done, PutCondition::IfAbsent).await {
                        Ok(_) => Ok(Some(true)),
                        Err(MetaError::KeyExists { .. }) => Ok(Some(false)),
                        Err(e) => Err(LedgerError::from(e)),
                    }
                }
                Err(e) => Err(e.into()),
            }
        });
        let mut completion = Completion::default();
        let mut first_error = None;
        for result in futures::future::join_all(writes).await {
            match result {
                Ok(Some(true)) => completion.recorded += 1,
                Ok(Some(false)) => completion.lost += 1,
                Ok(None) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(completion),
        }
    }

    /// After an append of `keys` (claimed by `claim`) to `unsure.partition` whose outcome is
    /// unknown: each claim is kept, naming the place where the entry may be, and its lapse
    /// restarts now; the request no longer holds it. Whoever takes it over after the lapse
    /// reads that place first ([`Claim::unsure`]). Best effort, key by key: a claim that
    /// cannot be rewritten is left as it is, to lapse (the old behaviour), and counted.
    pub async fn keep_unsure(&self, claim: &mut Claim, keys: &[Key], unsure: Unsure) -> usize {
        let mut not_kept = 0;
        for key in keys {
            let Some(version) = claim.held.remove(key) else { continue };
            let mut places = claim.unsure.remove(key).unwrap_or_default();
            if !places.contains(&unsure) {
                places.push(unsure);
            }
            let record_key = claim.scope.record_key(key);
            let kept = encode(Entry::Pending {
                token: claim.token.clone(),
                at: self.clock.now_ms(),
                unsure: places,
            });
            if let Err(e) =
                self.meta.put(LEDGER_PARTITION, &record_key, kept, PutCondition::IfVersion(version)).await
            {
                tracing::warn!(key = %record_key, error = %e, "could not record an unknown outcome in a ledger claim; it lapses as it is");
                not_kept += 1;
            }
        }
        not_kept
    }

    /// Gives back every claim `claim` still holds (after an append that definitely failed),
    /// so a retry need not wait for the lapse. Best effort: a failure leaves the claim to
    /// lapse. A claim that names unknown outcomes ([`Claim::unsure`]) is left to lapse, so that
    /// the places it names are still read before its event is appended.
    pub async fn release(&self, claim: &mut Claim) {
        let unsure = std::mem::take(&mut claim.unsure);
        let held: Vec<Key> =
            claim.held.drain().map(|(key, _)| key).filter(|key| !unsure.contains_key(key)).collect();
        let token = claim.token.clone();
        let deletes = held.iter().map(|key| {
            let record_key = claim.scope.record_key(key);
            let token = token.clone();
            async move {
                if let Err(e) = self.release_one(&record_key, &token).await {
                    tracing::warn!(key = %record_key, error = %e, "could not release a ledger claim; it will lapse");
                }
            }
        });
        futures::future::join_all(deletes).await;
    }

    /// Deletes a claim if it is still this request's.
    async fn release_one(&self, record_key: &str, token: &str) -> Result<(), LedgerError> {
        if let Some(record) = self.meta.get(LEDGER_PARTITION, record_key).await?
            && matches!(decode(record_key, &record.value)?, Entry::Pending { token: ref t, .. } if t == token)
        {
            self.meta.delete(LEDGER_PARTITION, record_key).await?;
        }
        Ok(())
    }

    /// The live ledger record of `key` in `scope`; `None` when absent, expired or lapsed. For
    /// tests and tools.
    pub async fn lookup(&self, scope: Scope, key: &Key) -> Result<Option<KeyState>, LedgerError> {
        let record_key = scope.record_key(key);
        let Some(record) = self.meta.get(LEDGER_PARTITION, &record_key).await? else {
            return Ok(None);
        };
        let entry = decode(&record_key, &record.value)?;
        if !self.live(&entry, self.clock.now_ms()) {
            return Ok(None);
        }
        Ok(Some(match entry {
            Entry::Done { partition, offset, .. } => KeyState::Done(Placement { partition, offset }),
            Entry::Pending { .. } => KeyState::Pending,
        }))
    }

    /// Deletes every expired done record and every lapsed claim of every stream, scanning
    /// the ledger in pages. Run it periodically; a record is deleted only after it stopped
    /// counting, so a late cleanup costs space, never correctness. Records that do not parse
    /// are left in place and logged.
    pub async fn cleanup(&self) -> Result<CleanupStats, LedgerError> {
        let end = format!("{LEDGER_PREFIX}\u{10FFFF}");
        let mut start = LEDGER_PREFIX.to_string();
        let mut stats = CleanupStats::default();
        loop {
            let page = self.meta.scan(LEDGER_PARTITION, &start, &end, Some(CLEANUP_PAGE)).await?;
            let now = self.clock.now_ms();
            for record in &page {
                if !record.key.starts_with(LEDGER_PREFIX) {
                    continue; // a co-located partition's key
                }
                stats.scanned += 1;
                match decode(&record.key, &record.value) {
                    Ok(entry) if !self.live(&entry, now) => {
                        self.meta.delete(LEDGER_PARTITION, &record.key).await?;
                        stats.deleted += 1;
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "skipping a ledger record during cleanup"),
                }
            }
            match page.last() {
                // Every ledger key has the same length, so appending a byte gives a key
                // between this one and the next.
                Some(last) if page.len() == CLEANUP_PAGE => start = format!("{}0", last.key),
                _ => return Ok(stats),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lakestream_format::ManualClock;
    use lakestream_meta::InMemoryStore;
    use lakestream_meta::lease::SeededTokens;

    const T0: i64 = 1_700_000_000_000;

    fn ledger(window: Duration) -> (Ledger, ManualClock, Arc<InMemoryStore>) {
        let clock = ManualClock::new(T0);
        // Several virtual shards, so the ledger partition shares a keyspace with others.
        let store = Arc::new(InMemoryStore::with_config(4, Arc::new(clock.clone())).unwrap());
        let config = LedgerConfig { dedup_window: window, ..LedgerConfig::default() };
        let ledger =
            Ledger::new(store.clone(), Arc::new(clock.clone()), Arc::new(SeededTokens::new(7)), config)
                .unwrap();
        (ledger, clock, store)
    }

    fn key(n: u8) -> Key {
        crate::dedup_key("/src", &n.to_string())
    }

    const SCOPE: Scope = Scope(LogId(3));

    fn claimed(result: ClaimResult) -> Claim {
        match result {
            ClaimResult::Claimed(claim) => claim,
            ClaimResult::InFlight { index, .. } => panic!("in flight at {index}"),
        }
    }

    async fn claim_and_complete(ledger: &Ledger, keys: &[Key], first_offset: u64) -> Claim {
        let mut claim = claimed(ledger.claim(SCOPE, keys).await.unwrap());
        let placements: HashMap<Key, Placement> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (*k, Placement { partition: 0, offset: first_offset + i as u64 }))
            .collect();
        let done = ledger.complete(&mut claim, &placements).await.unwrap();
        assert_eq!(done.lost, 0);
        claim
    }

    #[test]
    fn record_keys_are_flat_under_the_prefix() {
        let record_key = SCOPE.record_key(&crate::dedup_key("https://cloudevents.io", "minimal"));
        assert_eq!(
            record_key,
            "/lakestream-cloudevents/ledger/00000000000000000003-3cfbb162df17385e2f77211edcb38280037be0aafccb634a1cab229b68bfd62a"
        );
        assert_eq!(record_key.matches('/').count(), 3);
    }

    #[test]
    fn config_limits_are_named() {
        let too_long =
            LedgerConfig { dedup_window: Duration::from_secs(24 * 3600 + 1), ..Default::default() };
        assert_eq!(too_long.validate().unwrap_err().field, "dedup_window");
        let zero = LedgerConfig { dedup_window: Duration::ZERO, ..Default::default() };
        assert_eq!(zero.validate().unwrap_err().field, "dedup_window");
        assert!(LedgerConfig { dedup_window: MAX_DEDUP_WINDOW, ..Default::default() }.validate().is_ok());
    }

    #[tokio::test]
    async fn a_completed_key_is_a_duplicate_with_its_placement() {
        let (ledger, _, _) = ledger(Duration::from_secs(3600));
        let first = claim_and_complete(&ledger, &[key(1), key(2)], 10).await;
        assert_eq!(first.events(), &[EventClaim::New, EventClaim::New]);
        let again = claimed(ledger.claim(SCOPE, &[key(2), key(3), key(1)]).await.unwrap());
        assert_eq!(
            again.events(),
            &[
                EventClaim::Duplicate(Placement { partition: 0, offset: 11 }),
                EventClaim::New,
                EventClaim::Duplicate(Placement { partition: 0, offset: 10 }),
            ]
        );
        // Another stream's scope does not see them.
        let other = claimed(ledger.claim(Scope(LogId(4)), &[key(1)]).await.unwrap());
        assert_eq!(other.events(), &[EventClaim::New]);
    }

    #[tokio::test]
    async fn a_repeated_key_in_one_request_points_at_its_first_occurrence() {
        let (ledger, _, _) = ledger(Duration::from_secs(3600));
        let claim = claimed(ledger.claim(SCOPE, &[key(1), key(2), key(1)]).await.unwrap());
        assert_eq!(claim.events(), &[EventClaim::New, EventClaim::New, EventClaim::SameAs(0)]);
    }

    #[tokio::test]
    async fn a_pending_claim_answers_in_flight_and_the_loser_holds_nothing() {
        let (ledger, _, _) = ledger(Duration::from_secs(3600));
        let _holder = claimed(ledger.claim(SCOPE, &[key(5)]).await.unwrap());
        // key(4) and key(6) around it: whatever the order, the loser keeps no claim.
        match ledger.claim(SCOPE, &[key(4), key(5), key(6)]).await.unwrap() {
            ClaimResult::InFlight { index, .. } => assert_eq!(index, 1),
            ClaimResult::Claimed(c) => panic!("claimed {:?}", c.events()),
        }
        for free in [key(4), key(6)] {
            assert_eq!(ledger.lookup(SCOPE, &free).await.unwrap(), None);
        }
        assert_eq!(ledger.lookup(SCOPE, &key(5)).await.unwrap(), Some(KeyState::Pending));
    }

    #[tokio::test]
    async fn an_unknown_outcome_keeps_the_claim_and_passes_its_place_to_the_next_holder() {
        let (ledger, clock, _) = ledger(Duration::from_secs(3600));
        let mut first = claimed(ledger.claim(SCOPE, &[key(1), key(2)]).await.unwrap());
        assert_eq!(first.unsure(0), &[] as &[Unsure]);
        clock.advance_ms(60_000);
        // The append of key(1) has an unknown outcome; key(2)'s definitely failed.
        let place = Unsure { partition: 1, from: 40 };
        assert_eq!(ledger.keep_unsure(&mut first, &[key(1)], place).await, 0);
        ledger.release(&mut first).await;
        assert_eq!(ledger.lookup(SCOPE, &key(1)).await.unwrap(), Some(KeyState::Pending), "kept");
        assert_eq!(ledger.lookup(SCOPE, &key(2)).await.unwrap(), None, "released");
        // Its lapse restarted at the unknown outcome: a retry waits it out...
        clock.advance_ms(119_999);
        assert!(matches!(ledger.claim(SCOPE, &[key(1)]).await.unwrap(), ClaimResult::InFlight { .. }));
        clock.advance_ms(1);
        // ...then holds the claim with the place to read before appending.
        let mut retry = claimed(ledger.claim(SCOPE, &[key(2), key(1)]).await.unwrap());
        assert_eq!(retry.events(), &[EventClaim::New, EventClaim::New]);
        assert_eq!(retry.unsure(0), &[] as &[Unsure]);
        assert_eq!(retry.unsure(1), &[place]);
        // Found there: recorded as done at the offset found.
        let found = HashMap::from([(key(1), Placement { partition: 1, offset: 42 })]);
        let done = ledger.complete(&mut retry, &found).await.unwrap();
        assert_eq!(done, Completion { recorded: 1, lost: 0 });
        let dup = claimed(ledger.claim(SCOPE, &[key(1)]).await.unwrap());
        assert_eq!(dup.events(), &[EventClaim::Duplicate(Placement { partition: 1, offset: 42 })]);
    }

    #[tokio::test]
    async fn a_claim_naming_unknown_outcomes_is_never_released_only_lapses() {
        let (ledger, clock, _) = ledger(Duration::from_secs(3600));
        let mut first = claimed(ledger.claim(SCOPE, &[key(1)]).await.unwrap());
        let place = Unsure { partition: 0, from: 7 };
        ledger.keep_unsure(&mut first, &[key(1)], place).await;
        clock.advance_ms(120_000);
        // The next holder's append definitely fails: releasing must not forget the place.
        let mut second = claimed(ledger.claim(SCOPE, &[key(1)]).await.unwrap());
        assert_eq!(second.unsure(0), &[place]);
        ledger.release(&mut second).await;
        assert_eq!(ledger.lookup(SCOPE, &key(1)).await.unwrap(), Some(KeyState::Pending));
        // Its own unknown outcome adds a second place; both pass on.
        clock.advance_ms(120_000);
        let mut third = claimed(ledger.claim(SCOPE, &[key(1)]).await.unwrap());
        let later = Unsure { partition: 0, from: 9 };
        ledger.keep_unsure(&mut third, &[key(1)], later).await;
        let none: HashMap<Key, Placement> = HashMap::new();
        ledger.complete(&mut third, &none).await.unwrap();
        clock.advance_ms(120_000);
        let fourth = claimed(ledger.claim(SCOPE, &[key(1)]).await.unwrap());
        assert_eq!(fourth.unsure(0), &[place, later]);
    }

    #[test]
    fn claims_without_unknown_outcomes_keep_their_layout() {
        let plain = encode(Entry::Pending { token: "t".into(), at: 5, unsure: Vec::new() });
        assert_eq!(&plain[..], br#"{"v":1,"state":"pending","token":"t","at":5}"#);
        let kept = encode(Entry::Pending {
            token: "t".into(),
            at: 5,
            unsure: vec![Unsure { partition: 2, from: 9 }],
        });
        assert_eq!(
            &kept[..],
            br#"{"v":1,"state":"pending","token":"t","at":5,"unsure":[{"partition":2,"from":9}]}"#
        );
        assert_eq!(
            decode("k", &kept).unwrap(),
            Entry::Pending { token: "t".into(), at: 5, unsure: vec![Unsure { partition: 2, from: 9 }] }
        );
    }

    #[tokio::test]
    async fn a_claim_lapses_after_two_minutes_and_is_taken_over() {
        let (ledger, clock, _) = ledger(Duration::from_secs(3600));
        let mut stalled = claimed(ledger.claim(SCOPE, &[key(1)]).await.unwrap());
        assert!(stalled.is_fresh(clock.now_ms()));
        clock.advance_ms(119_999);
        assert!(matches!(ledger.claim(SCOPE, &[key(1)]).await.unwrap(), ClaimResult::InFlight { .. }));
        assert!(!stalled.is_fresh(clock.now_ms()));
        clock.advance_ms(1);
        let mut retry = claimed(ledger.claim(SCOPE, &[key(1)]).await.unwrap());
        assert_eq!(retry.events(), &[EventClaim::New]);
        let at = |offset| HashMap::from([(key(1), Placement { partition: 0, offset })]);
        assert_eq!(ledger.complete(&mut retry, &at(7)).await.unwrap(), Completion { recorded: 1, lost: 0 });
        // The stalled request completes late: it lost its claim and changes nothing.
        assert_eq!(
            ledger.complete(&mut stalled, &at(99)).await.unwrap(),
            Completion { recorded: 0, lost: 1 }
        );
        assert_eq!(
            ledger.lookup(SCOPE, &key(1)).await.unwrap(),
            Some(KeyState::Done(Placement { partition: 0, offset: 7 }))
        );
    }

    #[tokio::test]
    async fn a_done_key_expires_after_the_window_and_cleanup_deletes_it() {
        let (ledger, clock, store) = ledger(Duration::from_secs(600));
        claim_and_complete(&ledger, &[key(1), key(2)], 0).await;
        let _lapsing = claimed(ledger.claim(SCOPE, &[key(3)]).await.unwrap());
        clock.advance_ms(599_999);
        assert_eq!(ledger.cleanup().await.unwrap(), CleanupStats { scanned: 3, deleted: 1 });
        assert_eq!(
            ledger.lookup(SCOPE, &key(1)).await.unwrap(),
            Some(KeyState::Done(Placement { partition: 0, offset: 0 }))
        );
        clock.advance_ms(1);
        assert_eq!(ledger.lookup(SCOPE, &key(1)).await.unwrap(), None);
        assert_eq!(ledger.cleanup().await.unwrap(), CleanupStats { scanned: 2, deleted: 2 });
        let left =
            store.scan(LEDGER_PARTITION, LEDGER_PREFIX, &format!("{LEDGER_PREFIX}\u{10FFFF}"), None).await;
        assert!(left.unwrap().is_empty());
        // After the window the event is new again.
        assert_eq!(claimed(ledger.claim(SCOPE, &[key(1)]).await.unwrap()).events(), &[EventClaim::New]);
    }

    #[tokio::test]
    async fn cleanup_pages_through_many_records() {
        let (ledger, clock, _) = ledger(Duration::from_secs(60));
        let keys: Vec<Key> = (0..2500u32).map(|n| crate::dedup_key("/bulk", &n.to_string())).collect();
        for chunk in keys.chunks(500) {
            claim_and_complete(&ledger, chunk, 0).await;
        }
        clock.advance_ms(60_000);
        assert_eq!(ledger.cleanup().await.unwrap(), CleanupStats { scanned: 2500, deleted: 2500 });
    }

    #[tokio::test]
    async fn an_expired_key_is_taken_over_before_cleanup_runs() {
        let (ledger, clock, _) = ledger(Duration::from_secs(60));
        claim_and_complete(&ledger, &[key(1)], 0).await;
        clock.advance_ms(60_000);
        claim_and_complete(&ledger, &[key(1)], 5).await;
        assert_eq!(
            ledger.lookup(SCOPE, &key(1)).await.unwrap(),
            Some(KeyState::Done(Placement { partition: 0, offset: 5 }))
        );
    }

    #[tokio::test]
    async fn release_gives_claims_back() {
        let (ledger, _, _) = ledger(Duration::from_secs(60));
        let mut claim = claimed(ledger.claim(SCOPE, &[key(1), key(2)]).await.unwrap());
        ledger.release(&mut claim).await;
        assert_eq!(claimed(ledger.claim(SCOPE, &[key(2), key(1)]).await.unwrap()).events().len(), 2);
    }

    #[tokio::test]
    async fn racing_claims_of_one_batch_never_both_win() {
        let (ledger, _, _) = ledger(Duration::from_secs(60));
        let keys: Vec<Key> = (0..20).map(key).collect();
        let attempts = (0..8).map(|_| ledger.claim(SCOPE, &keys));
        let results = futures::future::join_all(attempts).await;
        let winners = results.iter().filter(|r| matches!(r, Ok(ClaimResult::Claimed(_)))).count();
        assert_eq!(winners, 1);
        assert!(results.iter().all(|r| r.is_ok()));
    }

    #[tokio::test]
    async fn a_corrupt_record_is_named() {
        let (ledger, _, store) = ledger(Duration::from_secs(60));
        let record_key = SCOPE.record_key(&key(1));
        store
            .put(LEDGER_PARTITION, &record_key, Bytes::from_static(b"nope"), PutCondition::None)
            .await
            .unwrap();
        match ledger.claim(SCOPE, &[key(1)]).await {
            Err(LedgerError::Corrupt { key, .. }) => assert_eq!(key, record_key),
            other => panic!("{other:?}"),
        }
    }
}
