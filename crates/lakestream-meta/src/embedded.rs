//! [`EmbeddedStore`]: a durable metadata store in one redb file, the zero-setup default of
//! `lakestream dev`.
//!
//! - **One keyspace.** Every partition shares it, as on a one-shard Oxia. Keys are stored in
//!   hierarchical-encoded form ([`crate::key_order`]), so redb's bytewise order is the key order.
//! - **Durable per write, committed in groups.** A write returns only after the redb
//!   transaction holding it committed with immediate durability (fsync). Writes that arrive
//!   while a commit is running queue up, and the next committer applies all of them, in
//!   arrival order, in one transaction: one fsync for the group instead of one per write
//!   (the produce path issues one sequenced put per log and flush, concurrently).
//! - **Linearizable in its process.** Writers are serialized by one lock; within a group each
//!   write sees the ones before it. A read runs on the latest committed snapshot, so it sees
//!   every write that returned before it started.
//! - **Failures stay per write.** A write that fails before changing anything (a condition,
//!   a bad request) fails alone; the rest of its group commits. A write that fails after
//!   changing the transaction, or a failed commit, fails the whole group, and nothing of it
//!   is applied.
//! - **Restart.** Permanent records come back with their versions and timestamps, and the
//!   version counter is stored with them, so versions keep increasing. Sessions live in memory
//!   only: opening the file removes every ephemeral record a previous process left.
//! - **Async-friendly.** Every redb call runs on tokio's blocking pool.
//!
//! File layout: table `records` maps encoded keys to record values; table `meta` holds the
//! format marker and the version counter. A record value is
//!
//! ```text
//! +------+------------+------------+-------------+------------+---------+
//! | 0x01 | version    | created_ms | modified_ms | session id | value … |
//! | u8   | i64 BE     | i64 BE     | i64 BE      | u64 BE     |         |
//! +------+------------+------------+-------------+------------+---------+
//! session id 0 = permanent record; otherwise the (in-memory) session it is bound to
//! ```

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use lakestream_format::{Clock, ErrorClass, SystemClock};
use redb::{
    Database, DatabaseError, ReadableDatabase, ReadableTable, ReadableTableMetadata, StorageError,
    TableDefinition, TableHandle,
};
use tokio::sync::watch;

use crate::engine::{self, KeySpace, KeySpaceMut, SessionId, StoredRecord};
use crate::error::{MetaError, MetaResult};
use crate::key_order;
use crate::sessions::{self, EndedSession, SessionTable};
use crate::store::{Comparison, MetaStore, PutCondition, Record, Session, Version, WriteResult};

const RECORDS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("records");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const FORMAT_KEY: &str = "format";
const FORMAT_MARKER: &[u8] = b"lakestream-meta embedded store v1";
const LAST_VERSION_KEY: &str = "last_version";
const RECORD_FORMAT: u8 = 1;
const RECORD_HEADER_LEN: usize = 1 + 8 + 8 + 8 + 8;

/// Why an embedded store could not be opened. Each variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another process (or another handle in this one) has the file open.
    #[error("metadata file {path} is locked: another process has it open")]
    Locked {
        /// The file.
        path: PathBuf,
    },
    /// The file cannot be created or read.
    #[error("cannot open metadata file {path}: {detail}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        detail: String,
    },
    /// The file holds data this store cannot interpret: not a redb file, damaged, or a redb
    /// file that some other program wrote.
    #[error("metadata file {path} holds data we cannot read: {detail}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
}

impl OpenError {
    /// The class of the error.
    pub fn class(&self) -> ErrorClass {
        match self {
            OpenError::Locked { .. } => ErrorClass::Conflict,
            OpenError::Io { .. } => ErrorClass::Retryable,
            OpenError::Corrupt { .. } => ErrorClass::CorruptData,
        }
    }
}

fn encode_record(record: &StoredRecord) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(RECORD_HEADER_LEN + record.value.len());
    bytes.push(RECORD_FORMAT);
    bytes.extend_from_slice(&record.version.to_be_bytes());
    bytes.extend_from_slice(&record.created_ms.to_be_bytes());
    bytes.extend_from_slice(&record.modified_ms.to_be_bytes());
    bytes.extend_from_slice(&record.session.unwrap_or(0).to_be_bytes());
    bytes.extend_from_slice(&record.value);
    bytes
}

/// Decodes a stored record value; the error says what is wrong, without the key.
fn decode_record(bytes: &[u8]) -> Result<StoredRecord, String> {
    let Some((header, value)) = bytes.split_first_chunk::<RECORD_HEADER_LEN>() else {
        return Err(format!(
            "record of {} bytes is shorter than its {RECORD_HEADER_LEN}-byte header",
            bytes.len()
        ));
    };
    if header[0] != RECORD_FORMAT {
        return Err(format!("record format {} (expected {RECORD_FORMAT})", header[0]));
    }
    let field = |at: usize| -> [u8; 8] {
        let mut word = [0u8; 8];
        word.copy_from_slice(&header[at..at + 8]);
        word
    };
    let session = u64::from_be_bytes(field(25));
    Ok(StoredRecord {
        value: Bytes::copy_from_slice(value),
        version: i64::from_be_bytes(field(1)),
        created_ms: i64::from_be_bytes(field(9)),
        modified_ms: i64::from_be_bytes(field(17)),
        session: (session != 0).then_some(session),
    })
}

/// The records table seen through a read or write transaction.
struct RecordSpace<'p, T> {
    table: T,
    path: &'p Path,
}

/// The records table and the version counter inside one write transaction.
struct WriteSpace<'p, 't> {
    records: RecordSpace<'p, redb::Table<'t, &'static [u8], &'static [u8]>>,
    meta: redb::Table<'t, &'static str, &'static [u8]>,
    /// Whether the transaction changed since the flag was last cleared: a write that fails
    /// with changes made cannot be left out of its group alone.
    dirty: bool,
}

fn storage_error(path: &Path, error: impl std::fmt::Display) -> MetaError {
    MetaError::Internal(format!("embedded store {}: {error}", path.display()))
}

impl<T: ReadableTable<&'static [u8], &'static [u8]>> RecordSpace<'_, T> {
    fn decode(&self, key: &[u8], value: &[u8]) -> MetaResult<StoredRecord> {
        decode_record(value).map_err(|detail| {
            let key = key_order::decode(key).unwrap_or_else(|_| format!("{key:02x?}"));
            storage_error(self.path, format!("corrupt record under {key:?}: {detail}"))
        })
    }

    fn collect(
        &self,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        backwards: bool,
        limit: usize,
    ) -> MetaResult<Vec<(Vec<u8>, StoredRecord)>> {
        let range = self.table.range::<&[u8]>(bounds).map_err(|e| storage_error(self.path, e))?;
        let entries: Box<dyn Iterator<Item = _>> =
            if backwards { Box::new(range.rev()) } else { Box::new(range) };
        let mut found = Vec::new();
        for entry in entries.take(limit) {
            let (key, value) = entry.map_err(|e| storage_error(self.path, e))?;
            found.push((key.value().to_vec(), self.decode(key.value(), value.value())?));
        }
        Ok(found)
    }
}

impl<T: ReadableTable<&'static [u8], &'static [u8]>> KeySpace for RecordSpace<'_, T> {
    fn get(&self, key: &[u8]) -> MetaResult<Option<StoredRecord>> {
        match self.table.get(key).map_err(|e| storage_error(self.path, e))? {
            Some(value) => Ok(Some(self.decode(key, value.value())?)),
            None => Ok(None),
        }
    }

    fn seek(&self, key: &[u8], cmp: Comparison) -> MetaResult<Option<(Vec<u8>, StoredRecord)>> {
        let (bounds, backwards) = match cmp {
            Comparison::Equal => return Ok(self.get(key)?.map(|r| (key.to_vec(), r))),
            Comparison::Floor => ((Bound::Unbounded, Bound::Included(key)), true),
            Comparison::Lower => ((Bound::Unbounded, Bound::Excluded(key)), true),
            Comparison::Ceiling => ((Bound::Included(key), Bound::Unbounded), false),
            Comparison::Higher => ((Bound::Excluded(key), Bound::Unbounded), false),
        };
        Ok(self.collect(bounds, backwards, 1)?.pop())
    }

    fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: Option<usize>,
    ) -> MetaResult<Vec<(Vec<u8>, StoredRecord)>> {
        let end = end.map_or(Bound::Unbounded, Bound::Excluded);
        self.collect((Bound::Included(start), end), false, limit.unwrap_or(usize::MAX))
    }
}

impl KeySpace for WriteSpace<'_, '_> {
    fn get(&self, key: &[u8]) -> MetaResult<Option<StoredRecord>> {
        self.records.get(key)
    }

    fn seek(&self, key: &[u8], cmp: Comparison) -> MetaResult<Option<(Vec<u8>, StoredRecord)>> {
        self.records.seek(key, cmp)
    }

    fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: Option<usize>,
    ) -> MetaResult<Vec<(Vec<u8>, StoredRecord)>> {
        self.records.range(start, end, limit)
    }
}

impl KeySpaceMut for WriteSpace<'_, '_> {
    fn insert(&mut self, key: &[u8], record: &StoredRecord) -> MetaResult<()> {
        let path = self.records.path;
        self.dirty = true;
        self.records
            .table
            .insert(key, encode_record(record).as_slice())
            .map_err(|e| storage_error(path, e))?;
        Ok(())
    }

    fn remove(&mut self, key: &[u8]) -> MetaResult<Option<StoredRecord>> {
        let path = self.records.path;
        self.dirty = true;
        let removed =
            self.records.table.remove(key).map_err(|e| storage_error(path, e))?.map(|v| v.value().to_vec());
        removed.map(|value| self.records.decode(key, &value)).transpose()
    }

    fn next_version(&mut self) -> MetaResult<Version> {
        let path = self.records.path;
        let last = read_last_version(&self.meta).map_err(|detail| storage_error(path, detail))?;
        let next = last + 1;
        self.dirty = true;
        self.meta
            .insert(LAST_VERSION_KEY, next.to_be_bytes().as_slice())
            .map_err(|e| storage_error(path, e))?;
        Ok(next)
    }
}

fn read_last_version(meta: &impl ReadableTable<&'static str, &'static [u8]>) -> Result<Version, String> {
    match meta.get(LAST_VERSION_KEY).map_err(|e| e.to_string())? {
        None => Ok(0),
        Some(value) => {
            let bytes: [u8; 8] = value
                .value()
                .try_into()
                .map_err(|_| format!("version counter of {} bytes (expected 8)", value.value().len()))?;
            Ok(Version::from_be_bytes(bytes))
        }
    }
}

/// A write waiting in the queue for its group's transaction.
trait QueuedWrite: Send {
    /// Runs the write inside the group's transaction and keeps its result. Returns an error
    /// only when the write failed after changing the transaction: the group cannot commit.
    fn apply(
        &mut self,
        space: &mut WriteSpace<'_, '_>,
        sessions: &mut SessionTable,
        now_ms: i64,
    ) -> MetaResult<()>;
    /// Hands the caller its result once the group's fate is known: its own result when the
    /// group committed, otherwise the group's failure.
    fn complete(self: Box<Self>, group: Result<(), &MetaError>);
}

/// A [`QueuedWrite`] returning `R` through a channel.
struct PendingWrite<F, R> {
    op: Option<F>,
    result: Option<MetaResult<R>>,
    reply: std::sync::mpsc::SyncSender<MetaResult<R>>,
}

impl<F, R> QueuedWrite for PendingWrite<F, R>
where
    F: FnOnce(&mut WriteSpace<'_, '_>, &mut SessionTable, i64) -> MetaResult<R> + Send,
    R: Send,
{
    fn apply(
        &mut self,
        space: &mut WriteSpace<'_, '_>,
        sessions: &mut SessionTable,
        now_ms: i64,
    ) -> MetaResult<()> {
        let Some(op) = self.op.take() else { return Ok(()) };
        space.dirty = false;
        let result = op(space, sessions, now_ms);
        let poisoned = match &result {
            Err(e) if space.dirty => Err(e.clone()),
            _ => Ok(()),
        };
        self.result = Some(result);
        poisoned
    }

    fn complete(self: Box<Self>, group: Result<(), &MetaError>) {
        let result = match (group, self.result) {
            (Ok(()), Some(result)) => result,
            // A write that failed on its own changed nothing: its error stands.
            (Err(_), Some(Err(own))) => Err(own),
            (Err(e), _) => Err(MetaError::Internal(format!("write not committed, its group failed: {e}"))),
            (Ok(()), None) => Err(MetaError::Internal("a queued write was never applied".into())),
        };
        // The caller may have gone away; nobody is left to tell.
        let _ = self.reply.send(result);
    }
}

/// Writes waiting for the next group commit, in arrival order, and whether a group is being
/// committed now.
#[derive(Default)]
struct WriteQueue {
    waiting: Vec<Box<dyn QueuedWrite>>,
    committing: bool,
    /// Groups committed so far (tests check that concurrent writes share commits).
    groups: u64,
}

impl std::fmt::Debug for WriteQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteQueue")
            .field("waiting", &self.waiting.len())
            .field("committing", &self.committing)
            .field("groups", &self.groups)
            .finish()
    }
}

/// A writer's turn at committing: ending it clears the `committing` flag and wakes the
/// writers waiting for the commit.
struct CommitTurn<'a>(&'a Inner);

impl Drop for CommitTurn<'_> {
    fn drop(&mut self) {
        // A poisoned queue still holds consistent fields (each is set in one step).
        let mut queue = self.0.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        queue.committing = false;
        queue.groups += 1;
        drop(queue);
        self.0.committed.notify_all();
    }
}

#[derive(Debug)]
struct Inner {
    db: Database,
    path: PathBuf,
    clock: Arc<dyn Clock>,
    /// The writer lock: held for every write transaction, so writes and the session table
    /// change together. Its holder commits every queued write.
    sessions: Mutex<SessionTable>,
    /// Writes queued for the next group commit.
    queue: Mutex<WriteQueue>,
    /// Signalled whenever a group commit ends: its writers return, and one of the writers
    /// still waiting commits the next group.
    committed: Condvar,
}

impl Inner {
    fn lock_sessions(&self) -> MetaResult<MutexGuard<'_, SessionTable>> {
        self.sessions.lock().map_err(|_| MetaError::Internal("embedded store session lock poisoned".into()))
    }

    fn read<R>(
        &self,
        op: impl FnOnce(&RecordSpace<'_, redb::ReadOnlyTable<&'static [u8], &'static [u8]>>) -> MetaResult<R>,
    ) -> MetaResult<R> {
        let txn = self.db.begin_read().map_err(|e| storage_error(&self.path, e))?;
        let table = txn.open_table(RECORDS).map_err(|e| storage_error(&self.path, e))?;
        op(&RecordSpace { table, path: &self.path })
    }

    /// Runs `op` in one write transaction and commits it durably; aborts when `op` fails.
    fn write_txn<R>(&self, op: impl FnOnce(&mut WriteSpace<'_, '_>) -> MetaResult<R>) -> MetaResult<R> {
        let txn = self.db.begin_write().map_err(|e| storage_error(&self.path, e))?;
        let result = {
            let records = txn.open_table(RECORDS).map_err(|e| storage_error(&self.path, e))?;
            let meta = txn.open_table(META).map_err(|e| storage_error(&self.path, e))?;
            let mut space =
                WriteSpace { records: RecordSpace { table: records, path: &self.path }, meta, dirty: false };
            op(&mut space)
        };
        match result {
            Ok(value) => {
                txn.commit().map_err(|e| storage_error(&self.path, e))?;
                Ok(value)
            }
            Err(e) => {
                if let Err(abort) = txn.abort() {
                    tracing::warn!(path = %self.path.display(), error = %abort, "aborting a failed transaction failed");
                }
                Err(e)
            }
        }
    }

    /// Removes ended sessions' records in one transaction, then fires their signals.
    fn finish(&self, ended: Vec<EndedSession>) -> MetaResult<()> {
        if ended.is_empty() {
            return Ok(());
        }
        self.write_txn(|space| {
            ended.iter().try_for_each(|e| {
                engine::remove_session_records(space, e.id, e.ephemeral_keys.iter().map(|(_, k)| k))
            })
        })?;
        ended.into_iter().for_each(EndedSession::notify);
        Ok(())
    }

    /// A write: queues `op`; when no group is being committed, commits every queued write as
    /// one group, otherwise waits for the running commit to end and checks again. Returns
    /// once `op`'s group is durable (or failed).
    fn write<R: Send + 'static>(
        &self,
        op: impl FnOnce(&mut WriteSpace<'_, '_>, &mut SessionTable, i64) -> MetaResult<R> + Send + 'static,
    ) -> MetaResult<R> {
        let (reply, result) = std::sync::mpsc::sync_channel(1);
        let mut queue = self.lock_queue()?;
        queue.waiting.push(Box::new(PendingWrite { op: Some(op), result: None, reply }));
        loop {
            // A committer replies before it clears `committing`, so when no commit runs our
            // write is either done or still queued.
            if let Ok(done) = result.try_recv() {
                return done;
            }
            if !queue.committing {
                queue.committing = true;
                let group = std::mem::take(&mut queue.waiting);
                drop(queue);
                // The turn ends when this scope does, even on an error or a panic, so the
                // writers waiting behind are never stuck.
                let _turn = CommitTurn(self);
                self.commit_group(&mut *self.lock_sessions()?, group);
                break;
            }
            queue = self
                .committed
                .wait(queue)
                .map_err(|_| MetaError::Internal("embedded store write queue lock poisoned".into()))?;
        }
        result
            .recv()
            .map_err(|_| MetaError::Internal("embedded store write dropped without a result".into()))?
    }

    /// Under the writer lock: ends expired sessions, applies `group` in one transaction,
    /// commits it durably and replies to every write in it.
    fn commit_group(&self, sessions: &mut SessionTable, mut group: Vec<Box<dyn QueuedWrite>>) {
        let now_ms = self.clock.now_ms();
        let outcome = self.finish(sessions.end_expired(now_ms)).and_then(|()| {
            self.write_txn(|space| {
                group.iter_mut().try_for_each(|write| write.apply(space, sessions, now_ms))
            })
        });
        for write in group {
            write.complete(outcome.as_ref().map(|_| ()));
        }
    }

    fn lock_queue(&self) -> MetaResult<MutexGuard<'_, WriteQueue>> {
        self.queue.lock().map_err(|_| MetaError::Internal("embedded store write queue lock poisoned".into()))
    }

    fn end_session(&self, id: SessionId) -> MetaResult<bool> {
        let mut sessions = self.lock_sessions()?;
        match sessions.end(id) {
            Some(ended) => self.finish(vec![ended]).map(|()| true),
            None => Ok(false),
        }
    }
}

/// The embedded, durable metadata store. Cloning shares the same open file.
#[derive(Debug, Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

impl EmbeddedStore {
    /// Opens (or creates) the store file at `path`, with the system clock.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        Self::open_with_clock(path, Arc::new(SystemClock)).await
    }

    /// Opens (or creates) the store file at `path`; timestamps and session deadlines come
    /// from `clock`. Removes the ephemeral records a previous process left, and checks every
    /// stored record on the way (the file is read once, in full).
    pub async fn open_with_clock(path: impl AsRef<Path>, clock: Arc<dyn Clock>) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        let task_path = path.clone();
        tokio::task::spawn_blocking(move || Self::open_blocking(task_path, clock))
            .await
            .map_err(|e| OpenError::Io { path, detail: format!("open task failed: {e}") })?
    }

    fn open_blocking(path: PathBuf, clock: Arc<dyn Clock>) -> Result<Self, OpenError> {
        let db = Database::create(&path).map_err(|e| classify_open_error(&path, e))?;
        let corrupt = |detail: String| OpenError::Corrupt { path: path.clone(), detail };
        let io = |e: &dyn std::fmt::Display| OpenError::Io { path: path.clone(), detail: e.to_string() };
        let txn = db.begin_write().map_err(|e| io(&e))?;
        {
            let foreign: Vec<String> = txn
                .list_tables()
                .map_err(|e| io(&e))?
                .map(|t| t.name().to_string())
                .filter(|name| name != RECORDS.name() && name != META.name())
                .collect();
            if !foreign.is_empty() {
                return Err(corrupt(format!(
                    "a redb file with tables {foreign:?}, not a Lakestream metadata store"
                )));
            }
            let mut meta = txn.open_table(META).map_err(|e| corrupt(e.to_string()))?;
            let mut records = txn.open_table(RECORDS).map_err(|e| corrupt(e.to_string()))?;
            let marker = meta.get(FORMAT_KEY).map_err(|e| io(&e))?.map(|v| v.value().to_vec());
            match marker {
                Some(marker) if marker == FORMAT_MARKER => {}
                Some(other) => {
                    return Err(corrupt(format!(
                        "format marker {:?}, expected {:?}",
                        String::from_utf8_lossy(&other),
                        String::from_utf8_lossy(FORMAT_MARKER)
                    )));
                }
                None if records.is_empty().map_err(|e| io(&e))? => {
                    meta.insert(FORMAT_KEY, FORMAT_MARKER).map_err(|e| io(&e))?;
                }
                None => return Err(corrupt("records without a format marker".into())),
            }
            read_last_version(&meta).map_err(corrupt)?;
            // Sessions do not survive the process: drop every ephemeral record, checking
            // every record (and key) on the way.
            let mut ephemeral = Vec::new();
            for entry in records.iter().map_err(|e| io(&e))? {
                let (key, value) = entry.map_err(|e| io(&e))?;
                let name = key_order::decode(key.value()).map_err(|e| corrupt(e.to_string()))?;
                let record = decode_record(value.value())
                    .map_err(|d| corrupt(format!("record under {name:?}: {d}")))?;
                if record.session.is_some() {
                    ephemeral.push(key.value().to_vec());
                }
            }
            for key in &ephemeral {
                records.remove(key.as_slice()).map_err(|e| io(&e))?;
            }
            if !ephemeral.is_empty() {
                tracing::info!(path = %path.display(), count = ephemeral.len(), "removed ephemeral records of a previous process");
            }
        }
        txn.commit().map_err(|e| io(&e))?;
        let inner = Inner {
            db,
            path,
            clock,
            sessions: Mutex::new(SessionTable::default()),
            queue: Mutex::new(WriteQueue::default()),
            committed: Condvar::new(),
        };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Ends the session with this id now, as if it expired: its ephemeral records are removed
    /// and its `ended` signal fires. Returns whether it was live.
    pub async fn expire_session(&self, session_id: &str) -> MetaResult<bool> {
        let Some(id) = sessions::parse_session_id(session_id) else { return Ok(false) };
        self.blocking(move |inner| inner.end_session(id)).await
    }

    /// Ends every session and closes the file. Clones of this handle must be dropped too
    /// before the file can be opened again.
    pub async fn close(self) -> MetaResult<()> {
        self.blocking(|inner| {
            let mut sessions = inner.lock_sessions()?;
            let ended = sessions.end_all();
            inner.finish(ended)
        })
        .await
    }

    async fn blocking<R: Send + 'static>(
        &self,
        op: impl FnOnce(&Inner) -> MetaResult<R> + Send + 'static,
    ) -> MetaResult<R> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || op(&inner))
            .await
            .map_err(|e| MetaError::Internal(format!("embedded store task failed: {e}")))?
    }
}

fn classify_open_error(path: &Path, error: DatabaseError) -> OpenError {
    let path = path.to_path_buf();
    match error {
        DatabaseError::DatabaseAlreadyOpen => OpenError::Locked { path },
        DatabaseError::Storage(StorageError::Corrupted(detail)) => OpenError::Corrupt { path, detail },
        // redb reports a file that is not a redb database as invalid data.
        DatabaseError::Storage(StorageError::Io(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
            OpenError::Corrupt { path, detail: e.to_string() }
        }
        DatabaseError::UpgradeRequired(version) => OpenError::Corrupt {
            path,
            detail: format!("redb file format version {version} needs an upgrade"),
        },
        other => OpenError::Io { path, detail: other.to_string() },
    }
}

#[async_trait]
impl MetaStore for EmbeddedStore {
    async fn get_cmp(&self, _partition: &str, key: &str, cmp: Comparison) -> MetaResult<Option<Record>> {
        let key = key.to_string();
        self.blocking(move |inner| inner.read(|space| engine::lookup(space, &key, cmp))).await
    }

    async fn put(
        &self,
        _partition: &str,
        key: &str,
        value: Bytes,
        condition: PutCondition,
    ) -> MetaResult<WriteResult> {
        let key = key.to_string();
        self.blocking(move |inner| {
            inner.write(move |space, _, now_ms| engine::put(space, &key, value, condition, now_ms, None))
        })
        .await
    }

    async fn delete(&self, _partition: &str, key: &str) -> MetaResult<bool> {
        let key = key.to_string();
        self.blocking(move |inner| inner.write(move |space, _, _| engine::delete(space, &key))).await
    }

    async fn delete_if_version(&self, _partition: &str, key: &str, version: Version) -> MetaResult<()> {
        let key = key.to_string();
        self.blocking(move |inner| {
            inner.write(move |space, _, _| engine::delete_if_version(space, &key, version))
        })
        .await
    }

    async fn delete_range(&self, _partition: &str, start: &str, end: &str) -> MetaResult<()> {
        let (start, end) = (start.to_string(), end.to_string());
        self.blocking(move |inner| {
            inner.write(move |space, _, _| engine::delete_range(space, &start, &end).map(|_| ()))
        })
        .await
    }

    async fn sequenced_put(
        &self,
        _partition: &str,
        prefix: &str,
        deltas: &[u64],
        value: Bytes,
    ) -> MetaResult<WriteResult> {
        let (prefix, deltas) = (prefix.to_string(), deltas.to_vec());
        self.blocking(move |inner| {
            inner.write(move |space, _, now_ms| engine::sequenced_put(space, &prefix, &deltas, value, now_ms))
        })
        .await
    }

    async fn list(&self, _partition: &str, start: &str, end: &str) -> MetaResult<Vec<String>> {
        let (start, end) = (start.to_string(), end.to_string());
        let records =
            self.blocking(move |inner| inner.read(|space| engine::scan(space, &start, &end, None))).await?;
        Ok(records.into_iter().map(|r| r.key).collect())
    }

    async fn scan(
        &self,
        _partition: &str,
        start: &str,
        end: &str,
        limit: Option<usize>,
    ) -> MetaResult<Vec<Record>> {
        let (start, end) = (start.to_string(), end.to_string());
        self.blocking(move |inner| inner.read(|space| engine::scan(space, &start, &end, limit))).await
    }

    async fn open_session(&self, timeout: Duration) -> MetaResult<Arc<dyn Session>> {
        let timeout_ms = sessions::validate_timeout(timeout)?;
        let (id, ended) = self.blocking(move |inner| Ok(inner.lock_sessions()?.open(timeout_ms))).await?;
        Ok(Arc::new(EmbeddedSession { id, store: self.clone(), ended }))
    }
}

/// A session of an [`EmbeddedStore`]; it lives in memory and ends with the process.
#[derive(Debug)]
struct EmbeddedSession {
    id: SessionId,
    store: EmbeddedStore,
    ended: watch::Receiver<bool>,
}

#[async_trait]
impl Session for EmbeddedSession {
    fn id(&self) -> String {
        self.id.to_string()
    }

    async fn create_ephemeral(&self, _partition: &str, key: &str, value: Bytes) -> MetaResult<WriteResult> {
        let (id, key) = (self.id, key.to_string());
        self.store
            .blocking(move |inner| {
                inner.write(move |space, sessions, now_ms| {
                    sessions.require_live(id)?;
                    let written = engine::put(space, &key, value, PutCondition::IfAbsent, now_ms, Some(id))?;
                    sessions.bind(id, (0, key_order::encode(&key)?));
                    Ok(written)
                })
            })
            .await
    }

    fn ended(&self) -> watch::Receiver<bool> {
        self.ended.clone()
    }

    async fn close(&self) -> MetaResult<()> {
        let id = self.id;
        self.store.blocking(move |inner| inner.end_session(id).map(|_| ())).await
    }
}

impl Drop for EmbeddedSession {
    fn drop(&mut self) {
        // The client is gone: heartbeats stop, and the session expires after its timeout.
        if let Ok(mut sessions) = self.store.inner.sessions.lock() {
            sessions.stop_heartbeats(self.id, self.store.inner.clock.now_ms());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lakestream_format::ManualClock;

    type Outcome = MetaResult<WriteResult>;
    type TestWrite = Box<dyn FnOnce(&mut WriteSpace<'_, '_>, &mut SessionTable, i64) -> Outcome + Send>;

    fn open_store(dir: &tempfile::TempDir) -> Arc<Inner> {
        let clock = Arc::new(ManualClock::new(1_000));
        EmbeddedStore::open_blocking(dir.path().join("meta.redb"), clock).expect("open").inner
    }

    fn spawn_write(
        inner: &Arc<Inner>,
        op: impl FnOnce(&mut WriteSpace<'_, '_>, &mut SessionTable, i64) -> Outcome + Send + 'static,
    ) -> std::thread::JoinHandle<Outcome> {
        let inner = Arc::clone(inner);
        std::thread::spawn(move || inner.write(op))
    }

    /// Waits until `ready` holds for the write queue (bounded, so a bug fails the test).
    fn wait_for_queue(inner: &Inner, ready: impl Fn(&WriteQueue) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !ready(&inner.lock_queue().unwrap()) {
            assert!(std::time::Instant::now() < deadline, "write queue never got ready");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Holds the writer lock while one write starts committing and `writes` more queue up
    /// behind it, then lets them all run. Returns the outcomes of the queued writes and the
    /// number of groups committed meanwhile.
    fn run_queued(inner: &Arc<Inner>, writes: Vec<TestWrite>) -> (Vec<Outcome>, u64) {
        let groups_before = inner.lock_queue().unwrap().groups;
        let held = inner.lock_sessions().unwrap();
        let first = spawn_write(inner, |space, _, now| {
            engine::put(space, "first", Bytes::new(), PutCondition::None, now, None)
        });
        wait_for_queue(inner, |q| q.committing);
        let count = writes.len();
        let handles: Vec<_> = writes.into_iter().map(|op| spawn_write(inner, op)).collect();
        wait_for_queue(inner, |q| q.waiting.len() == count);
        drop(held);
        first.join().unwrap().expect("the first write commits alone");
        let outcomes = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (outcomes, inner.lock_queue().unwrap().groups - groups_before)
    }

    #[test]
    fn concurrent_writes_share_one_commit_and_a_refused_one_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let inner = open_store(&dir);
        inner
            .write(|space, _, now| engine::put(space, "taken", Bytes::new(), PutCondition::None, now, None))
            .unwrap();
        let mut writes: Vec<TestWrite> = (0..8)
            .map(|_| {
                Box::new(|space: &mut WriteSpace<'_, '_>, _: &mut SessionTable, now| {
                    engine::sequenced_put(space, "p", &[1], Bytes::from_static(b"v"), now)
                }) as Box<_>
            })
            .collect();
        writes.push(Box::new(|space, _, now| {
            engine::put(space, "taken", Bytes::new(), PutCondition::IfAbsent, now, None)
        }));
        let (mut outcomes, groups) = run_queued(&inner, writes);
        assert_eq!(groups, 2, "the first write's group, then one group for the nine queued behind it");
        let refused = outcomes.pop().unwrap();
        assert!(matches!(refused, Err(MetaError::KeyExists { .. })), "{refused:?}");
        let mut written: Vec<WriteResult> = outcomes.into_iter().map(|o| o.expect("sequenced put")).collect();
        written.sort_by_key(|w| w.version);
        // One after another inside the group: consecutive counters in version order.
        let keys: Vec<String> = written.iter().map(|w| w.key.clone()).collect();
        let expected: Vec<String> = (1..=8).map(|i| format!("p-{i:020}")).collect();
        assert_eq!(keys, expected);
        let stored = inner.read(|space| engine::scan(space, "p-", "p.", None)).unwrap();
        assert_eq!(stored.len(), 8, "every write of the group is durable");
    }

    #[test]
    fn a_write_failing_after_changes_fails_its_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let inner = open_store(&dir);
        let writes: Vec<TestWrite> = vec![
            Box::new(|space, _, now| engine::put(space, "a", Bytes::new(), PutCondition::None, now, None)),
            Box::new(|space, _, now| {
                engine::put(space, "b", Bytes::new(), PutCondition::None, now, None)?;
                Err(MetaError::InvalidRequest("fails after writing".into()))
            }),
            Box::new(|space, _, now| engine::put(space, "c", Bytes::new(), PutCondition::None, now, None)),
        ];
        let (outcomes, groups) = run_queued(&inner, writes);
        assert_eq!(groups, 2);
        assert!(matches!(&outcomes[1], Err(MetaError::InvalidRequest(m)) if m.contains("after writing")));
        for other in [&outcomes[0], &outcomes[2]] {
            assert!(
                matches!(other, Err(MetaError::Internal(m)) if m.contains("its group failed")),
                "{other:?}"
            );
        }
        for key in ["a", "b", "c"] {
            let found = inner.read(|space| engine::lookup(space, key, Comparison::Equal)).unwrap();
            assert!(found.is_none(), "{key} was written by a failed group");
        }
    }

    #[test]
    fn record_values_round_trip_and_bad_ones_are_named() {
        let record = StoredRecord {
            value: Bytes::from_static(b"v"),
            version: 7,
            created_ms: 1,
            modified_ms: 2,
            session: Some(3),
        };
        let bytes = encode_record(&record);
        assert_eq!(bytes.len(), RECORD_HEADER_LEN + 1);
        assert_eq!(decode_record(&bytes).unwrap(), record);
        assert!(decode_record(&bytes[..10]).unwrap_err().contains("shorter"));
        let mut other_format = bytes.clone();
        other_format[0] = 9;
        assert!(decode_record(&other_format).unwrap_err().contains("record format 9"));
    }
}
