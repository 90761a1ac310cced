//! Reclamation of WAL objects and orphaned compacted files (`gc_once`).
//!
//! **WAL objects.** An object is deleted only when (1) no index record names it — checked by
//! reading the object's index region to learn which logs it holds and scanning those logs'
//! records — and (2) that was already true `wal_grace` ago: the first observation is written
//! to the retirement ledger (`unreferenced_since_ms`), and the object goes once that is old
//! enough and (1) still holds. Since an observation of "unreferenced" comes after the last
//! naming record was removed, the object outlives that removal by at least the grace period
//! (spec MUST), whatever path removed the record: C3/C4, hard trim, or a log deletion by any
//! catalog. Candidates come from the ledger (announced before records are removed, one
//! announcement per range, expanded into per-object entries at the start of a pass) and, with
//! `orphan_scan`, from a listing of the WAL root: names are `yyyy/MM/dd/HH/mm/ss/{uuid}` in
//! UTC, so the listing is time-ordered and stops at the first name younger than the grace
//! period; that also finds objects whose index put failed and objects of deleted logs.
//!
//! **Compacted files.** Files that index records name are deleted by hard trim. A file of
//! ours (`ls-{L}-{uuid}.parquet`, and its companion) that no record of log L names is an
//! orphan — the output of a compaction that failed before C3, or of a deleted log — and is
//! deleted once it is `compacted_grace` old. A compaction never installs files older than
//! `max_compaction_duration` < `compacted_grace`, so no compaction in progress can still
//! install a file this deletes.
//!
//! No rule here deletes an object that an index record names at the time of the check.

use std::collections::{HashMap, HashSet};

use futures::StreamExt;
use lakestream_format::wal::{self, WalIndex};
use lakestream_format::{LogId, wal::INDEX_LENGTH_PREFIX};
use lakestream_objstore::{ByteRange, ObjectPrefix, ObjectStoreError};

use crate::compactor::Compactor;
use crate::config::CompactorConfig;
use crate::error::{CompactError, CompactResult};
use crate::ledger;
use crate::names;
use crate::progress::{GcReport, Progress, ProgressFn};
use crate::records;

/// The objects a log's index records name, scanned once per pass.
#[derive(Debug, Default)]
struct Named {
    wal: HashSet<String>,
    compacted: HashSet<String>,
}

/// What the collector knows about each log in one pass.
#[derive(Debug, Default)]
struct References {
    logs: HashMap<LogId, Named>,
}

impl References {
    async fn of(&mut self, compactor: &Compactor, log_id: LogId) -> CompactResult<&Named> {
        if let std::collections::hash_map::Entry::Vacant(slot) = self.logs.entry(log_id) {
            let mut named = Named::default();
            for r in records::scan_log(compactor.meta(), log_id).await? {
                if let Some(w) = r.wal_object() {
                    named.wal.insert(w.to_string());
                }
                named.compacted.extend(r.compacted_files().into_iter().map(str::to_string));
            }
            slot.insert(named);
        }
        Ok(&self.logs[&log_id])
    }
}

/// What a WAL object's references look like now.
enum WalState {
    Gone,
    Named,
    Unnamed,
}

impl Compactor {
    /// One collection pass: the ledger's WAL objects, then (with `orphan_scan`) orphaned WAL
    /// objects and compacted files. Failures of single objects are reported and skipped.
    pub async fn gc_once(&self, progress: ProgressFn<'_>) -> CompactResult<GcReport> {
        let mut report = GcReport::default();
        let mut refs = References::default();
        // Announcements first, so that this pass sees their objects as entries.
        report.announcements_expanded = ledger::expand_announcements(self.meta()).await?;
        let entries = ledger::list(self.meta()).await?;
        let grace_ms = CompactorConfig::ms(self.config().wal_grace);
        for entry in &entries {
            if let Err(e) = self.collect_wal_entry(entry, grace_ms, &mut refs, &mut report, progress).await {
                report.failed.push((entry.object.clone(), e.to_string()));
            }
        }
        if self.config().orphan_scan {
            let in_ledger: HashSet<&str> = entries.iter().map(|e| e.object.as_str()).collect();
            self.scan_wal_orphans(&in_ledger, grace_ms, &mut refs, &mut report).await?;
            self.scan_compacted_orphans(&mut refs, &mut report, progress).await?;
        }
        Ok(report)
    }

    async fn collect_wal_entry(
        &self,
        entry: &ledger::LedgerEntry,
        grace_ms: i64,
        refs: &mut References,
        report: &mut GcReport,
        progress: ProgressFn<'_>,
    ) -> CompactResult<()> {
        match self.wal_state(&entry.object, refs).await? {
            WalState::Gone => {
                ledger::remove(self.meta(), &entry.object).await?;
                report.ledger_cleared += 1;
            }
            WalState::Named => report.still_referenced += 1,
            WalState::Unnamed => match entry.value.unreferenced_since_ms {
                // The clock is read after the references were scanned, so this time is after
                // the removal of the last naming record.
                None => {
                    ledger::mark_unreferenced(self.meta(), &entry.object, self.now_ms()).await?;
                    report.marked_unreferenced += 1;
                }
                Some(since) if self.now_ms().saturating_sub(since) >= grace_ms => {
                    let path = Self::object_path(entry.object.clone())?;
                    self.inner.deps.wal.delete(&path).await.map_err(CompactError::object(&path))?;
                    ledger::remove(self.meta(), &entry.object).await?;
                    progress(&Progress::ObjectDeleted { root: "wal", path: entry.object.clone() });
                    report.wal_deleted.push(entry.object.clone());
                }
                Some(_) => report.waiting += 1,
            },
        }
        Ok(())
    }

    /// Whether a WAL object exists and whether a record of a log it holds names it.
    async fn wal_state(&self, object: &str, refs: &mut References) -> CompactResult<WalState> {
        let path = Self::object_path(object.to_string())?;
        let store = &self.inner.deps.wal;
        let head = match store.get_range(&path, ByteRange::Bounded(0..INDEX_LENGTH_PREFIX as u64)).await {
            Ok(b) => b,
            Err(ObjectStoreError::NotFound { .. }) => return Ok(WalState::Gone),
            Err(e) => return Err(CompactError::object(&path)(e)),
        };
        let corrupt = |detail: String| CompactError::Corrupt {
            log_id: LogId::MAX,
            what: format!("WAL object {object}"),
            detail,
        };
        let index_length = wal::index_length(&head).map_err(|e| corrupt(e.to_string()))?;
        let region = INDEX_LENGTH_PREFIX as u64 + u64::from(index_length);
        let prefix = match store.get_range(&path, ByteRange::Bounded(0..region)).await {
            Ok(b) => b,
            Err(ObjectStoreError::NotFound { .. }) => return Ok(WalState::Gone),
            Err(e) => return Err(CompactError::object(&path)(e)),
        };
        let index = WalIndex::parse(&prefix).map_err(|e| corrupt(e.to_string()))?;
        for section in index.sections() {
            if refs.of(self, section.log_id).await?.wal.contains(object) {
                return Ok(WalState::Named);
            }
        }
        Ok(WalState::Unnamed)
    }

    async fn scan_wal_orphans(
        &self,
        in_ledger: &HashSet<&str>,
        grace_ms: i64,
        refs: &mut References,
        report: &mut GcReport,
    ) -> CompactResult<()> {
        let horizon = self.now_ms().saturating_sub(grace_ms);
        let mut listing = self.inner.deps.wal.list(&ObjectPrefix::all(), None);
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(CompactError::object("WAL root listing"))?;
            let name = meta.path.as_str();
            let Some(written_ms) = names::wal_name_time_ms(name) else { continue };
            if written_ms > horizon {
                break; // every later name is younger
            }
            if in_ledger.contains(name) {
                continue;
            }
            match self.wal_state(name, refs).await {
                Ok(WalState::Unnamed) => {
                    ledger::mark_unreferenced(self.meta(), name, self.now_ms()).await?;
                    report.marked_unreferenced += 1;
                }
                Ok(WalState::Named | WalState::Gone) => {}
                Err(e) => report.failed.push((name.to_string(), e.to_string())),
            }
        }
        Ok(())
    }

    async fn scan_compacted_orphans(
        &self,
        refs: &mut References,
        report: &mut GcReport,
        progress: ProgressFn<'_>,
    ) -> CompactResult<()> {
        let horizon = self.now_ms().saturating_sub(CompactorConfig::ms(self.config().compacted_grace));
        let store = &self.inner.deps.compacted;
        let mut listing = store.list(&ObjectPrefix::all(), None);
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(CompactError::object("compacted root listing"))?;
            let Some((log_id, parquet_name)) = names::parse_compacted_name(meta.path.file_name()) else {
                continue;
            };
            if meta.last_modified_ms > horizon {
                continue;
            }
            if refs.of(self, log_id).await?.compacted.contains(&parquet_name) {
                continue;
            }
            match store.delete(&meta.path).await {
                Ok(()) => {
                    progress(&Progress::ObjectDeleted { root: "compacted", path: meta.path.to_string() });
                    report.compacted_deleted.push(meta.path.to_string());
                }
                Err(e) => report.failed.push((meta.path.to_string(), e.to_string())),
            }
        }
        Ok(())
    }
}
