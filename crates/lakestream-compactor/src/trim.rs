//! Hard trim ("Trim, deletion and reclamation"): removes the index records of a log that end
//! at or below X with `DeleteRange(K(L, 0, 0), K(L, X, MAX))`.
//!
//! - X is lowered to at most B and below the end of the log's last record, and then to the
//!   end of a record, so the log's greatest key (and with it `next`) never moves (MUST).
//! - The compacted files (and companions) of the PARQUET records removed are deleted first,
//!   so a failed deletion can be retried from the records (SHOULD). Those records end at or
//!   below B, so no reader reads them (MAY delete).
//! - The WAL objects of the RAW records removed are announced in the retirement ledger
//!   before the records go.
//! - The whole trim runs under the log's compaction claim (no C3 of ours can race it) and a
//!   write lease taken through the claim's session (MUST); it stops if the session ends.

use lakestream_format::keys;
use lakestream_format::{LogRef, Offset};

use crate::compactor::{Compactor, ensure_live};
use crate::error::{CompactError, CompactResult, HARD_TRIM};
use crate::ledger;
use crate::progress::{HardTrimReport, Progress, ProgressFn};
use crate::records;

impl Compactor {
    /// Hard-trims `log` to `x` (lowered to B and kept below the last record).
    pub async fn hard_trim(
        &self,
        log: &LogRef,
        x: Offset,
        progress: ProgressFn<'_>,
    ) -> CompactResult<HardTrimReport> {
        let claim = self.claim(log.log_id).await?;
        let result = self.hard_trim_claimed(&claim, log, x, progress).await;
        claim.release(self.meta()).await;
        result
    }

    async fn hard_trim_claimed(
        &self,
        claim: &crate::compactor::Claim,
        log: &LogRef,
        x: Offset,
        progress: ProgressFn<'_>,
    ) -> CompactResult<HardTrimReport> {
        let log_id = log.log_id;
        let b = records::trim_marker(self.meta(), log_id).await?;
        let records = records::scan_log(self.meta(), log_id).await?;
        let Some(last) = records.last() else { return Ok(HardTrimReport::default()) };
        let limit = x.min(b);
        let victims: Vec<_> = records.iter().filter(|r| r.end() <= limit && r.end() < last.end()).collect();
        let Some(trim_to) = victims.iter().map(|r| r.end()).max() else {
            return Ok(HardTrimReport::default());
        };
        let mut report = HardTrimReport { trimmed_to: Some(trim_to), ..HardTrimReport::default() };

        let dir = format!("{}/{}", log.namespace, log.stream);
        let mut paths = Vec::new();
        for name in victims.iter().flat_map(|r| r.compacted_files()) {
            let companion =
                lakestream_format::compacted::companion_name(name).map_err(|e| CompactError::Corrupt {
                    log_id,
                    what: format!("file index naming {name}"),
                    detail: e.to_string(),
                })?;
            paths.push(Self::object_path(format!("{dir}/{name}"))?);
            paths.push(Self::object_path(format!("{dir}/{companion}"))?);
        }
        if !paths.is_empty() {
            let store = &self.inner.deps.compacted;
            store.delete_many(&paths).await.map_err(CompactError::object(format!("{dir}/…")))?;
            for p in &paths {
                progress(&Progress::ObjectDeleted { root: "compacted", path: p.to_string() });
                report.compacted_deleted.push(p.to_string());
            }
        }

        let wal: Vec<&str> = victims.iter().filter_map(|r| r.wal_object()).collect();
        ledger::record_retirements(self.meta(), wal.clone(), self.now_ms()).await?;
        report.wal_retired = wal.iter().map(|s| s.to_string()).collect();
        report.wal_retired.sort();
        report.wal_retired.dedup();

        let lease = self.acquire_lease(claim).await?;
        let result = async {
            ensure_live(&lease)?;
            let partition = keys::partition(log_id);
            self.meta()
                .delete_range(
                    &partition,
                    &keys::first_key(log_id),
                    &keys::covering_lookup_key(log_id, trim_to),
                )
                .await
                .map_err(CompactError::meta(log_id, HARD_TRIM))
        }
        .await;
        // A DeleteRange of unknown outcome may still take effect: its lease goes with its
        // session, never by a delete before it completed.
        let unsettled = result.as_ref().err().and_then(CompactError::unknown_change).is_some();
        self.let_go(lease, unsettled).await;
        result?;
        report.records_removed = victims.len();
        tracing::info!(%log_id, trim_to, records = victims.len(), "hard-trimmed");
        Ok(report)
    }
}
