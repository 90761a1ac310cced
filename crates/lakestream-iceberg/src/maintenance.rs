//! Table maintenance: trims, snapshot expiry, deletion of unreferenced files, dropping.
//!
//! **Trims.** [`Tables::trim`] takes each log's trim point (the first offset the log still
//! holds) and commits a `delete` snapshot whose manifests mark the data files of that log
//! whose every row is below the trim point as deleted; the current snapshot then no longer
//! shows them. A file that straddles the trim point is kept whole until a later trim covers
//! it (rewriting it is not done): the table may show rows below the trim point, at most
//! one data file's worth per log. The trim points applied are recorded in the same commit
//! as the table properties `lakestream.trimmed-below.{log ID}`, so a pass whose trim points
//! did not move reads no manifest.
//!
//! `iceberg` 0.10.1 has no action that removes data files (no delete, overwrite or rewrite
//! action), and its `TableCommit` cannot be built outside that crate. So the delete snapshot
//! is made from its public spec APIs — `ManifestWriter` (entries marked deleted or
//! existing), `ManifestListWriter`, `Snapshot`, `TableMetadataBuilder` and
//! `TableMetadata::write_to` — and swapped into the SQL catalog by the same compare-and-set
//! `UPDATE` that `iceberg-catalog-sql` uses ([`crate::catalog`]). A crash before the swap
//! leaves files nothing refers to (deleted as orphans later); a swap that lost a race is
//! retried from the new table state.
//!
//! **Expiry.** [`Tables::expire_snapshots`] runs `iceberg`'s `ExpireSnapshotsAction`: snapshots
//! older than `snapshot_max_age`, except the newest `min_snapshots` and the current one.
//!
//! **Unreferenced files.** [`Tables::delete_unreferenced`] lists every object under the
//! table's location and deletes those that neither the current metadata, nor a metadata
//! version in its metadata log, nor any remaining snapshot (its manifest list, its
//! manifests, its live data files) refers to — once they are older than `orphan_grace`.
//! That covers the files of expired snapshots, trimmed data files whose last snapshot
//! expired, metadata versions that fell out of the metadata log, and the files of failed or
//! superseded commit attempts. Safe for readers: a file any remaining snapshot still reads
//! is never deleted, and the grace period keeps the files of commits under way (written,
//! not yet swapped in). Crash-safe: each step leaves a valid table, and the next pass
//! recomputes what is unreferenced.
//!
//! **Dropping.** [`Tables::drop_table`] deletes every object under the table's location,
//! then the catalog's row; repeated after a crash, it finishes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::str::FromStr;
use std::time::Duration;

use futures::TryStreamExt;
use iceberg::spec::{
    DataContentType, MAIN_BRANCH, ManifestFile, ManifestListWriter, ManifestStatus, ManifestWriterBuilder,
    Operation, PrimitiveLiteral, Snapshot, Summary, TableMetadataBuilder,
};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{ErrorKind, MetadataLocation};
use lakestream_format::Offset;
use lakestream_objstore::{ObjectPath, ObjectPrefix};

use crate::catalog::Pinned;
use crate::config::TablesConfig;
use crate::error::{TablesError, TablesResult};
use crate::tables::{StreamRef, Tables, backoff};

/// The table property prefix of the trim points applied: `lakestream.trimmed-below.{log ID}`.
pub const TRIMMED_PROPERTY: &str = "lakestream.trimmed-below.";
/// The snapshot summary property of a trim's delete snapshot (JSON: log ID → trim point).
pub const TRIM_SUMMARY: &str = "lakestream.trim";
/// The field id of the `offset` column in both row layouts.
const OFFSET_FIELD_ID: i32 = 2;

/// How long snapshots and unreferenced files are kept (`[tables]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaintenanceOptions {
    /// Snapshots older than this are expired.
    pub snapshot_max_age: Duration,
    /// The newest snapshots kept whatever their age (at least 1).
    pub min_snapshots: usize,
    /// Unreferenced files younger than this are kept.
    pub orphan_grace: Duration,
}

impl MaintenanceOptions {
    /// The options `config` sets.
    pub fn of(config: &TablesConfig) -> MaintenanceOptions {
        MaintenanceOptions {
            snapshot_max_age: config.snapshot_max_age,
            min_snapshots: config.min_snapshots.max(1),
            orphan_grace: config.orphan_grace,
        }
    }
}

/// What [`Tables::trim`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrimReport {
    /// The delete snapshot committed, if files were removed.
    pub snapshot_id: Option<i64>,
    /// Data files no longer in the current snapshot.
    pub files_removed: usize,
    /// Their rows.
    pub rows_removed: u64,
    /// Data files holding rows on both sides of a trim point: kept whole.
    pub files_straddling: usize,
    /// Whether the trim points were recorded (a commit was made).
    pub recorded: bool,
}

/// What [`Tables::delete_unreferenced`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// Snapshots expired (by [`Tables::maintain`]).
    pub snapshots_expired: usize,
    /// Data files deleted (`data/…`).
    pub data_files_deleted: usize,
    /// Metadata files deleted (metadata JSON, manifest lists, manifests).
    pub metadata_files_deleted: usize,
    /// Unreferenced files kept because they are younger than the grace period.
    pub young_files_kept: usize,
}

impl CleanReport {
    /// Every file deleted.
    pub fn files_deleted(&self) -> usize {
        self.data_files_deleted + self.metadata_files_deleted
    }
}

fn catalog_error(what: String) -> impl FnOnce(iceberg::Error) -> TablesError {
    TablesError::catalog(what)
}

fn not_found(e: &iceberg::Error) -> bool {
    e.kind() == ErrorKind::TableNotFound || e.kind() == ErrorKind::NamespaceNotFound
}

/// The log a data file of ours belongs to: file names are `{log}-{start}-{token}.parquet`
/// with both numbers in canonical decimal. Files other engines wrote (Spark's
/// `00000-0-{uuid}-00001.parquet`, …) have none and are never trimmed.
fn log_of(path: &str) -> Option<u64> {
    let name = path.rsplit('/').next()?.strip_suffix(".parquet")?;
    let mut parts = name.splitn(3, '-');
    let canonical = |s: &str| s.parse::<u64>().ok().filter(|n| n.to_string() == s);
    let log = canonical(parts.next()?)?;
    canonical(parts.next()?)?;
    parts.next().filter(|token| !token.is_empty())?;
    Some(log)
}

fn offset_bound(bound: Option<&iceberg::spec::Datum>) -> Option<i64> {
    match bound?.literal() {
        PrimitiveLiteral::Long(v) => Some(*v),
        PrimitiveLiteral::Int(v) => Some(i64::from(*v)),
        _ => None,
    }
}

/// The trim points a table's properties record.
pub fn trimmed_of(table: &Table) -> BTreeMap<u64, Offset> {
    table
        .metadata()
        .properties()
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(TRIMMED_PROPERTY)?.parse().ok()?, v.parse().ok()?)))
        .collect()
}

impl Tables {
    /// Replaces the maintenance options (tests use short ages and grace periods).
    pub fn set_maintenance(&mut self, options: MaintenanceOptions) {
        self.maintenance = options;
    }

    /// The maintenance options.
    pub fn maintenance(&self) -> MaintenanceOptions {
        self.maintenance
    }

    fn snapshot_id(&self) -> i64 {
        let mut hasher = DefaultHasher::new();
        (self.tokens)().hash(&mut hasher);
        // Positive, as Iceberg's own ids are.
        (hasher.finish() >> 1) as i64
    }

    async fn load(&self, stream: &StreamRef) -> TablesResult<Option<Table>> {
        match self.catalog.load_table(&stream.ident()).await {
            Ok(t) => Ok(Some(t)),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(catalog_error(format!("loading {stream}"))(e)),
        }
    }

    /// Removes from the stream's table the data files whose rows all lie below their log's
    /// trim point (`trim_points`: log ID → the first offset the log still holds), in one
    /// `delete` snapshot, and records the trim points. Logs whose trim point did not move
    /// since the last call cost one table load. A table that does not exist is left alone.
    pub async fn trim(
        &self,
        stream: &StreamRef,
        trim_points: &BTreeMap<u64, Offset>,
        now_ms: i64,
    ) -> TablesResult<TrimReport> {
        let mut last_error = None;
        for attempt in 1..=self.attempts {
            if attempt > 1 {
                tokio::time::sleep(backoff(attempt)).await;
            }
            let Some(table) = self.load(stream).await? else { return Ok(TrimReport::default()) };
            let applied = trimmed_of(&table);
            let moved: BTreeMap<u64, Offset> = trim_points
                .iter()
                .filter(|(log, point)| **point > applied.get(log).copied().unwrap_or(0))
                .map(|(l, p)| (*l, *p))
                .collect();
            if moved.is_empty() {
                return Ok(TrimReport::default());
            }
            match self.trim_once(stream, &table, &moved, now_ms).await {
                Ok(Some(report)) => return Ok(report),
                Ok(None) => {
                    tracing::info!(table = %stream, attempt, "trim commit lost a race; deciding again from the table");
                    last_error = Some(TablesError::InvalidRange {
                        table: stream.to_string(),
                        message: "the table changed under every trim attempt".into(),
                    });
                }
                Err(e) => {
                    tracing::warn!(table = %stream, attempt, error = %e, "trim commit failed; deciding again from the table");
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| TablesError::InvalidRange {
            table: stream.to_string(),
            message: "no trim attempt was made".into(),
        }))
    }

    /// One trim attempt on exactly `table`'s state; `None` when another commit came first.
    async fn trim_once(
        &self,
        stream: &StreamRef,
        table: &Table,
        moved: &BTreeMap<u64, Offset>,
        now_ms: i64,
    ) -> TablesResult<Option<TrimReport>> {
        let metadata = table.metadata();
        let file_io = table.file_io();
        let err = |what: &str| catalog_error(format!("{what} of {stream}"));
        let properties: HashMap<String, String> = moved
            .iter()
            .map(|(log, point)| (format!("{TRIMMED_PROPERTY}{log}"), point.to_string()))
            .collect();
        let mut report = TrimReport { recorded: true, ..TrimReport::default() };

        let Some(current) = metadata.current_snapshot() else {
            // Nothing to remove: record the trim points only.
            return self.record_properties(table, properties, report).await;
        };
        let manifest_list =
            table.manifest_list_reader(current).load().await.map_err(err("reading the manifest list"))?;
        let snapshot_id = self.snapshot_id();
        let sequence_number = metadata.next_sequence_number();
        let mut manifests: Vec<ManifestFile> = Vec::new();
        let mut removed_bytes = 0u64;
        for manifest_file in manifest_list.entries() {
            if manifest_file.content != iceberg::spec::ManifestContentType::Data {
                manifests.push(manifest_file.clone());
                continue;
            }
            let manifest = manifest_file.load_manifest(file_io).await.map_err(err("reading a manifest"))?;
            let trimmed = |entry: &iceberg::spec::ManifestEntry| -> Option<bool> {
                let data_file = entry.data_file();
                if data_file.content_type() != DataContentType::Data {
                    return Some(false);
                }
                let point = *moved.get(&log_of(data_file.file_path())?)?;
                let upper = offset_bound(data_file.upper_bounds().get(&OFFSET_FIELD_ID))?;
                Some(upper < point as i64)
            };
            let straddles = |entry: &iceberg::spec::ManifestEntry| -> bool {
                let data_file = entry.data_file();
                let (Some(log), Some(lower)) = (
                    log_of(data_file.file_path()),
                    offset_bound(data_file.lower_bounds().get(&OFFSET_FIELD_ID)),
                ) else {
                    return false;
                };
                moved.get(&log).is_some_and(|p| lower < *p as i64)
            };
            let alive: Vec<_> = manifest.entries().iter().filter(|e| e.is_alive()).collect();
            let removing: Vec<bool> = alive.iter().map(|e| trimmed(e).unwrap_or(false)).collect();
            report.files_straddling +=
                alive.iter().zip(&removing).filter(|(e, r)| !**r && straddles(e)).count();
            if !removing.contains(&true) {
                manifests.push(manifest_file.clone());
                continue;
            }
            // A new manifest: the kept files as existing, the trimmed ones as deleted.
            let spec = metadata.partition_spec_by_id(manifest_file.partition_spec_id).ok_or_else(|| {
                TablesError::InvalidRange {
                    table: stream.to_string(),
                    message: format!(
                        "a manifest names partition spec {} the table lacks",
                        manifest_file.partition_spec_id
                    ),
                }
            })?;
            let location = format!("{}/metadata/{}-m0.avro", metadata.location(), (self.tokens)());
            let output = file_io.new_output(&location).map_err(err("writing a manifest"))?;
            let mut writer = ManifestWriterBuilder::new(
                output,
                Some(snapshot_id),
                metadata.current_schema().clone(),
                spec.as_ref().clone(),
            )
            .build_v2_data();
            for (entry, remove) in alive.iter().zip(&removing) {
                let data_file = entry.data_file().clone();
                let seq = entry.sequence_number().unwrap_or(0);
                if *remove {
                    report.files_removed += 1;
                    report.rows_removed += data_file.record_count();
                    removed_bytes += data_file.file_size_in_bytes();
                    writer
                        .add_delete_file(data_file, seq, entry.file_sequence_number)
                        .map_err(err("a manifest"))?;
                } else {
                    let added_by = entry.snapshot_id().unwrap_or(current.snapshot_id());
                    writer
                        .add_existing_file(data_file, added_by, seq, entry.file_sequence_number)
                        .map_err(err("a manifest"))?;
                }
            }
            manifests.push(writer.write_manifest_file().await.map_err(err("writing a manifest"))?);
        }
        if report.files_removed == 0 {
            return self.record_properties(table, properties, report).await;
        }

        let list_location =
            format!("{}/metadata/snap-{snapshot_id}-0-{}.avro", metadata.location(), (self.tokens)());
        let output = file_io.new_output(&list_location).map_err(err("writing the manifest list"))?;
        let mut list = ManifestListWriter::v2(
            output.writer().await.map_err(err("writing the manifest list"))?,
            snapshot_id,
            Some(current.snapshot_id()),
            sequence_number,
        );
        list.add_manifests(manifests.into_iter()).map_err(err("the manifest list"))?;
        list.close().await.map_err(err("writing the manifest list"))?;

        let mut summary = HashMap::from([
            ("deleted-data-files".to_owned(), report.files_removed.to_string()),
            ("deleted-records".to_owned(), report.rows_removed.to_string()),
            ("removed-files-size".to_owned(), removed_bytes.to_string()),
            (TRIM_SUMMARY.to_owned(), serde_json::to_string(moved).unwrap_or_default()),
        ]);
        let parent = &current.summary().additional_properties;
        for (total, minus) in [
            ("total-data-files", report.files_removed as u64),
            ("total-records", report.rows_removed),
            ("total-files-size", removed_bytes),
        ] {
            if let Some(v) = parent.get(total).and_then(|v| v.parse::<u64>().ok()) {
                summary.insert(total.to_owned(), v.saturating_sub(minus).to_string());
            }
        }
        for same in ["total-delete-files", "total-position-deletes", "total-equality-deletes"] {
            if let Some(v) = parent.get(same) {
                summary.insert(same.to_owned(), v.clone());
            }
        }
        let snapshot = Snapshot::builder()
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(Some(current.snapshot_id()))
            .with_sequence_number(sequence_number)
            .with_timestamp_ms(now_ms.max(metadata.last_updated_ms()))
            .with_manifest_list(list_location)
            .with_summary(Summary { operation: Operation::Delete, additional_properties: summary })
            .with_schema_id(metadata.current_schema_id())
            .build();
        let current_location =
            table.metadata_location_result().map_err(err("the metadata location"))?.to_owned();
        let built = TableMetadataBuilder::new_from_metadata(metadata.clone(), Some(current_location.clone()))
            .set_branch_snapshot(snapshot, MAIN_BRANCH)
            .and_then(|b| b.set_properties(properties))
            .and_then(|b| b.build())
            .map_err(err("the trim's metadata"))?;
        let new_location = MetadataLocation::from_str(&current_location)
            .map_err(err("the metadata location"))?
            .with_next_version()
            .with_new_metadata(&built.metadata);
        built.metadata.write_to(file_io, &new_location).await.map_err(err("writing the trim's metadata"))?;
        let swapped = self
            .swap
            .swap(table.identifier(), &current_location, &new_location.to_string())
            .await
            .map_err(err("swapping in the trim's metadata"))?;
        if !swapped {
            return Ok(None);
        }
        report.snapshot_id = Some(snapshot_id);
        tracing::info!(table = %stream, snapshot_id, files = report.files_removed, rows = report.rows_removed,
            straddling = report.files_straddling, "trimmed the stream's table");
        Ok(Some(report))
    }

    /// Commits table properties through `iceberg`'s own action onto exactly `table`'s state.
    async fn record_properties(
        &self,
        table: &Table,
        properties: HashMap<String, String>,
        report: TrimReport,
    ) -> TablesResult<Option<TrimReport>> {
        let ident = table.identifier().clone();
        let tx = Transaction::new(table);
        let mut action = tx.update_table_properties();
        for (k, v) in properties {
            action = action.set(k, v);
        }
        let tx = action.apply(tx).map_err(catalog_error(format!("trim points of {ident}")))?;
        let pinned = Pinned { inner: self.catalog.as_ref(), table: table.clone() };
        match tx.commit(&pinned).await {
            Ok(_) => Ok(Some(report)),
            Err(e) if e.kind() == ErrorKind::CatalogCommitConflicts => Ok(None),
            Err(e) => Err(catalog_error(format!("recording the trim points of {ident}"))(e)),
        }
    }

    /// Expires the snapshots older than `snapshot_max_age` (keeping the newest
    /// `min_snapshots` and the current one) with `iceberg`'s expire-snapshots action;
    /// returns how many were expired. Deletes no file.
    pub async fn expire_snapshots(&self, stream: &StreamRef, now_ms: i64) -> TablesResult<usize> {
        let cutoff = now_ms.saturating_sub(self.maintenance.snapshot_max_age.as_millis() as i64);
        let mut last_error = None;
        for attempt in 1..=self.attempts {
            if attempt > 1 {
                tokio::time::sleep(backoff(attempt)).await;
            }
            let Some(table) = self.load(stream).await? else { return Ok(0) };
            let metadata = table.metadata();
            let before = metadata.snapshots().count();
            // Nothing old enough, or too few snapshots: no commit (an empty one would still
            // write a metadata version).
            if before <= self.maintenance.min_snapshots
                || !metadata.snapshots().any(|s| s.timestamp_ms() < cutoff)
            {
                return Ok(0);
            }
            let tx = Transaction::new(&table);
            let action = tx
                .expire_snapshots()
                .expire_older_than_ms(cutoff)
                .retain_last(self.maintenance.min_snapshots);
            let tx = action.apply(tx).map_err(catalog_error(format!("expiring snapshots of {stream}")))?;
            let pinned = Pinned { inner: self.catalog.as_ref(), table: table.clone() };
            match tx.commit(&pinned).await {
                Ok(after) => {
                    let expired = before.saturating_sub(after.metadata().snapshots().count());
                    if expired > 0 {
                        tracing::info!(table = %stream, expired, "expired snapshots of the stream's table");
                    }
                    return Ok(expired);
                }
                Err(e) => {
                    tracing::warn!(table = %stream, attempt, error = %e, "snapshot expiry failed; deciding again from the table");
                    last_error = Some(catalog_error(format!("expiring snapshots of {stream}"))(e));
                }
            }
        }
        Err(last_error.unwrap_or_else(|| TablesError::InvalidRange {
            table: stream.to_string(),
            message: "no expiry attempt was made".into(),
        }))
    }

    /// Every file the table's current metadata refers to: itself, the metadata versions in
    /// its metadata log, and each snapshot's manifest list, manifests and live data files.
    async fn referenced_files(&self, table: &Table) -> TablesResult<HashSet<String>> {
        let err = |what: &str| catalog_error(format!("{what} of {}", table.identifier()));
        let metadata = table.metadata();
        let mut referenced = HashSet::new();
        if let Some(location) = table.metadata_location() {
            referenced.insert(location.to_owned());
        }
        referenced.extend(metadata.metadata_log().iter().map(|m| m.metadata_file.clone()));
        let mut manifests_seen = HashSet::new();
        for snapshot in metadata.snapshots() {
            referenced.insert(snapshot.manifest_list().to_owned());
            let list =
                table.manifest_list_reader(snapshot).load().await.map_err(err("reading a manifest list"))?;
            for manifest_file in list.entries() {
                referenced.insert(manifest_file.manifest_path.clone());
                if !manifests_seen.insert(manifest_file.manifest_path.clone()) {
                    continue;
                }
                let manifest =
                    manifest_file.load_manifest(table.file_io()).await.map_err(err("reading a manifest"))?;
                for entry in manifest.entries() {
                    if entry.status() != ManifestStatus::Deleted {
                        referenced.insert(entry.file_path().to_owned());
                    }
                }
            }
        }
        for statistics in metadata.statistics_iter() {
            referenced.insert(statistics.statistics_path.clone());
        }
        for statistics in metadata.partition_statistics_iter() {
            referenced.insert(statistics.statistics_path.clone());
        }
        Ok(referenced)
    }

    fn object_path(&self, location: &str) -> TablesResult<ObjectPath> {
        self.storage.object_path(location).map_err(|e| TablesError::Objects {
            path: location.to_owned(),
            source: Box::new(lakestream_objstore::ObjectStoreError::InvalidPath {
                path: format!("{location}: {e}"),
                reason: "outside the compacted root",
            }),
        })
    }

    /// Every object under the table's location (`{location}/`), with its age.
    async fn list_table_objects(
        &self,
        stream: &StreamRef,
    ) -> TablesResult<Vec<lakestream_objstore::ObjectMeta>> {
        let location = self.location(stream);
        let dir = self.object_path(&location)?;
        let prefix = ObjectPrefix::new(format!("{}/", dir.as_str()))
            .map_err(|source| TablesError::Objects { path: location.clone(), source: Box::new(source) })?;
        self.storage_store()?
            .list(&prefix, None)
            .try_collect()
            .await
            .map_err(|source| TablesError::Objects { path: location, source: Box::new(source) })
    }

    /// Deletes the objects under the table's location that its current metadata does not
    /// refer to (see the module's documentation) and that are older than `orphan_grace`.
    pub async fn delete_unreferenced(&self, stream: &StreamRef, now_ms: i64) -> TablesResult<CleanReport> {
        let Some(table) = self.load(stream).await? else { return Ok(CleanReport::default()) };
        let location = self.location(stream);
        if table.metadata().location().trim_end_matches('/') != location {
            return Err(TablesError::InvalidRange {
                table: stream.to_string(),
                message: format!(
                    "the table lives at {}, not {location}: its files are not Lakestream's to delete",
                    table.metadata().location()
                ),
            });
        }
        let referenced: HashSet<ObjectPath> = self
            .referenced_files(&table)
            .await?
            .iter()
            .filter_map(|l| self.storage.object_path(l).ok())
            .collect();
        let grace_ms = self.maintenance.orphan_grace.as_millis() as i64;
        let mut report = CleanReport::default();
        let mut delete = Vec::new();
        for object in self.list_table_objects(stream).await? {
            if referenced.contains(&object.path) {
                continue;
            }
            if now_ms.saturating_sub(object.last_modified_ms) < grace_ms {
                report.young_files_kept += 1;
                continue;
            }
            if object.path.as_str().contains("/data/") {
                report.data_files_deleted += 1;
            } else {
                report.metadata_files_deleted += 1;
            }
            delete.push(object.path);
        }
        if !delete.is_empty() {
            self.storage_store()?.delete_many(&delete).await.map_err(|source| TablesError::Objects {
                path: location.clone(),
                source: Box::new(source),
            })?;
            tracing::info!(table = %stream, data = report.data_files_deleted, metadata = report.metadata_files_deleted,
                "deleted files no snapshot of the stream's table refers to");
        }
        Ok(report)
    }

    /// [`Tables::expire_snapshots`] then [`Tables::delete_unreferenced`].
    pub async fn maintain(&self, stream: &StreamRef, now_ms: i64) -> TablesResult<CleanReport> {
        let expired = self.expire_snapshots(stream, now_ms).await?;
        let mut report = self.delete_unreferenced(stream, now_ms).await?;
        report.snapshots_expired = expired;
        Ok(report)
    }

    /// Drops the stream's table: deletes every object under its location, then its catalog
    /// row. Returns the objects deleted. A table that is not there is not an error; a table
    /// of that name living elsewhere (not made by Lakestream) is refused. Safe to repeat.
    pub async fn drop_table(&self, stream: &StreamRef) -> TablesResult<usize> {
        let location = self.location(stream);
        match self.catalog.load_table(&stream.ident()).await {
            Ok(table) if table.metadata().location().trim_end_matches('/') != location => {
                return Err(TablesError::InvalidRange {
                    table: stream.to_string(),
                    message: format!(
                        "the table lives at {}, not {location}: not dropped",
                        table.metadata().location()
                    ),
                });
            }
            // A table whose metadata is gone (a drop interrupted after the files) still has
            // its row: dropped below.
            Ok(_) | Err(_) => {}
        }
        let objects: Vec<ObjectPath> =
            self.list_table_objects(stream).await?.into_iter().map(|o| o.path).collect();
        if !objects.is_empty() {
            self.storage_store()?.delete_many(&objects).await.map_err(|source| TablesError::Objects {
                path: location.clone(),
                source: Box::new(source),
            })?;
        }
        match self.catalog.drop_table(&stream.ident()).await {
            Ok(()) => {}
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(catalog_error(format!("dropping {stream}"))(e)),
        }
        tracing::info!(table = %stream, files = objects.len(), "dropped the stream's table");
        Ok(objects.len())
    }

    /// Every table in the catalog, as the stream it would belong to (one-level namespaces).
    pub async fn list_tables(&self) -> TablesResult<Vec<StreamRef>> {
        let namespaces =
            self.catalog.list_namespaces(None).await.map_err(catalog_error("listing namespaces".into()))?;
        let mut tables = Vec::new();
        for namespace in namespaces {
            let names = match self.catalog.list_tables(&namespace).await {
                Ok(n) => n,
                Err(e) if not_found(&e) => continue,
                Err(e) => return Err(catalog_error(format!("listing the tables of {namespace:?}"))(e)),
            };
            for ident in names {
                let parts = ident.namespace().as_ref();
                if parts.len() == 1 {
                    tables.push(StreamRef::new(parts[0].clone(), ident.name().to_owned()));
                }
            }
        }
        Ok(tables)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_files_name_their_log() {
        assert_eq!(log_of("s3://b/_iceberg/ns/s/data/timestamp_day=2026-12-01/7-100-abc.parquet"), Some(7));
        assert_eq!(log_of("file:///d/data/0-0-6f1c-11.parquet"), Some(0));
        // Spark's names are not ours.
        assert_eq!(log_of("s3://b/t/data/00000-0-5d5b1c1e-0d5c-4b7e-8a43-3f5ec8d1b0a7-00001.parquet"), None);
        assert_eq!(log_of("s3://b/t/data/part-00000.parquet"), None);
        assert_eq!(log_of("s3://b/t/metadata/snap-1.avro"), None);
    }
}
