//! The read path, R1–R4 ("Reading"):
//!
//! 1. **R1 trim marker** — read B (0 when absent) and start at `o′ = max(o, B)`.
//! 2. **R2 covering record** — the record of L with the smallest end offset above `o′`:
//!    a scan from `K(L, o′, MAX)` returns it first, followed by the next records of the log,
//!    so one metadata call serves a batched read. Keys are checked to carry L's prefix.
//! 3. **R3 dispatch** — on `file_type` alone: RAW records read their WAL object's log section;
//!    PARQUET records read file index → Parquet file → companion offset map → rows.
//! 4. **R4 entries** — whole entries, the first being the one that holds `o′`; never one that
//!    ends at or below B.
//!
//! When an object a record names is missing, the covering record is looked up again (a
//! compaction or hard trim may have replaced it) before an error is reported.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::entry_index::{self, IndexValue, RawRecord};
use lakestream_format::keys::{self, IndexKey};
use lakestream_format::legacy::{LegacyIndexValue, LegacyVersion, LegacyWalObject};
use lakestream_format::wal::{self, WalIndex, WalObject};
use lakestream_format::{Entry, FileType, LogId, LogRef, Offset};
use lakestream_meta::{Comparison, MetaStore, Record};
use lakestream_objstore::{ByteRange, ObjectPath, ObjectStore, ObjectStoreError};
use tokio::sync::watch;
use tokio::time::Instant;

use self::parquet::CachedFile;
use crate::cache::{CacheStats, IndexCache, ObjectCache};
use crate::config::{ConfigError, ReaderConfig, WalReadMode};
use crate::error::ReadError;

mod demand;
mod gather;
mod parquet;
mod tail;

/// Entries read from a log, and where the next read starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadBatch {
    /// Whole entries in offset order; the first holds the requested offset (or B).
    pub entries: Vec<Entry>,
    /// Where the next read starts: the end of the last entry returned, or the offset read
    /// from when nothing was returned.
    pub next_offset: Offset,
    /// The trim marker B seen by this read.
    pub trim_marker: Offset,
}

/// The components a reader needs.
#[derive(Debug, Clone)]
pub struct ReaderDeps {
    /// The metadata store holding the offset index.
    pub meta: Arc<dyn MetaStore>,
    /// The WAL root.
    pub wal: Arc<dyn ObjectStore>,
    /// The compacted root.
    pub compacted: Arc<dyn ObjectStore>,
}

/// A reader of logs. Needs no lease. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Reader {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ReaderConfig,
    deps: ReaderDeps,
    /// Parts of compacted files (companions, footers, row groups) and whole legacy WAL
    /// objects.
    files: ObjectCache<CachedFile>,
    /// Parsed WAL objects, so that reading another record of a cached object does not parse
    /// its index region again, and the sections read with ranged GETs (keyed
    /// `{object}#{log}`), in one cache with one bound.
    wal_objects: ObjectCache<CachedWal>,
    index: IndexCache,
    /// Tail reads waiting, per log.
    tails: tail::Tails,
    /// Ranged reads of WAL objects' sections being gathered, per object.
    batches: gather::Batches,
    /// How much of the objects it reads the reader uses (the adaptive mode's evidence).
    demand: demand::Demand,
    appended: watch::Sender<u64>,
    /// Bytes of objects and sections being read ahead now.
    read_ahead_in_flight: std::sync::atomic::AtomicUsize,
    /// Names of the WAL objects this reader has fetched from (whole or by ranges), the most
    /// recent [`READ_BEFORE_NAMES`]: one of them that is not cached whole now was evicted or
    /// read by ranges, and the logs still to read it each need their own section only (see
    /// [`Reader::raw_plan`]).
    read_before: quick_cache::sync::Cache<String, ()>,
}

/// How many names of objects fetched from a reader remembers (about 100 bytes each).
const READ_BEFORE_NAMES: usize = 8192;

/// What the WAL cache holds: a whole parsed object, or one log's section of one, read with
/// ranged GETs (the section, the payload bytes read, and where they start in the payload
/// region).
#[derive(Debug, Clone)]
enum CachedWal {
    Object(Arc<WalObject>),
    Section(Arc<(wal::LogSection, Bytes, u64)>),
    /// An object's parsed index region and the first bytes read of it (ranged reads).
    Index(Arc<(WalIndex, Bytes)>),
}

/// Why one attempt at a record failed in a way a fresh lookup can fix.
enum Attempt<T> {
    Done(T),
    Missing(String),
}

impl Reader {
    /// A reader over these stores.
    pub fn new(config: ReaderConfig, deps: ReaderDeps) -> Result<Reader, ConfigError> {
        config.validate()?;
        Ok(Reader {
            inner: Arc::new(Inner {
                files: ObjectCache::new(config.object_cache_bytes),
                wal_objects: ObjectCache::new(config.object_cache_bytes),
                read_before: quick_cache::sync::Cache::new(READ_BEFORE_NAMES),
                index: IndexCache::new(config.index_cache_ttl, config.index_cache_records),
                tails: tail::Tails::default(),
                batches: gather::Batches::default(),
                demand: demand::Demand::default(),
                config,
                deps,
                appended: watch::channel(0).0,
                read_ahead_in_flight: std::sync::atomic::AtomicUsize::new(0),
            }),
        })
    }

    /// Wakes the pollers of every log a read waits on in this process, for a look at the
    /// metadata store now: call it when an in-process writer has acknowledged entries and
    /// their logs are not known ([`Reader::notify_appended_to`] names the log, and costs no
    /// metadata read). Pollers also look by themselves, so calling either is an optimization.
    pub fn notify_appended(&self) {
        self.inner.appended.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Object-cache statistics (WAL objects and compacted files together).
    pub fn cache_stats(&self) -> CacheStats {
        let (a, b) = (self.inner.files.stats(), self.inner.wal_objects.stats());
        CacheStats { hits: a.hits + b.hits, misses: a.misses + b.misses, bytes: a.bytes + b.bytes }
    }

    /// R1: the trim marker B of the log, 0 when absent.
    pub async fn trim_marker(&self, log_id: LogId) -> Result<Offset, ReadError> {
        let record = self.meta().get(&keys::partition(log_id), &keys::trim_marker_key(log_id)).await;
        match record.map_err(|source| ReadError::Meta { log_id, source })? {
            None => Ok(0),
            Some(r) => keys::decode_trim_marker(&r.value).map_err(|e| ReadError::Corrupt {
                log_id,
                what: keys::trim_marker_key(log_id),
                detail: e.to_string(),
            }),
        }
    }

    /// The offset the next append to commit starts at: the end offset of the log's last
    /// record (`Floor(K(L, MAX, MAX))`), 0 for a log without records.
    pub async fn next_offset(&self, log_id: LogId) -> Result<Offset, ReadError> {
        let last = self
            .meta()
            .get_cmp(&keys::partition(log_id), &keys::last_key(log_id), Comparison::Floor)
            .await
            .map_err(|source| ReadError::Meta { log_id, source })?;
        match last.filter(|r| keys::is_index_key_of(&r.key, log_id)) {
            None => Ok(0),
            Some(r) => Ok(parse_key(log_id, &r.key)?.end_offset),
        }
    }

    /// The log's first readable offset: the greater of B and the start of the first record
    /// above B (spec SHOULD). For a log with nothing readable, its next offset.
    pub async fn first_offset(&self, log_id: LogId) -> Result<Offset, ReadError> {
        let b = self.trim_marker(log_id).await?;
        let first = self
            .meta()
            .get_cmp(&keys::partition(log_id), &keys::covering_lookup_key(log_id, b), Comparison::Higher)
            .await
            .map_err(|source| ReadError::Meta { log_id, source })?;
        match first.filter(|r| keys::is_index_key_of(&r.key, log_id)) {
            None => Ok(self.next_offset(log_id).await?.max(b)),
            Some(r) => {
                let (key, value) = parse_record(log_id, &r, self.inner.config.format_version)?;
                Ok(record_start(log_id, &r.key, &key, &value)?.max(b))
            }
        }
    }

    /// Reads whole entries of `log` from `offset` (R1–R4), up to about `max_bytes` of
    /// payload (always at least one entry when one is available). When nothing is available
    /// at the offset, waits up to `max_wait` for new data before returning an empty batch.
    pub async fn read(
        &self,
        log: &LogRef,
        offset: Offset,
        max_bytes: usize,
        max_wait: Duration,
    ) -> Result<ReadBatch, ReadError> {
        let deadline = Instant::now() + max_wait;
        // Seen ends of the log that turned out to hold nothing for this read yet (an index
        // record not visible to the scan yet): wait for a later one.
        let mut above = offset;
        loop {
            let b = self.trim_marker(log.log_id).await?; // R1
            let from = offset.max(b);
            let entries = match self.read_from(log, from, max_bytes).await {
                Ok(entries) => entries,
                // A compaction may leave out entries at or below B, so data missing below a
                // marker that advanced since R1 is not corruption: read again from the new B.
                Err(e @ ReadError::Corrupt { .. }) => {
                    if self.trim_marker(log.log_id).await? > from {
                        continue;
                    }
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            if !entries.is_empty() || Instant::now() >= deadline {
                let next_offset = entries.last().map_or(from, Entry::end_offset);
                return Ok(ReadBatch { entries, next_offset, trim_marker: b });
            }
            // Tail read: wait until the log is seen to end beyond `from` (an in-process
            // append, or the log's poller; see `tail`), never past the deadline.
            match self.wait_for_append(log.log_id, above.max(from), deadline).await {
                Some(seen) => above = seen,
                None => return Ok(ReadBatch { entries, next_offset: from, trim_marker: b }),
            }
        }
    }

    fn meta(&self) -> &dyn MetaStore {
        self.inner.deps.meta.as_ref()
    }

    /// R2–R4 from `from` (already at or above B), over consecutive records.
    async fn read_from(&self, log: &LogRef, from: Offset, max_bytes: usize) -> Result<Vec<Entry>, ReadError> {
        let log_id = log.log_id;
        let partition = keys::partition(log_id);
        let end_key = keys::last_key(log_id);
        let mut entries: Vec<Entry> = Vec::new();
        let mut next = from;
        let mut bytes = 0usize;
        let mut lookups_after_missing = 0u32;
        'scan: loop {
            let batch = self.inner.config.scan_batch;
            let records = self.scan_records(log_id, &partition, &end_key, next, batch).await?;
            let exhausted = records.len() < batch;
            let mut ahead_undecided = self.read_ahead(log_id, records.get(1..).unwrap_or_default());
            for (i, record) in records.iter().enumerate() {
                if !keys::is_index_key_of(&record.key, log_id) {
                    break 'scan;
                }
                // The reader has just learnt how to read its objects: read ahead as far as
                // the budget allows now, rather than at the next read.
                if ahead_undecided && self.inner.demand.shared(Instant::now().into_std()).is_some() {
                    ahead_undecided = self.read_ahead(log_id, records.get(i + 1..).unwrap_or_default());
                }
                let (key, value) = parse_record(log_id, record, self.inner.config.format_version)?;
                if key.end_offset <= next {
                    continue; // an older record overlapping a newer one (between C3 and C4)
                }
                let start = record_start(log_id, &record.key, &key, &value)?;
                if start > next {
                    if entries.is_empty() {
                        return Err(ReadError::Corrupt {
                            log_id,
                            what: record.key.clone(),
                            detail: format!(
                                "no index record holds offset {next}; the next record starts at {start}"
                            ),
                        });
                    }
                    break 'scan;
                }
                let budget = max_bytes.saturating_sub(bytes);
                let attempt = match &value {
                    Value::V3(IndexValue::Raw(raw)) => {
                        self.read_raw(log_id, record, start, raw, next, budget).await?
                    }
                    Value::V3(IndexValue::Parquet(pq)) => {
                        self.read_parquet(log, record, start, next, pq, budget).await?
                    }
                    Value::Legacy(v) => self.read_legacy(log_id, record, start, v).await?,
                };
                let got = match attempt {
                    Attempt::Done(got) => got,
                    Attempt::Missing(object) => {
                        // Spec SHOULD: look the covering record up again before reporting.
                        self.inner.index.invalidate(log_id);
                        lookups_after_missing += 1;
                        if lookups_after_missing > self.inner.config.missing_object_retries {
                            return Err(ReadError::MissingObject { log_id, object, key: record.key.clone() });
                        }
                        continue 'scan;
                    }
                };
                for entry in got {
                    if entry.end_offset() <= next {
                        continue;
                    }
                    next = entry.end_offset();
                    bytes += entry.payload.len();
                    entries.push(entry);
                    if bytes >= max_bytes {
                        break 'scan;
                    }
                }
            }
            if exhausted || records.is_empty() {
                break;
            }
        }
        Ok(entries)
    }

    /// Consecutive index records of `log_id` from the one covering `from`: from the index cache
    /// when it has fresh ones, else by one metadata scan (whose results are cached).
    async fn scan_records(
        &self,
        log_id: LogId,
        partition: &str,
        end_key: &str,
        from: Offset,
        batch: usize,
    ) -> Result<Vec<Record>, ReadError> {
        let cached = self.inner.index.covering(log_id, from, batch);
        // Serve from the cache only when its first record holds `from`: records cached by a
        // scan that started later must not hide the one that covers it.
        let covers = |r: &Record| {
            parse_record(log_id, r, self.inner.config.format_version)
                .ok()
                .and_then(|(key, value)| key.end_offset.checked_sub(value.message_count()))
                .is_some_and(|start| start <= from)
        };
        if cached.first().is_some_and(covers) {
            return Ok(cached);
        }
        let start_key = keys::covering_lookup_key(log_id, from);
        let records = self
            .meta()
            .scan(partition, &start_key, end_key, Some(batch))
            .await
            .map_err(|source| ReadError::Meta { log_id, source })?;
        self.inner.index.insert(
            log_id,
            records.iter().filter_map(|r| IndexKey::parse(&r.key).ok().map(|k| (k.end_offset, r.clone()))),
        );
        Ok(records)
    }

    /// A RAW record: its WAL object's section for L; offsets from the record's start, every
    /// entry stamped with the record's creation time. Only the entries that end above `from`
    /// are returned, and no more once `budget` payload bytes are taken (at least one): a read
    /// that starts or stops inside a large section slices just what it returns.
    async fn read_raw(
        &self,
        log_id: LogId,
        record: &Record,
        start: Offset,
        raw: &RawRecord,
        from: Offset,
        budget: usize,
    ) -> Result<Attempt<Vec<Entry>>, ReadError> {
        let corrupt = |detail: String| ReadError::Corrupt {
            log_id,
            what: format!("WAL object {}", raw.location),
            detail,
        };
        let wanted = Wanted { start, from, budget, timestamp_ms: record.created_ms };
        let loaded = self.load_raw(log_id, record, raw).await?;
        if self.inner.config.wal_read == WalReadMode::Adaptive
            && let Some(region) = raw.file_size
            && matches!(loaded, Attempt::Done(_))
        {
            let region = u64::try_from(region).unwrap_or(0);
            let now = Instant::now().into_std();
            self.inner.demand.delivered(&raw.location, region, log_id, raw.entry_size_bytes, now);
        }
        match loaded {
            Attempt::Missing(o) => Ok(Attempt::Missing(o)),
            Attempt::Done(CachedWal::Object(object)) => {
                // Borrowed from the cached object: nothing per entry is copied but the slices.
                let section = object.section(log_id).ok_or_else(|| {
                    corrupt(format!("no log section for log {log_id} (named by {})", record.key))
                })?;
                section.check_matches_record(raw).map_err(|e| corrupt(e.to_string()))?;
                wanted.take(section, object.payload_region(), 0).map(Attempt::Done).map_err(corrupt)
            }
            Attempt::Done(CachedWal::Section(got)) => {
                let (section, part, part_start) = &*got;
                section.check_matches_record(raw).map_err(|e| corrupt(e.to_string()))?;
                wanted.take(section, part, *part_start).map(Attempt::Done).map_err(corrupt)
            }
            // `load_raw` yields objects and sections only.
            Attempt::Done(CachedWal::Index(_)) => {
                Err(corrupt("an index where a section was expected".into()))
            }
        }
    }

    /// Whether the read mode fetches a RAW record's whole object (else its section), and the
    /// cache key of what it fetches. Adaptive: a log whose section is a small share of a
    /// many-log object reads just its span; a cached object, or a section of a quarter of
    /// the object or more, reads whole.
    fn raw_plan(&self, log_id: LogId, raw: &RawRecord) -> (bool, String, u64) {
        let mode = self.inner.config.wal_read;
        let whole = match mode {
            WalReadMode::Whole => true,
            WalReadMode::Ranged => false,
            WalReadMode::Adaptive => {
                self.inner.wal_objects.contains(&raw.location)
                    || raw.file_size.is_none_or(|region| {
                        raw.entry_size_bytes.saturating_mul(4) >= u64::try_from(region).unwrap_or(0)
                    })
                    // A smaller section: whole when this reader's readers use most of the
                    // objects they read (see `demand`), unless the object is being read by
                    // ranges already (its index is being read or cached): fetching it whole
                    // would fetch those ranges again; or unless it was fetched from before
                    // (whole, and evicted since, or by ranges): the logs still to read it lag
                    // the others by more than the cache holds, and each needs its own
                    // section only.
                    || (self.inner.demand.shared(Instant::now().into_std()) == Some(true)
                        && !self.inner.batches.is_open(&raw.location)
                        && !self.inner.wal_objects.contains(&index_key(&raw.location))
                        && !self.inner.read_before.contains_key(&raw.location))
            }
        };
        match whole {
            true => {
                let size = raw.file_size.map_or(raw.entry_size_bytes, |s| u64::try_from(s).unwrap_or(0));
                (true, raw.location.clone(), size)
            }
            false => (false, format!("{}#{}", raw.location, log_id.0), raw.entry_size_bytes),
        }
    }

    /// The WAL object of a RAW record, or L's section of it, from the cache or the store
    /// (single-flight: concurrent loads of one object or section wait for one fetch).
    async fn load_raw(
        &self,
        log_id: LogId,
        record: &Record,
        raw: &RawRecord,
    ) -> Result<Attempt<CachedWal>, ReadError> {
        let corrupt = |detail: String| ReadError::Corrupt {
            log_id,
            what: format!("WAL object {}", raw.location),
            detail,
        };
        let mode = self.inner.config.wal_read;
        let (whole, key, _) = self.raw_plan(log_id, raw);
        let got = if whole {
            let load = async {
                let bytes = match self.get_object(&self.inner.deps.wal, log_id, &raw.location).await? {
                    Attempt::Done(b) => b,
                    Attempt::Missing(_) => return Ok(None),
                };
                let weight = bytes.len();
                let object = WalObject::parse(bytes).map_err(|e| corrupt(e.to_string()))?;
                // After the GET, not before: readers of the object's other logs meanwhile
                // join this load (single-flight) rather than read their sections.
                self.inner.read_before.insert(raw.location.clone(), ());
                Ok::<_, ReadError>(Some((CachedWal::Object(Arc::new(object)), weight)))
            };
            self.inner.wal_objects.get_or_load(&key, load).await?
        } else {
            let load = async {
                match self.read_section_ranged(log_id, record, raw).await? {
                    Attempt::Done(got) => {
                        self.inner.read_before.insert(raw.location.clone(), ());
                        let weight = got.1.len() + 16 * got.0.entries.len();
                        Ok::<_, ReadError>(Some((CachedWal::Section(Arc::new(got)), weight)))
                    }
                    Attempt::Missing(_) => Ok(None),
                }
            };
            match mode {
                // The ranged mode caches nothing.
                WalReadMode::Ranged => load.await?.map(|(got, _)| got),
                _ => self.inner.wal_objects.get_or_load(&key, load).await?,
            }
        };
        match got {
            Some(CachedWal::Object(_)) if !whole => {
                Err(corrupt("an object was cached under a section's name".into()))
            }
            Some(CachedWal::Section(_)) if whole => {
                Err(corrupt("a section was cached under the object's name".into()))
            }
            Some(CachedWal::Index(_)) => Err(corrupt("an index was cached under an object's name".into())),
            Some(got) => Ok(Attempt::Done(got)),
            None => Ok(Attempt::Missing(raw.location.clone())),
        }
    }

    /// Read-ahead: starts loading, in the background, the WAL objects (or sections) of the
    /// records after the one being read, while the bytes being read ahead stay within
    /// `read_ahead_bytes`. A later read of them joins the load or finds them cached.
    ///
    /// Returns whether it looked ahead less far because the adaptive mode is undecided.
    fn read_ahead(&self, log_id: LogId, records: &[Record]) -> bool {
        let budget = self.inner.config.read_ahead_bytes;
        if budget == 0 || self.inner.config.wal_read == WalReadMode::Ranged {
            return false;
        }
        // Until the reader knows whether its objects are shared, it reads only a few small
        // sections ahead (by range): the first objects read decide how the next ones are
        // read (see `demand`).
        let undecided = self.inner.config.wal_read == WalReadMode::Adaptive
            && self.inner.demand.shared(Instant::now().into_std()).is_none();
        let mut ranged_ahead = 0usize;
        let mut ahead = 0usize;
        for record in records {
            if !keys::is_index_key_of(&record.key, log_id) {
                return false;
            }
            let Ok((_, Value::V3(IndexValue::Raw(raw)))) =
                parse_record(log_id, record, self.inner.config.format_version)
            else {
                return false; // read-ahead covers RAW records; PARQUET files are read by ranges
            };
            let (whole, key, size) = self.raw_plan(log_id, &raw);
            if undecided && !whole {
                ranged_ahead += 1;
                if ranged_ahead > demand::UNDECIDED_LOOK_AHEAD {
                    return true;
                }
            }
            let size = usize::try_from(size).unwrap_or(usize::MAX);
            // Look no further ahead than the budget, cached or not.
            ahead = ahead.saturating_add(size);
            if ahead > budget.saturating_add(size) {
                return false;
            }
            if self.inner.wal_objects.contains(&key) {
                continue;
            }
            let in_flight = &self.inner.read_ahead_in_flight;
            let before = in_flight.fetch_add(size, std::sync::atomic::Ordering::SeqCst);
            if before > 0 && before + size > budget {
                in_flight.fetch_sub(size, std::sync::atomic::Ordering::SeqCst);
                return false;
            }
            let (reader, record) = (self.clone(), record.clone());
            tokio::spawn(async move {
                // Errors are the later read's to report; read-ahead only warms the cache.
                let _ = reader.load_raw(log_id, &record, &raw).await;
                reader.inner.read_ahead_in_flight.fetch_sub(size, std::sync::atomic::Ordering::SeqCst);
            });
        }
        false
    }

    /// The index region of a WAL object, parsed, with the object's first bytes as read (one
    /// GET of its first 4 KiB; a second one when the index is larger), cached: readers of the
    /// object's other logs share it (single-flight), so a many-log object costs one index
    /// read, not one per log.
    async fn wal_index(
        &self,
        log_id: LogId,
        raw: &RawRecord,
    ) -> Result<Attempt<Arc<(WalIndex, Bytes)>>, ReadError> {
        const GUESS: u64 = 4096;
        let corrupt = |detail: String| ReadError::Corrupt {
            log_id,
            what: format!("WAL object {}", raw.location),
            detail,
        };
        let load = async {
            let store = &self.inner.deps.wal;
            let path = &ObjectPath::new(raw.location.clone()).map_err(|e| corrupt(e.to_string()))?;
            let get = |range: ByteRange| async move {
                match store.get_range(path, range).await {
                    Ok(b) => Ok(Some(b)),
                    Err(ObjectStoreError::NotFound { .. }) => Ok(None),
                    Err(source) => Err(ReadError::Object { log_id, object: raw.location.clone(), source }),
                }
            };
            let Some(mut head) = get(ByteRange::Bounded(0..GUESS)).await? else { return Ok(None) };
            let index_len = u64::from(wal::index_length(&head).map_err(|e| corrupt(e.to_string()))?);
            let index_end = 4 + index_len;
            if (head.len() as u64) < index_end {
                let Some(whole_index) = get(ByteRange::Bounded(0..index_end)).await? else { return Ok(None) };
                head = whole_index;
            }
            let index = WalIndex::parse(&head).map_err(|e| corrupt(e.to_string()))?;
            // Parsed, a section costs about 16 bytes per entry beside the bytes read.
            let entries: usize = index.sections().iter().map(|s| s.entries.len()).sum();
            let weight = head.len() + 16 * entries + 64 * index.sections().len();
            Ok::<_, ReadError>(Some((CachedWal::Index(Arc::new((index, head))), weight)))
        };
        match self.inner.wal_objects.get_or_load(&index_key(&raw.location), load).await? {
            Some(CachedWal::Index(got)) => Ok(Attempt::Done(got)),
            Some(_) => Err(corrupt("another kind of value was cached under its index's name".into())),
            None => Ok(Attempt::Missing(raw.location.clone())),
        }
    }

    /// Ranged reads of a WAL object: the index region (shared by the readers of its logs,
    /// see [`Reader::wal_index`]), then only the payload span of L's section. Returns the
    /// section, the payload bytes read and where they start in the payload region.
    async fn read_section_ranged(
        &self,
        log_id: LogId,
        record: &Record,
        raw: &RawRecord,
    ) -> Result<Attempt<(wal::LogSection, Bytes, u64)>, ReadError> {
        let corrupt = |detail: String| ReadError::Corrupt {
            log_id,
            what: format!("WAL object {}", raw.location),
            detail,
        };
        // Joined before the index is read: the readers of the object's other logs that come
        // while it is being read have their sections read with this one (see `gather`).
        let batch = self.inner.batches.join(&raw.location, log_id);
        let got = match self.wal_index(log_id, raw).await? {
            Attempt::Done(got) => got,
            Attempt::Missing(o) => return Ok(Attempt::Missing(o)),
        };
        let (index, head) = &*got;
        if let Some(len) = raw.file_size {
            index.check_payload_region_len(len as u64).map_err(|e| corrupt(e.to_string()))?;
        }
        let section = index
            .section(log_id)
            .ok_or_else(|| corrupt(format!("no log section for log {log_id} (named by {})", record.key)))?
            .clone();
        let span = section.payload_span();
        let base = index.payload_region_start();
        let part = if span.is_empty() {
            Bytes::new()
        } else if base + span.end <= head.len() as u64 {
            head.slice((base + span.start) as usize..(base + span.end) as usize)
        } else {
            match self.gathered_span(log_id, &raw.location, &batch, index, head.len() as u64, &span).await? {
                Some(b) => b,
                None => return Ok(Attempt::Missing(raw.location.clone())),
            }
        };
        Ok(Attempt::Done((section, part, span.start)))
    }

    /// A version 1 or 2 record (Appendix C): one entry, located by `entry_id` in a legacy WAL
    /// object. Legacy compacted data is out of scope for format version 3 and refused.
    async fn read_legacy(
        &self,
        log_id: LogId,
        record: &Record,
        start: Offset,
        value: &LegacyIndexValue,
    ) -> Result<Attempt<Vec<Entry>>, ReadError> {
        let corrupt = |detail: String| ReadError::Corrupt {
            log_id,
            what: format!("index record {}", record.key),
            detail,
        };
        if value.effective_file_type() != FileType::Raw {
            return Err(corrupt(
                "legacy PARQUET records (format versions 1 and 2) are not readable here".into(),
            ));
        }
        let bytes = match self.fetch(&self.inner.deps.wal, log_id, &value.location).await? {
            Attempt::Done(b) => b,
            Attempt::Missing(o) => return Ok(Attempt::Missing(o)),
        };
        let object = LegacyWalObject::parse(bytes).map_err(|e| ReadError::Corrupt {
            log_id,
            what: format!("WAL object {}", value.location),
            detail: e.to_string(),
        })?;
        let (tuple, payload) = object.entry(value.entry_id).ok_or_else(|| {
            corrupt(format!("WAL object {} has no entry {}", value.location, value.entry_id))
        })?;
        if tuple.log_id != log_id || tuple.payload_length != value.entry_size_bytes {
            return Err(corrupt(format!(
                "entry {} of {} belongs to log {} with {} bytes; the record says log {log_id} with {} bytes",
                value.entry_id, value.location, tuple.log_id, tuple.payload_length, value.entry_size_bytes
            )));
        }
        let record_count = u32::try_from(value.message_count)
            .map_err(|_| corrupt(format!("message count {} exceeds 2^32-1", value.message_count)))?;
        Ok(Attempt::Done(vec![Entry {
            offset: start,
            record_count,
            timestamp_ms: record.created_ms,
            payload,
        }]))
    }

    /// An immutable object, whole, from the file cache or the store.
    async fn fetch(
        &self,
        store: &Arc<dyn ObjectStore>,
        log_id: LogId,
        name: &str,
    ) -> Result<Attempt<Bytes>, ReadError> {
        let cache_key = format!("{:p}/{name}", Arc::as_ptr(store));
        // Single-flight: concurrent reads of one object wait for one GET.
        let load = async {
            Ok(match self.get_object(store, log_id, name).await? {
                Attempt::Done(b) => {
                    let weight = b.len();
                    Some((CachedFile::Whole(b), weight))
                }
                Attempt::Missing(_) => None,
            })
        };
        match self.inner.files.get_or_load(&cache_key, load).await? {
            Some(CachedFile::Whole(b)) => Ok(Attempt::Done(b)),
            Some(_) => Err(ReadError::Corrupt {
                log_id,
                what: format!("object {name}"),
                detail: "another kind of value was cached under its name".into(),
            }),
            None => Ok(Attempt::Missing(name.to_string())),
        }
    }

    async fn get_object(
        &self,
        store: &Arc<dyn ObjectStore>,
        log_id: LogId,
        name: &str,
    ) -> Result<Attempt<Bytes>, ReadError> {
        let path = ObjectPath::new(name.to_string()).map_err(|e| ReadError::Corrupt {
            log_id,
            what: format!("object name {name:?}"),
            detail: e.to_string(),
        })?;
        match store.get(&path).await {
            Ok(b) => Ok(Attempt::Done(b)),
            Err(ObjectStoreError::NotFound { .. }) => Ok(Attempt::Missing(name.to_string())),
            Err(source) => Err(ReadError::Object { log_id, object: name.to_string(), source }),
        }
    }
}

/// Which entries of a RAW record's section a read takes.
struct Wanted {
    /// The offset of the section's first entry (the record's start).
    start: Offset,
    /// Entries ending at or below this offset are skipped.
    from: Offset,
    /// Stop once this many payload bytes are taken (after at least one entry).
    budget: usize,
    /// Every entry's timestamp: the record's creation time.
    timestamp_ms: i64,
}

impl Wanted {
    /// The wanted entries of `section`, with payloads as zero-copy slices of `region_part`,
    /// which holds the payload region's bytes from `part_start` on. Entries are not sliced
    /// (nor their ranges checked) unless taken. The error says which payload lies outside.
    fn take(
        &self,
        section: &wal::LogSection,
        region_part: &Bytes,
        part_start: u64,
    ) -> Result<Vec<Entry>, String> {
        let part_end = part_start + region_part.len() as u64;
        let mut entries = Vec::new();
        let mut offset = self.start;
        let mut taken = 0usize;
        for (i, d) in section.entries.iter().enumerate() {
            let entry_start = offset;
            // The section matched its record, so the counts sum to the record's end offset.
            offset = offset.saturating_add(u64::from(d.record_count));
            if offset <= self.from {
                continue;
            }
            if !entries.is_empty() && taken >= self.budget {
                break;
            }
            let range = d.payload_range();
            if range.start < part_start || range.end > part_end {
                return Err(format!(
                    "entry {i} of log {}: payload {}..{} is outside the payload bytes {part_start}..{part_end}",
                    section.log_id, range.start, range.end
                ));
            }
            let payload =
                region_part.slice((range.start - part_start) as usize..(range.end - part_start) as usize);
            taken += payload.len();
            entries.push(Entry {
                offset: entry_start,
                record_count: d.record_count,
                timestamp_ms: self.timestamp_ms,
                payload,
            });
        }
        Ok(entries)
    }
}

/// The WAL cache's key of an object's index region (ranged reads).
fn index_key(object: &str) -> String {
    format!("{object}#index")
}

fn parse_key(log_id: LogId, key: &str) -> Result<IndexKey, ReadError> {
    IndexKey::parse(key).map_err(|e| ReadError::Corrupt {
        log_id,
        what: key.to_string(),
        detail: e.to_string(),
    })
}

/// An index value of the deployment's format version.
#[derive(Debug)]
enum Value {
    V3(IndexValue),
    Legacy(LegacyIndexValue),
}

impl Value {
    fn message_count(&self) -> u64 {
        match self {
            Value::V3(v) => u64::from(v.message_count()),
            Value::Legacy(v) => v.message_count,
        }
    }
}

fn parse_record(log_id: LogId, record: &Record, format_version: u8) -> Result<(IndexKey, Value), ReadError> {
    let key = parse_key(log_id, &record.key)?;
    let value = match format_version {
        3 => entry_index::decode(&record.value).map(Value::V3),
        1 => LegacyIndexValue::parse_version(&record.value, LegacyVersion::V1).map(Value::Legacy),
        _ => LegacyIndexValue::parse_version(&record.value, LegacyVersion::V2).map(Value::Legacy),
    }
    .map_err(|e| ReadError::Corrupt {
        log_id,
        what: format!("index record {}", record.key),
        detail: e.to_string(),
    })?;
    Ok((key, value))
}

/// A record's start offset: its end offset minus its message count.
fn record_start(log_id: LogId, text: &str, key: &IndexKey, value: &Value) -> Result<Offset, ReadError> {
    key.end_offset.checked_sub(value.message_count()).ok_or_else(|| ReadError::Corrupt {
        log_id,
        what: format!("index record {text}"),
        detail: format!("message_count {} exceeds the end offset {}", value.message_count(), key.end_offset),
    })
}
