//! Soft trim ("Trim, deletion and reclamation", Soft trim): advance the trim marker B.
//!
//! `B′ = min(o + 1, start of the log's last index record)`, written with CreateIfAbsent when
//! no marker exists and with CompareAndSet on the version read otherwise, under the writer's
//! lease on the log. Capping B′ at the start of the last record keeps that record — the log's
//! greatest key — in place, so the next sequenced put continues from it. Unlike Ursa (addendum
//! §12, row 3) we return the marker actually stored, and an error when ours was not written.
//!
//! The lease handle is held for the whole trim (the idle releaser skips leases in use), and
//! the marker is not written once the session behind the lease has ended. A conditional write
//! whose outcome is unknown is settled by a later read: once the marker's version differs from
//! the one it was conditioned on (or, for a create, once the marker exists), it can never
//! apply. A trim that returns before such a read pins its lease ([`crate::leases`]).

use bytes::Bytes;
use lakestream_format::keys::{self, IndexKey};
use lakestream_format::retry::{Backoff, BackoffPolicy};
use lakestream_format::{LogId, Offset, entry_index};
use lakestream_meta::{Comparison, MetaError, PutCondition};

use crate::error::{AppendError, TrimError};
use crate::leases::Unsettled;
use crate::writer::Writer;

/// The result of a soft trim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrimOutcome {
    /// The trim marker B stored after the trim.
    pub marker: Offset,
    /// Whether this call advanced it (false when the marker was already at or past B′, or the
    /// log has no index records).
    pub advanced: bool,
}

impl Writer {
    /// Soft-trims `log_id` through offset `through`, inclusive: offsets up to `through` become
    /// unreadable (as far as the log's last record allows).
    pub async fn soft_trim(&self, log_id: LogId, through: Offset) -> Result<TrimOutcome, TrimError> {
        // Held until we return: the spec asks for the lease while the marker is written, and
        // a dropped handle would let the idle releaser delete the lease record mid-trim.
        let lease = self.lease(log_id).await.map_err(|e| match e {
            AppendError::Fenced { log_id } => TrimError::Fenced { log_id },
            AppendError::Lease { source, .. } => TrimError::Meta { log_id, source },
            other => TrimError::Meta { log_id, source: MetaError::Unavailable(other.to_string()) },
        })?;
        let meta = self.meta();
        let partition = keys::partition(log_id);
        let meta_err = |source| TrimError::Meta { log_id, source };
        let corrupt = |detail: String| TrimError::Corrupt { log_id, detail };

        let marker_key = keys::trim_marker_key(log_id);
        let read_marker = || async {
            match meta.get(&partition, &marker_key).await.map_err(meta_err)? {
                None => Ok((0, None)),
                Some(r) => keys::decode_trim_marker(&r.value)
                    .map(|b| (b, Some(r.version)))
                    .map_err(|e| corrupt(format!("trim marker: {e}"))),
            }
        };

        let last =
            meta.get_cmp(&partition, &keys::last_key(log_id), Comparison::Floor).await.map_err(meta_err)?;
        let Some(last) = last.filter(|r| keys::is_index_key_of(&r.key, log_id)) else {
            // A soft trim of a log that has no index records changes nothing.
            let (marker, _) = read_marker().await?;
            return Ok(TrimOutcome { marker, advanced: false });
        };
        let key = IndexKey::parse(&last.key).map_err(|e| corrupt(e.to_string()))?;
        let value =
            entry_index::decode(&last.value).map_err(|e| corrupt(format!("record {}: {e}", last.key)))?;
        let last_start = key.end_offset.checked_sub(u64::from(value.message_count())).ok_or_else(|| {
            corrupt(format!(
                "record {} holds {} records, more than its end offset",
                last.key,
                value.message_count()
            ))
        })?;
        let target = through.saturating_add(1).min(last_start);

        // A conditional write of ours whose outcome is unknown, by the version it expected
        // (`None`: a create). Settled once a read shows another version (or, for a create,
        // a marker): the write can then never apply.
        let mut unsettled: Option<Option<lakestream_meta::Version>> = None;
        let pin_if_unsettled = |unsettled: &Option<Option<lakestream_meta::Version>>| {
            if let Some(expected) = *unsettled {
                self.pin_unsettled(&lease, Unsettled::TrimMarker { log_id, expected });
            }
        };
        let attempts = self.config().trim_retries.max(1);
        // Not `cas_update`: the loop also settles writes of unknown outcome and watches the
        // lease. Lost rounds pause as every compare-and-set loop does.
        let backoff = Backoff::process(BackoffPolicy::compare_and_set(attempts));
        for round in 0..attempts {
            if round > 0 {
                tokio::time::sleep(backoff.delay(round - 1)).await;
            }
            let (current, version) = match read_marker().await {
                Ok(read) => read,
                Err(e) => {
                    pin_if_unsettled(&unsettled);
                    return Err(e);
                }
            };
            if unsettled.is_some_and(|expected| expected != version) {
                unsettled = None;
            }
            if target <= current {
                pin_if_unsettled(&unsettled);
                return Ok(TrimOutcome { marker: current, advanced: false });
            }
            let condition = match version {
                None => PutCondition::IfAbsent,
                Some(v) => PutCondition::IfVersion(v),
            };
            // Never write the marker once the lease's session has ended: a catalog may have
            // counted the lease as drained and deleted the log (spec "Fences and log deletion").
            if lease.is_lost() {
                return Err(TrimError::LeaseLost { log_id });
            }
            let value = Bytes::from(keys::encode_trim_marker(target));
            match meta.put(&partition, &marker_key, value, condition).await {
                // A success changed the version: an earlier write of ours can no longer apply.
                Ok(_) => return Ok(TrimOutcome { marker: target, advanced: true }),
                // Another trim changed the marker: read again.
                Err(MetaError::KeyExists { .. } | MetaError::VersionMismatch { .. }) => continue,
                // Our write may have landed, or still may: read again.
                Err(e) if matches!(e.class(), lakestream_format::ErrorClass::OutcomeUnknown) => {
                    unsettled = Some(version);
                    continue;
                }
                Err(e) => {
                    pin_if_unsettled(&unsettled);
                    return Err(meta_err(e));
                }
            }
        }
        pin_if_unsettled(&unsettled);
        drop(lease);
        Err(TrimError::Contended { log_id, attempts })
    }
}
