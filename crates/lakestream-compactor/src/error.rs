//! Compactor errors, each with its [`ErrorClass`]. The class mapping is one `match` with no
//! wildcard arm, so every new variant must be classified.

use lakestream_format::{ErrorClass, FormatError, LogId};
use lakestream_meta::MetaError;
use lakestream_meta::lease::LeaseError;
use lakestream_objstore::ObjectStoreError;
use lakestream_reader::ReadError;

use crate::config::ConfigError;

/// Why a compaction, a hard trim or a collection step failed.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    /// A setting is out of range.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A metadata-store operation failed.
    #[error("log {log_id}: metadata store, {operation}: {source}")]
    Meta {
        /// The log (or `LogId::MAX` for records outside any log).
        log_id: LogId,
        /// What the compactor was doing.
        operation: &'static str,
        /// The store's error.
        source: MetaError,
    },
    /// An object-store operation failed.
    #[error("object {object}: {source}")]
    Object {
        /// The object's path.
        object: String,
        /// The store's error.
        source: ObjectStoreError,
    },
    /// Reading the range's entries failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A fetch of a WAL object that several logs of a pass needed failed; each of them gets
    /// this error.
    #[error("log {log_id}: {source}")]
    Fetch {
        /// The log.
        log_id: LogId,
        /// The fetch's error.
        source: std::sync::Arc<CompactError>,
    },
    /// Encoding a compacted file, a companion or an index value failed.
    #[error("log {log_id}: encoding {what}: {source}")]
    Encode {
        /// The log.
        log_id: LogId,
        /// The structure.
        what: &'static str,
        /// The codec's error.
        source: FormatError,
    },
    /// Stored records or objects break a rule of the format.
    #[error("log {log_id}: corrupt {what}: {detail}")]
    Corrupt {
        /// The log.
        log_id: LogId,
        /// The record or object.
        what: String,
        /// The rule broken.
        detail: String,
    },
    /// The write lease could not be acquired (the log is fenced, or the store failed).
    #[error("log {log_id}: write lease: {source}")]
    Lease {
        /// The log.
        log_id: LogId,
        /// The lease protocol's error.
        source: LeaseError,
    },
    /// The session behind the compactor's lease and claim ended: every change under it stops.
    #[error("log {log_id}: the compactor's metadata-store session ended")]
    SessionEnded {
        /// The log.
        log_id: LogId,
    },
    /// Another compactor holds the log's compaction claim.
    #[error("log {log_id}: another compactor holds the compaction claim")]
    Busy {
        /// The log.
        log_id: LogId,
    },
    /// The key of the range's last record holds a PARQUET record another compaction installed;
    /// the spec forbids replacing it.
    #[error("log {log_id}: {key} already holds another compaction's PARQUET record")]
    AlreadyCompacted {
        /// The log.
        log_id: LogId,
        /// The key.
        key: String,
    },
    /// The compaction took longer than `max_compaction_duration` before C3 took effect: its
    /// files may be reclaimed as orphans, so it must not install them.
    #[error("log {log_id}: compaction of [{start}, {end}) passed its deadline before C3")]
    DeadlinePassed {
        /// The log.
        log_id: LogId,
        /// The range start.
        start: u64,
        /// The range end.
        end: u64,
    },
    /// A caller's argument is invalid.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A record kept changing under a compare-and-set loop: concurrent writers won every
    /// round. Nothing was written; retrying may succeed.
    #[error("{what}: lost {attempts} compare-and-set races to concurrent writers")]
    Contended {
        /// The record's key.
        what: String,
        /// Writes tried.
        attempts: u32,
    },
}

impl CompactError {
    /// The class of the error.
    pub fn class(&self) -> ErrorClass {
        match self {
            CompactError::Config(_) | CompactError::InvalidInput(_) => ErrorClass::InvalidInput,
            CompactError::Meta { source, .. } => source.class(),
            CompactError::Object { source, .. } => source.class(),
            CompactError::Read(e) => e.class(),
            CompactError::Fetch { source, .. } => source.class(),
            CompactError::Encode { .. } => ErrorClass::Internal,
            CompactError::Corrupt { .. } => ErrorClass::CorruptData,
            CompactError::Lease { source, .. } => source.class(),
            CompactError::SessionEnded { .. }
            | CompactError::Busy { .. }
            | CompactError::AlreadyCompacted { .. }
            | CompactError::DeadlinePassed { .. } => ErrorClass::Conflict,
            CompactError::Contended { .. } => ErrorClass::Contended,
        }
    }

    /// Whether the log is fenced for deletion: a compaction stops retrying C3/C4 then.
    pub fn is_fenced(&self) -> bool {
        matches!(self, CompactError::Lease { source: LeaseError::Fenced { .. }, .. })
    }

    /// The change of the log's records that failed with an unknown outcome (it may still
    /// take effect), if this is such a failure: C3's Put, C4's or a hard trim's DeleteRange,
    /// C5's Put. The lease it ran under must not be released before the outcome is known.
    pub fn unknown_change(&self) -> Option<&'static str> {
        match self {
            CompactError::Meta { operation, source: MetaError::OutcomeUnknown(_), .. }
                if CHANGES_OF_A_LOG.contains(operation) =>
            {
                Some(operation)
            }
            _ => None,
        }
    }

    pub(crate) fn meta(log_id: LogId, operation: &'static str) -> impl FnOnce(MetaError) -> CompactError {
        move |source| CompactError::Meta { log_id, operation, source }
    }

    pub(crate) fn object(object: impl ToString) -> impl FnOnce(ObjectStoreError) -> CompactError {
        let object = object.to_string();
        move |source| CompactError::Object { object, source }
    }
}

/// The `operation` of a [`CompactError::Meta`] for each change of a log's records made under
/// a write lease.
pub(crate) const C3_PUT: &str = "C3 put";
pub(crate) const C4_DELETE_RANGE: &str = "C4";
pub(crate) const C5_PUT: &str = "C5 put";
pub(crate) const HARD_TRIM: &str = "hard trim";
const CHANGES_OF_A_LOG: &[&str] = &[C3_PUT, C4_DELETE_RANGE, C5_PUT, HARD_TRIM];

/// The result type of compactor operations.
pub type CompactResult<T> = Result<T, CompactError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        let fenced =
            CompactError::Lease { log_id: LogId(1), source: LeaseError::Fenced { log_id: LogId(1) } };
        assert!(fenced.is_fenced());
        assert_eq!(fenced.class(), ErrorClass::Conflict);
        let unavailable = CompactError::Meta {
            log_id: LogId(1),
            operation: "get",
            source: MetaError::Unavailable("x".into()),
        };
        assert_eq!(unavailable.class(), ErrorClass::Retryable);
        assert_eq!(CompactError::SessionEnded { log_id: LogId(1) }.class(), ErrorClass::Conflict);
        let corrupt = CompactError::Corrupt { log_id: LogId(1), what: "k".into(), detail: "d".into() };
        assert_eq!(corrupt.class(), ErrorClass::CorruptData);
        let raced = CompactError::Contended { what: "/lakestream-wal-retired/x".into(), attempts: 8 };
        assert_eq!(raced.class(), ErrorClass::Contended, "a lost race, not a transient failure");
        let mismatch = CompactError::Meta {
            log_id: LogId(1),
            operation: "C5 put",
            source: MetaError::VersionMismatch { key: "k".into(), expected: 2 },
        };
        assert_eq!(mismatch.class(), ErrorClass::Contended);
    }
}
