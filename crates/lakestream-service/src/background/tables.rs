//! Streams as Iceberg tables, in the compactor role (`[tables]`, `docs/tables.md`).
//!
//! The committer follows compaction: for each table stream, each log's compacted offsets
//! (below its compaction cursor, which C5 raises only after the range's C3 and C4) that the
//! table does not hold yet (from its watermark) are read through a reader, which serves them
//! from the compacted files, and appended to the table by `lakestream_iceberg`'s protocol.
//! It never reads above the cursor, so a table never shows data the log's compacted form
//! does not hold.
//!
//! It runs beside the compaction loop, never in it: each compacted range wakes it
//! (`Progress::RangeCompacted`, after C3–C5), and it also passes every `tables.interval`.
//! A failed commit is counted (`lakestream_table_commit_failures_total`), logged, and
//! retried on the next pass from the table's state; compaction never waits for it. Each log
//! is committed under an ephemeral claim (`/lakestream-table-claims/{L}` in P(L), through the
//! compactor's session), so several compactor processes do not read the same range twice.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use lakestream_catalog::Stream;
use lakestream_compactor::Compactor;
use lakestream_format::{Entry, LogId, LogRef, Offset, keys};
use lakestream_iceberg::{LogRange, StreamRef, Tables, TablesConfig, TablesError};
use lakestream_meta::lease::{RandomTokens, TokenSource};
use lakestream_meta::{MetaError, MetaStore};
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps};
use tokio::sync::{Notify, watch};

use crate::config::{InvalidSetting, ObjectStoreConfig};
use crate::metrics::Metrics;
use crate::stack::Stack;

/// The committer's parts, built at start when the process serves the compactor role and a
/// catalog is configured.
#[derive(Debug, Clone)]
pub struct TablesRole {
    /// The tables.
    pub tables: Tables,
    /// The settings.
    pub config: TablesConfig,
    /// Woken by each compacted range.
    pub wake: Arc<Notify>,
}

/// The prefix of the committer's per-log claims, in P(L).
pub const CLAIM_PREFIX: &str = "/lakestream-table-claims/";

/// The URI under which readers reach the compacted root, derived from its configuration
/// (`tables.root_uri` overrides it); `None` when it cannot be derived.
pub fn root_uri_of(compacted: &ObjectStoreConfig) -> Option<String> {
    let join = |scheme_root: String, prefix: Option<&str>| match prefix.filter(|p| !p.is_empty()) {
        Some(p) => format!("{scheme_root}/{}", p.trim_matches('/')),
        None => scheme_root,
    };
    match compacted {
        ObjectStoreConfig::Local { dir, root } => {
            let dir = std::path::absolute(dir).ok()?;
            Some(format!("file://{}/{}", dir.display(), root.trim_matches('/')))
        }
        ObjectStoreConfig::S3(s3) => Some(join(format!("s3://{}", s3.bucket), s3.prefix.as_deref())),
        ObjectStoreConfig::Gcs(gcs) => match &gcs.url {
            Some(url) => Some(url.trim_end_matches('/').to_owned()),
            None => Some(join(format!("gs://{}", gcs.bucket), gcs.prefix.as_deref())),
        },
        ObjectStoreConfig::Azure(az) => {
            let account = az.account.as_deref()?;
            Some(join(
                format!("abfss://{}@{account}.dfs.core.windows.net", az.container),
                az.prefix.as_deref(),
            ))
        }
    }
}

fn config_error(e: TablesError) -> InvalidSetting {
    match e {
        TablesError::Config { key, message } => InvalidSetting { key, message },
        other => InvalidSetting { key: "tables".into(), message: other.to_string() },
    }
}

/// Connects the tables for a compactor process: `None` when no catalog is configured and no
/// stream is a table by default. Errors name the `tables.…` key (an unknown catalog, an
/// unreachable database, a root URI that cannot be derived).
pub async fn open(
    config: &TablesConfig,
    compacted_config: &ObjectStoreConfig,
    compacted: Arc<dyn lakestream_objstore::ObjectStore>,
) -> Result<Option<TablesRole>, InvalidSetting> {
    if config.uri.is_none() && !config.all_streams() {
        return Ok(None);
    }
    config.validate(true).map_err(config_error)?;
    let root_uri = match (config.root_uri.clone(), root_uri_of(compacted_config)) {
        (Some(uri), _) | (None, Some(uri)) => uri,
        (None, None) => {
            return Err(InvalidSetting {
                key: "tables.root_uri".into(),
                message: "cannot be derived from storage.compacted (an Azure root without `account`); set it"
                    .into(),
            });
        }
    };
    let tokens: lakestream_iceberg::TokenFn = Arc::new(|| RandomTokens.new_token());
    let tables = Tables::connect(config, compacted, &root_uri, tokens).await.map_err(config_error)?;
    tracing::info!(catalog = %config.catalog, root_uri = %root_uri, default = %config.table, "Iceberg tables enabled");
    Ok(Some(TablesRole { tables, config: config.clone(), wake: Arc::new(Notify::new()) }))
}

/// The committer loop: a pass when woken or every `tables.interval`, until `stop`.
pub(crate) async fn run(
    stack: Stack,
    compactor: Compactor,
    role: TablesRole,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) {
    let reader_config = ReaderConfig {
        object_cache_bytes: 32 << 20,
        read_ahead_bytes: 8 << 20,
        ..compactor.config().reader.clone()
    };
    let deps =
        ReaderDeps { meta: stack.meta.clone(), wal: stack.wal.clone(), compacted: stack.compacted.clone() };
    let reader = match Reader::new(reader_config, deps) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "table committer not started: its reader's settings are invalid");
            return;
        }
    };
    let committer = Committer { stack, compactor, role, reader, metrics, trims_applied: Default::default() };
    let mut last_maintenance: Option<i64> = None;
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(committer.role.config.interval) => {}
            _ = committer.role.wake.notified() => {}
        }
        tokio::select! {
            _ = stop.changed() => {
                tracing::info!("stopping: table commit pass abandoned; the next start resumes it from the tables");
                return;
            }
            _ = committer.pass() => {}
        }
        let now = committer.stack.clock.now_ms();
        let interval = committer.role.config.maintenance_interval.as_millis() as i64;
        if last_maintenance.is_none_or(|last| now.saturating_sub(last) >= interval) {
            tokio::select! {
                _ = stop.changed() => return,
                _ = committer.maintenance() => {}
            }
            last_maintenance = Some(now);
        }
    }
}

struct Committer {
    stack: Stack,
    compactor: Compactor,
    role: TablesRole,
    reader: Reader,
    metrics: Arc<Metrics>,
    /// The trim markers each log's table already reflects (as far as this process knows), so
    /// that a pass whose markers did not move does not load the table for them.
    trims_applied: std::sync::Mutex<BTreeMap<u64, Offset>>,
}

impl Committer {
    async fn pass(&self) {
        let streams = match self.stack.all_streams().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "table commit pass skipped: cannot list the catalog's streams");
                return;
            }
        };
        let mut lag = 0u64;
        for stream in streams {
            let property = stream.properties.get(lakestream_iceberg::TABLE_PROPERTY).map(String::as_str);
            if !self.role.config.is_table(property) {
                continue;
            }
            match self.commit_stream(&stream).await {
                Ok(behind) => lag += behind,
                Err(e) => {
                    self.metrics.tables.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(namespace = %stream.namespace, stream = %stream.name, error = %e,
                        "table commit failed; retried on the next pass");
                }
            }
            if let Err(e) = self.trim_stream(&stream).await {
                self.metrics.tables.maintenance_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(namespace = %stream.namespace, stream = %stream.name, error = %e,
                    "trimming the stream's table failed; retried on the next pass");
            }
        }
        self.metrics.tables.lag_offsets.store(lag, Ordering::Relaxed);
    }

    /// Removes from the stream's table the files below its logs' trim markers (soft trims by
    /// clients, retention; hard trims follow the same markers).
    async fn trim_stream(&self, stream: &Stream) -> Result<(), String> {
        let mut points = BTreeMap::new();
        for &log_id in &stream.logs {
            let record = self
                .stack
                .meta
                .get(&keys::partition(log_id), &keys::trim_marker_key(log_id))
                .await
                .map_err(|e| format!("reading the trim marker of log {log_id}: {e}"))?;
            if let Some(r) = record {
                let point = keys::decode_trim_marker(&r.value)
                    .map_err(|e| format!("trim marker of log {log_id}: {e}"))?;
                if point > 0 {
                    points.insert(log_id.0, point);
                }
            }
        }
        let moved = {
            let applied = self.trims_applied.lock().unwrap_or_else(|e| e.into_inner());
            points.iter().any(|(log, point)| applied.get(log).is_none_or(|a| a < point))
        };
        if !moved {
            return Ok(());
        }
        let sref = StreamRef::new(stream.namespace.clone(), stream.name.clone());
        let report = self
            .role
            .tables
            .trim(&sref, &points, self.stack.clock.now_ms())
            .await
            .map_err(|e| e.to_string())?;
        self.metrics.tables.trimmed_files.fetch_add(report.files_removed as u64, Ordering::Relaxed);
        self.trims_applied.lock().unwrap_or_else(|e| e.into_inner()).extend(points);
        Ok(())
    }

    /// Every `maintenance_interval`: snapshot expiry and deletion of unreferenced files for
    /// each table stream, and the dropping of the tables of dropped streams.
    async fn maintenance(&self) {
        let streams = match self.stack.all_streams().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "table maintenance skipped: cannot list the catalog's streams");
                return;
            }
        };
        let m = &self.metrics.tables;
        let live: std::collections::BTreeSet<StreamRef> =
            streams.iter().map(|s| StreamRef::new(s.namespace.clone(), s.name.clone())).collect();
        for stream in &streams {
            let property = stream.properties.get(lakestream_iceberg::TABLE_PROPERTY).map(String::as_str);
            if !self.role.config.is_table(property) {
                continue;
            }
            let sref = StreamRef::new(stream.namespace.clone(), stream.name.clone());
            match self.role.tables.maintain(&sref, self.stack.clock.now_ms()).await {
                Ok(report) => {
                    m.snapshots_expired.fetch_add(report.snapshots_expired as u64, Ordering::Relaxed);
                    m.files_deleted.fetch_add(report.files_deleted() as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    m.maintenance_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(table = %sref, error = %e, "table maintenance failed; retried later");
                }
            }
        }
        // Tables whose stream was dropped (its tombstone exists) go with their files.
        let tables = match self.role.tables.list_tables().await {
            Ok(t) => t,
            Err(e) => {
                m.maintenance_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "listing the catalog's tables failed; dropped streams' tables are dropped later");
                return;
            }
        };
        for table in tables.into_iter().filter(|t| !live.contains(t)) {
            match self.stack.catalog.is_dropped(&table.namespace, &table.stream).await {
                Ok(true) => {}
                // Not a stream of this catalog, or not dropped: not ours to drop.
                Ok(false) | Err(_) => continue,
            }
            match self.role.tables.drop_table(&table).await {
                Ok(files) => {
                    m.dropped.fetch_add(1, Ordering::Relaxed);
                    m.files_deleted.fetch_add(files as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    m.maintenance_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%table, error = %e, "dropping the table of a dropped stream failed; retried later");
                }
            }
        }
    }

    /// Commits what the stream's logs compacted since their watermarks; answers how many
    /// compacted offsets are still not in the table.
    async fn commit_stream(&self, stream: &Stream) -> Result<u64, String> {
        let sref = StreamRef::new(stream.namespace.clone(), stream.name.clone());
        let tables = &self.role.tables;
        let marks = tables.watermarks(&sref).await.map_err(|e| e.to_string())?;
        let mut ranges = Vec::new();
        let mut claims = Vec::new();
        let mut behind = 0u64;
        let result = async {
            for (partition, &log_id) in stream.logs.iter().enumerate() {
                let cursor = compaction_cursor(self.stack.meta.as_ref(), log_id).await?;
                let from = marks.get(&log_id.0).copied().unwrap_or(0);
                if cursor <= from {
                    continue;
                }
                let Some(claim) = self.claim(log_id).await? else { continue };
                claims.push(claim);
                let log = LogRef { log_id, namespace: stream.namespace.clone(), stream: stream.name.clone() };
                let range = self.read_range(&log, partition as u32, from, cursor).await?;
                behind += cursor - range.end;
                ranges.push(range);
            }
            if ranges.is_empty() {
                return Ok(behind);
            }
            let staged = tables.stage(&sref, ranges).await.map_err(|e| e.to_string())?;
            let undecodable: u64 = staged.ranges.iter().map(|r| r.undecodable_entries).sum();
            let report = tables.commit(&staged).await.map_err(|e| e.to_string())?;
            let m = &self.metrics.tables;
            if report.snapshot_id.is_some() {
                m.commits.fetch_add(1, Ordering::Relaxed);
                m.undecodable_entries.fetch_add(undecodable, Ordering::Relaxed);
            }
            m.ranges.fetch_add(report.committed.len() as u64, Ordering::Relaxed);
            m.rows.fetch_add(report.committed.iter().map(|r| r.rows).sum(), Ordering::Relaxed);
            for r in &report.committed {
                tracing::info!(table = %sref, log_id = r.log_id, start = r.start, end = r.end, rows = r.rows,
                    files = r.files, "committed a range to the stream's table");
            }
            if !report.stale.is_empty() || !report.already_committed.is_empty() {
                tracing::info!(table = %sref, stale = report.stale.len(), already = report.already_committed.len(),
                    "some ranges were in the table already or superseded; nothing duplicated");
            }
            Ok(behind)
        }
        .await;
        for (log_id, key) in claims {
            if let Err(e) = self.stack.meta.delete(&keys::partition(log_id), &key).await {
                tracing::debug!(%log_id, error = %e, "releasing a table claim failed; it ends with the session");
            }
        }
        result
    }

    /// The log's table claim through the compactor's session; `None` when another process
    /// holds it.
    async fn claim(&self, log_id: LogId) -> Result<Option<(LogId, String)>, String> {
        let session = self.compactor.session().await.map_err(|e| e.to_string())?;
        let key = format!("{CLAIM_PREFIX}{}", log_id.0);
        match session.create_ephemeral(&keys::partition(log_id), &key, Bytes::from(session.id())).await {
            Ok(_) => Ok(Some((log_id, key))),
            Err(MetaError::KeyExists { .. }) => Ok(None),
            Err(e) => Err(format!("claiming log {log_id} for its table: {e}")),
        }
    }

    /// Reads `[from, cursor)` of a log, at most `tables.max_commit_bytes` of payload: the
    /// range ends at the last entry read, or at the cursor.
    async fn read_range(
        &self,
        log: &LogRef,
        partition: u32,
        from: Offset,
        cursor: Offset,
    ) -> Result<LogRange, String> {
        let config = &self.role.config;
        let mut entries: Vec<Entry> = Vec::new();
        let mut next = from;
        let mut bytes = 0u64;
        while next < cursor && bytes < config.max_commit_bytes {
            let batch = self
                .reader
                .read(log, next, config.read_chunk_bytes, Duration::ZERO)
                .await
                .map_err(|e| format!("reading log {} at {next}: {e}", log.log_id))?;
            if batch.entries.is_empty() {
                if batch.trim_marker >= cursor {
                    next = cursor; // trimmed meanwhile: nothing left below the cursor
                    break;
                }
                return Err(format!("log {}: no entry is readable at {next} (cursor {cursor})", log.log_id));
            }
            let before = next;
            for entry in batch.entries {
                if entry.end_offset() <= next {
                    continue;
                }
                if entry.offset < next || entry.end_offset() > cursor {
                    break; // straddles the watermark or the cursor: never happens at range ends
                }
                bytes += entry.payload.len() as u64;
                next = entry.end_offset();
                entries.push(entry);
            }
            if next == before {
                return Err(format!(
                    "log {}: reading at {next} made no progress (cursor {cursor})",
                    log.log_id
                ));
            }
        }
        let end = if bytes >= config.max_commit_bytes { next } else { cursor.max(next) };
        Ok(LogRange { log_id: log.log_id.0, partition, start: from, end, entries })
    }
}

/// The log's compaction cursor: the first offset not compacted (0 when none is recorded).
async fn compaction_cursor(meta: &dyn MetaStore, log_id: LogId) -> Result<Offset, String> {
    let record = meta
        .get(&keys::partition(log_id), &keys::compaction_cursor_key(log_id))
        .await
        .map_err(|e| format!("reading the compaction cursor of log {log_id}: {e}"))?;
    match record {
        None => Ok(0),
        Some(r) => {
            keys::decode_trim_marker(&r.value).map_err(|e| format!("compaction cursor of log {log_id}: {e}"))
        }
    }
}

/// Checks a stream's `table` property (`iceberg` or `none`), for the API.
pub fn check_property(properties: &BTreeMap<String, String>) -> Result<(), String> {
    match properties.get(lakestream_iceberg::TABLE_PROPERTY) {
        None => Ok(()),
        Some(v) => {
            lakestream_iceberg::config::check_table_value("properties.table", v).map_err(|e| e.to_string())
        }
    }
}

/// Counters of the committer, for `/metrics`.
#[derive(Debug)]
pub struct TableMetrics {
    /// Snapshots committed.
    pub commits: crate::metrics::Counter,
    /// Rows committed.
    pub rows: crate::metrics::Counter,
    /// Ranges committed.
    pub ranges: crate::metrics::Counter,
    /// Stream commits that failed (retried on the next pass).
    pub failures: crate::metrics::Counter,
    /// Kafka entries that did not decode (written as one row each).
    pub undecodable_entries: crate::metrics::Counter,
    /// Compacted offsets not yet in their tables, summed over the logs, at the last pass.
    pub lag_offsets: crate::metrics::Gauge,
    /// Data files removed from tables' current snapshots by trims.
    pub trimmed_files: crate::metrics::Counter,
    /// Snapshots expired.
    pub snapshots_expired: crate::metrics::Counter,
    /// Files deleted because no snapshot referred to them (data and metadata).
    pub files_deleted: crate::metrics::Counter,
    /// Tables dropped with their streams.
    pub dropped: crate::metrics::Counter,
    /// Trims, expiries, file deletions or drops that failed (retried on a later pass).
    pub maintenance_failures: crate::metrics::Counter,
}

impl TableMetrics {
    /// New table metrics, registered in `registry`.
    pub(crate) fn registered(registry: &mut prometheus_client::registry::Registry) -> Self {
        use crate::metrics::{counter, gauge};
        let r = registry;
        TableMetrics {
            commits: counter(r, "lakestream_table_commits", "Iceberg table snapshots committed"),
            rows: counter(r, "lakestream_table_rows", "Rows committed to Iceberg tables"),
            ranges: counter(r, "lakestream_table_ranges", "Log offset ranges committed to Iceberg tables"),
            failures: counter(
                r,
                "lakestream_table_commit_failures",
                "Table commits that failed (retried on the next pass)",
            ),
            undecodable_entries: counter(
                r,
                "lakestream_table_undecodable_entries",
                "Kafka entries that did not decode, written as one row each",
            ),
            lag_offsets: gauge(
                r,
                "lakestream_table_lag_offsets",
                "Compacted offsets not yet in their tables, over all logs, at the last pass",
            ),
            trimmed_files: counter(
                r,
                "lakestream_table_trimmed_files",
                "Data files removed from tables' current snapshots because their log was trimmed",
            ),
            snapshots_expired: counter(r, "lakestream_table_snapshots_expired", "Table snapshots expired"),
            files_deleted: counter(
                r,
                "lakestream_table_files_deleted",
                "Table files deleted because no snapshot referred to them",
            ),
            dropped: counter(r, "lakestream_table_dropped", "Tables dropped with their streams"),
            maintenance_failures: counter(
                r,
                "lakestream_table_maintenance_failures",
                "Table trims, expiries, file deletions or drops that failed (retried later)",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_uris_are_derived_from_the_compacted_root() {
        let local = ObjectStoreConfig::Local { dir: "/data/objects".into(), root: "compacted".into() };
        assert_eq!(root_uri_of(&local).unwrap(), "file:///data/objects/compacted");
        let s3 = ObjectStoreConfig::S3(Box::new(lakestream_objstore_s3::S3Config {
            bucket: "lake".into(),
            prefix: Some("prod/compacted".into()),
            ..Default::default()
        }));
        assert_eq!(root_uri_of(&s3).unwrap(), "s3://lake/prod/compacted");
    }

    #[test]
    fn the_table_property_is_checked() {
        let props = |v: &str| BTreeMap::from([("table".to_owned(), v.to_owned())]);
        check_property(&props("iceberg")).unwrap();
        check_property(&props("none")).unwrap();
        let err = check_property(&props("delta")).unwrap_err();
        assert!(err.contains("properties.table") && err.contains("delta"), "{err}");
    }
}
