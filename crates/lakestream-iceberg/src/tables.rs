//! [`Tables`]: a table per stream, and the commit protocol that appends each compacted offset
//! range of a log exactly once.
//!
//! **State.** For every log it holds, a table carries the table property
//! `lakestream.next-offset.{log ID}`: the first offset of that log not yet in the table (the
//! log's *watermark*). A commit appends data files and raises the watermarks of the logs it
//! covers in one atomic table update, and records the ranges it covers in its snapshot
//! summary (`lakestream.ranges`). Table properties live in every metadata version, so the
//! watermarks survive snapshot expiry and other engines' commits (compaction rewrites).
//!
//! **Protocol.** [`Tables::stage`] writes a range's data files (nothing refers to them
//! yet); [`Tables::commit`] then, in each attempt: loads the table; keeps only the ranges
//! that start exactly at their log's watermark (or whose log has none); and commits them with
//! a fast append whose requirement is the snapshot it read, through a catalog that never
//! re-applies it to a newer table state. A conflict or an error leads to a fresh attempt,
//! which decides again from the table. So:
//!
//! - a range is in the table at most once: after a commit whose outcome was unknown, the next
//!   attempt (or pass) finds the watermark at the range's end and commits nothing;
//! - a crash between writing the files and committing leaves files no snapshot refers to;
//!   the next pass reads the same range again from the unchanged watermark and commits new
//!   files; a late commit of the crashed attempt's files is refused, its range no longer
//!   starting at the watermark;
//! - two committers of one table (compactors holding different logs of a stream) never lose
//!   each other's watermarks: a commit prepared from an old state is refused by the catalog.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use iceberg::spec::DataFile;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableCreation, TableIdent};
use lakestream_format::Offset;
use lakestream_format::retry::{Backoff, BackoffPolicy};
use lakestream_objstore::ObjectStore;
use serde::Serialize;

use crate::catalog::{self, Pinned};
use crate::config::TablesConfig;
use crate::error::{TablesError, TablesResult};
use crate::files::{self, FileOptions, LogRange};
use crate::schema::Layout;
use crate::storage::ObjectStoreStorage;

/// The table property prefix of the logs' watermarks: `lakestream.next-offset.{log ID}`.
pub const NEXT_OFFSET_PROPERTY: &str = "lakestream.next-offset.";
/// The snapshot summary property listing the ranges a commit covers (JSON).
pub const RANGES_SUMMARY: &str = "lakestream.ranges";
/// The table property naming the stream (`{namespace}/{stream}`).
pub const STREAM_PROPERTY: &str = "lakestream.stream";
/// The table property naming the row layout (`kafka-records` or `entries`).
pub const LAYOUT_PROPERTY: &str = "lakestream.layout";

/// Fresh unique names for data files (injected: library code takes no randomness itself).
pub type TokenFn = Arc<dyn Fn() -> String + Send + Sync>;

/// A stream, as a table: Iceberg namespace = the stream's namespace, table = its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamRef {
    /// The namespace.
    pub namespace: String,
    /// The stream's name.
    pub stream: String,
}

impl StreamRef {
    /// `namespace/stream`.
    pub fn new(namespace: impl Into<String>, stream: impl Into<String>) -> StreamRef {
        StreamRef { namespace: namespace.into(), stream: stream.into() }
    }

    /// The table's identifier.
    pub fn ident(&self) -> TableIdent {
        TableIdent::new(NamespaceIdent::new(self.namespace.clone()), self.stream.clone())
    }

    /// The stream's row layout.
    pub fn layout(&self) -> Layout {
        Layout::of(&self.namespace, &self.stream)
    }
}

impl std::fmt::Display for StreamRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.stream)
    }
}

/// One range whose data files are written but not committed.
#[derive(Debug, Clone)]
pub struct StagedRange {
    /// The log.
    pub log_id: u64,
    /// Its stream partition.
    pub partition: u32,
    /// The range's first offset (the watermark it was read from).
    pub start: Offset,
    /// The offset after the range.
    pub end: Offset,
    /// Rows in its files.
    pub rows: u64,
    /// Its data files.
    pub files: Vec<DataFile>,
    /// Kafka entries that did not decode (one row each).
    pub undecodable_entries: u64,
}

/// Ranges of one table with their data files written: what [`Tables::commit`] commits.
#[derive(Debug, Clone)]
pub struct StagedAppend {
    /// The stream.
    pub stream: StreamRef,
    /// Its ranges, at most one per log.
    pub ranges: Vec<StagedRange>,
}

impl StagedAppend {
    /// Every data file's location.
    pub fn file_paths(&self) -> Vec<String> {
        self.ranges.iter().flat_map(|r| r.files.iter().map(|f| f.file_path().to_owned())).collect()
    }
}

/// A range and what happened to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RangeOutcome {
    /// The log.
    pub log_id: u64,
    /// The first offset.
    pub start: Offset,
    /// The offset after the range.
    pub end: Offset,
    /// Rows.
    pub rows: u64,
    /// Data files.
    pub files: usize,
}

/// What [`Tables::commit`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitReport {
    /// The snapshot committed, if any.
    pub snapshot_id: Option<i64>,
    /// Ranges committed by this call.
    pub committed: Vec<RangeOutcome>,
    /// Ranges the table already covered (its watermark at or past their end): a retry after
    /// a commit whose outcome was unknown, or another committer. Nothing was added.
    pub already_committed: Vec<RangeOutcome>,
    /// Ranges that no longer start at their log's watermark (a late commit of a superseded
    /// attempt): refused; their files are referenced by no snapshot.
    pub stale: Vec<RangeOutcome>,
    /// Commit attempts made (1 when the first succeeded).
    pub attempts: u32,
}

/// Tables of streams in one catalog, their files in the compacted root.
#[derive(Clone)]
pub struct Tables {
    pub(crate) catalog: Arc<dyn Catalog>,
    pub(crate) storage: ObjectStoreStorage,
    /// `{root_uri}/{prefix}`: where every table's directory lies.
    pub(crate) warehouse: String,
    options: FileOptions,
    pub(crate) attempts: u32,
    pub(crate) tokens: TokenFn,
    /// Commits that no `Transaction` action makes (trims).
    pub(crate) swap: catalog::MetadataSwap,
    pub(crate) maintenance: crate::maintenance::MaintenanceOptions,
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tables")
            .field("warehouse", &self.warehouse)
            .field("attempts", &self.attempts)
            .finish()
    }
}

/// The pauses between commit (and maintenance) attempts: the project's one retry policy
/// (`lakestream_format::retry`, full jitter), below 200 ms before the second attempt,
/// doubling to 3.2 s — the bounds are the fixed pauses this crate used before, so contending
/// committers spread out instead of retrying in lockstep. Attempts are bounded by
/// `tables.commit_attempts`.
const COMMIT_BACKOFF: BackoffPolicy =
    BackoffPolicy::unbounded(Duration::from_millis(200), Duration::from_millis(3200));

/// The pause before attempt `attempt` (2 for the first retry), drawn from the process's
/// jitter.
pub(crate) fn backoff(attempt: u32) -> Duration {
    Backoff::process(COMMIT_BACKOFF).delay(attempt.saturating_sub(2))
}

impl Tables {
    /// Validates `config` and connects its catalog. Tables live in `store` (the compacted
    /// root) below `config.prefix`, which readers reach as `{root_uri}/{prefix}`. Errors name
    /// the `tables.…` key at fault (an unknown catalog, an unreachable database).
    pub async fn connect(
        config: &TablesConfig,
        store: Arc<dyn ObjectStore>,
        root_uri: &str,
        tokens: TokenFn,
    ) -> TablesResult<Tables> {
        config.validate(true)?;
        let root_uri = config.root_uri.as_deref().unwrap_or(root_uri).trim_end_matches('/').to_owned();
        let storage = ObjectStoreStorage::new(root_uri.clone(), store);
        let warehouse = format!("{root_uri}/{}", config.prefix);
        let catalog = catalog::connect(config, storage.clone(), &warehouse).await?;
        let swap = catalog::MetadataSwap::connect(config).await?;
        Ok(Tables {
            swap,
            maintenance: crate::maintenance::MaintenanceOptions::of(config),
            catalog,
            storage,
            warehouse,
            options: FileOptions {
                target_file_bytes: config.target_file_bytes,
                row_group_bytes: config.row_group_bytes,
                codec: config.codec()?,
            },
            attempts: config.commit_attempts,
            tokens,
        })
    }

    /// The catalog (for readers in tests and tools).
    pub fn catalog(&self) -> &Arc<dyn Catalog> {
        &self.catalog
    }

    /// The location of a stream's table: `{root_uri}/{prefix}/{namespace}/{stream}`.
    pub fn location(&self, stream: &StreamRef) -> String {
        format!("{}/{}/{}", self.warehouse, stream.namespace, stream.stream)
    }

    /// The stream's table, created (with its namespace) when missing. Checks that the
    /// table's schema is the layout's, field ids included.
    pub async fn ensure_table(&self, stream: &StreamRef) -> TablesResult<Table> {
        let ident = stream.ident();
        let table = match self.catalog.load_table(&ident).await {
            Ok(table) => table,
            Err(e) if e.kind() == ErrorKind::TableNotFound || e.kind() == ErrorKind::NamespaceNotFound => {
                self.create_table(stream).await?
            }
            Err(e) => return Err(TablesError::catalog(format!("loading {stream}"))(e)),
        };
        let expected = stream.layout().iceberg_schema()?;
        if table.metadata().current_schema().as_struct() != expected.as_struct() {
            return Err(TablesError::InvalidRange {
                table: stream.to_string(),
                message: format!(
                    "the table's schema is not the {} layout's (changed outside Lakestream?)",
                    stream.layout().name()
                ),
            });
        }
        Ok(table)
    }

    async fn create_table(&self, stream: &StreamRef) -> TablesResult<Table> {
        let ident = stream.ident();
        let namespace = ident.namespace().clone();
        let exists = self
            .catalog
            .namespace_exists(&namespace)
            .await
            .map_err(TablesError::catalog(format!("namespace {}", stream.namespace)))?;
        if !exists {
            match self.catalog.create_namespace(&namespace, HashMap::new()).await {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::NamespaceAlreadyExists => {}
                // Another process (or task) created it between the check and the insert: the
                // SQL catalog reports the unique-key violation as an unexpected error.
                Err(_) if self.catalog.namespace_exists(&namespace).await.unwrap_or(false) => {}
                Err(e) => {
                    return Err(TablesError::catalog(format!("creating namespace {}", stream.namespace))(e));
                }
            }
        }
        let layout = stream.layout();
        let creation = TableCreation::builder()
            .name(stream.stream.clone())
            .location(self.location(stream))
            .schema(layout.iceberg_schema()?)
            .partition_spec(layout.partition_spec()?)
            .properties([
                (STREAM_PROPERTY.to_owned(), stream.to_string()),
                (LAYOUT_PROPERTY.to_owned(), layout.name().to_owned()),
                ("write.format.default".to_owned(), "parquet".to_owned()),
            ])
            .build();
        match self.catalog.create_table(&namespace, creation).await {
            Ok(table) => {
                tracing::info!(%stream, location = %self.location(stream), "created the stream's Iceberg table");
                Ok(table)
            }
            // Another committer created it first (the SQL catalog may report the unique-key
            // violation of a concurrent insert as an unexpected error).
            Err(e)
                if e.kind() == ErrorKind::TableAlreadyExists
                    || self.catalog.table_exists(&ident).await.unwrap_or(false) =>
            {
                self.catalog
                    .load_table(&ident)
                    .await
                    .map_err(TablesError::catalog(format!("loading {stream}")))
            }
            Err(e) => Err(TablesError::catalog(format!("creating {stream}"))(e)),
        }
    }

    /// Every log's watermark in the stream's table (the first offset not in it); a log
    /// missing from the map has nothing in the table. Creates the table when missing.
    pub async fn watermarks(&self, stream: &StreamRef) -> TablesResult<BTreeMap<u64, Offset>> {
        Ok(watermarks_of(&self.ensure_table(stream).await?))
    }

    /// Writes the data files of `ranges` (at most one per log) into the stream's table
    /// directory, committing nothing. A range whose entries are all gone (trimmed) stages no
    /// file but still moves its log's watermark when committed.
    pub async fn stage(&self, stream: &StreamRef, ranges: Vec<LogRange>) -> TablesResult<StagedAppend> {
        let table = self.ensure_table(stream).await?;
        let spec_id = table.metadata().default_partition_spec_id();
        let layout = stream.layout();
        let mut seen = std::collections::BTreeSet::new();
        let mut staged = Vec::with_capacity(ranges.len());
        for range in ranges {
            if !seen.insert(range.log_id) || range.end <= range.start {
                return Err(TablesError::InvalidRange {
                    table: stream.to_string(),
                    message: format!(
                        "log {} range [{}, {}): empty, or a second range of the log in one append",
                        range.log_id, range.start, range.end
                    ),
                });
            }
            let options = self.options;
            let (range, encoded) = tokio::task::spawn_blocking(move || {
                let encoded = files::encode_range(layout, &range, options);
                (range, encoded)
            })
            .await
            .map_err(|e| TablesError::Encode { table: stream.to_string(), message: e.to_string() })?;
            let encoded =
                encoded.map_err(|message| TablesError::Encode { table: stream.to_string(), message })?;
            let mut data_files = Vec::with_capacity(encoded.files.len());
            for file in &encoded.files {
                let location = format!(
                    "{}/data/timestamp_day={}/{}-{}-{}.parquet",
                    self.location(stream),
                    files::day_name(file.day),
                    range.log_id,
                    range.start,
                    (self.tokens)()
                );
                let path = self
                    .storage
                    .object_path(&location)
                    .map_err(|e| TablesError::Encode { table: stream.to_string(), message: e.to_string() })?;
                let store = self.storage_store()?;
                store.put(&path, file.bytes.clone()).await.map_err(|source| TablesError::Objects {
                    path: location.clone(),
                    source: Box::new(source),
                })?;
                let data_file = file
                    .data_file(location, spec_id, layout)
                    .map_err(|message| TablesError::Encode { table: stream.to_string(), message })?;
                data_files.push(data_file);
            }
            staged.push(StagedRange {
                log_id: range.log_id,
                partition: range.partition,
                start: range.start,
                end: range.end,
                rows: encoded.rows,
                files: data_files,
                undecodable_entries: encoded.undecodable_entries,
            });
        }
        Ok(StagedAppend { stream: stream.clone(), ranges: staged })
    }

    pub(crate) fn storage_store(&self) -> TablesResult<&Arc<dyn ObjectStore>> {
        self.storage.object_store().ok_or_else(|| TablesError::Encode {
            table: self.warehouse.clone(),
            message: "the table storage has no object store".into(),
        })
    }

    /// Commits staged ranges by the protocol of this module: each range at most once, only
    /// while it starts at its log's watermark. Retries conflicts and catalog errors up to
    /// `commit_attempts` times, deciding again from the table each time; the last error is
    /// returned when every attempt failed (the files stay unreferenced; the caller reads the
    /// range again next pass).
    pub async fn commit(&self, staged: &StagedAppend) -> TablesResult<CommitReport> {
        let ident = staged.stream.ident();
        let mut report = CommitReport::default();
        let mut last_error = None;
        for attempt in 1..=self.attempts {
            report.attempts = attempt;
            if attempt > 1 {
                tokio::time::sleep(backoff(attempt)).await;
            }
            let table = match self.catalog.load_table(&ident).await {
                Ok(table) => table,
                Err(e) => {
                    tracing::warn!(stream = %staged.stream, attempt, error = %e, "loading the table for a commit failed");
                    last_error = Some(TablesError::catalog(format!("loading {}", staged.stream))(e));
                    continue;
                }
            };
            let marks = watermarks_of(&table);
            let (mut take, mut already, mut stale) = (Vec::new(), Vec::new(), Vec::new());
            for range in &staged.ranges {
                match marks.get(&range.log_id) {
                    None => take.push(range),
                    Some(&w) if w == range.start => take.push(range),
                    Some(&w) if w >= range.end => already.push(outcome(range)),
                    Some(_) => stale.push(outcome(range)),
                }
            }
            report.already_committed = already;
            report.stale = stale;
            if take.is_empty() {
                return Ok(report);
            }
            let result = self.commit_once(&table, &take).await;
            match result {
                Ok(snapshot_id) => {
                    report.snapshot_id = snapshot_id;
                    report.committed = take.into_iter().map(outcome).collect();
                    return Ok(report);
                }
                Err(e) => {
                    tracing::warn!(stream = %staged.stream, attempt, error = %e, "table commit failed; deciding again from the table");
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| TablesError::InvalidRange {
            table: staged.stream.to_string(),
            message: "no commit attempt was made".into(),
        }))
    }

    /// One commit attempt of `ranges` onto exactly `table`'s state.
    async fn commit_once(&self, table: &Table, ranges: &[&StagedRange]) -> TablesResult<Option<i64>> {
        let ident = table.identifier().clone();
        let summary: Vec<SummaryRange> = ranges
            .iter()
            .map(|r| SummaryRange {
                log_id: r.log_id,
                partition: r.partition,
                start: r.start,
                end: r.end,
                rows: r.rows,
            })
            .collect();
        let summary =
            HashMap::from([(RANGES_SUMMARY.to_owned(), serde_json::to_string(&summary).unwrap_or_default())]);
        let files: Vec<DataFile> = ranges.iter().flat_map(|r| r.files.iter().cloned()).collect();
        let tx = Transaction::new(table);
        let append = tx
            .fast_append()
            // File names are unique (a token each): no need to read every manifest.
            .with_check_duplicate(false)
            .add_data_files(files)
            .set_snapshot_properties(summary);
        let tx = append.apply(tx).map_err(TablesError::catalog(format!("appending to {ident}")))?;
        let mut properties = tx.update_table_properties();
        for r in ranges {
            properties = properties.set(format!("{NEXT_OFFSET_PROPERTY}{}", r.log_id), r.end.to_string());
        }
        let tx = properties.apply(tx).map_err(TablesError::catalog(format!("watermarks of {ident}")))?;
        let pinned = Pinned { inner: self.catalog.as_ref(), table: table.clone() };
        let committed =
            tx.commit(&pinned).await.map_err(TablesError::catalog(format!("committing to {ident}")))?;
        Ok(committed.metadata().current_snapshot_id())
    }

    /// [`Tables::stage`] then [`Tables::commit`]; ranges the table already covers (their
    /// log's watermark at or past their end) are reported without writing files.
    pub async fn append(&self, stream: &StreamRef, ranges: Vec<LogRange>) -> TablesResult<CommitReport> {
        let marks = self.watermarks(stream).await?;
        let (covered, ranges): (Vec<LogRange>, Vec<LogRange>) =
            ranges.into_iter().partition(|r| marks.get(&r.log_id).is_some_and(|w| *w >= r.end));
        let staged = self.stage(stream, ranges).await?;
        let mut report =
            if staged.ranges.is_empty() { CommitReport::default() } else { self.commit(&staged).await? };
        report.already_committed.extend(covered.iter().map(|r| RangeOutcome {
            log_id: r.log_id,
            start: r.start,
            end: r.end,
            rows: 0,
            files: 0,
        }));
        Ok(report)
    }
}

#[derive(Serialize)]
struct SummaryRange {
    log_id: u64,
    partition: u32,
    start: Offset,
    end: Offset,
    rows: u64,
}

fn outcome(range: &StagedRange) -> RangeOutcome {
    RangeOutcome {
        log_id: range.log_id,
        start: range.start,
        end: range.end,
        rows: range.rows,
        files: range.files.len(),
    }
}

/// The watermarks a table's properties hold.
pub fn watermarks_of(table: &Table) -> BTreeMap<u64, Offset> {
    table
        .metadata()
        .properties()
        .iter()
        .filter_map(|(k, v)| {
            let log = k.strip_prefix(NEXT_OFFSET_PROPERTY)?.parse().ok()?;
            Some((log, v.parse().ok()?))
        })
        .collect()
}
