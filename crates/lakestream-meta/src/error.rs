//! Errors of the metadata store, each with its [`ErrorClass`].

use lakestream_format::ErrorClass;

/// An error from a metadata-store operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    /// `CreateIfAbsent` found the key.
    #[error("key already exists: {key}")]
    KeyExists {
        /// The key.
        key: String,
    },
    /// `CompareAndSet` found another version, or no record.
    #[error("version mismatch on {key}: expected {expected}")]
    VersionMismatch {
        /// The key.
        key: String,
        /// The version the caller expected.
        expected: i64,
    },
    /// The request is malformed (the caller's fault); it was not sent.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The session behind an ephemeral operation has ended.
    #[error("session ended: {0}")]
    SessionEnded(String),
    /// The store could not be reached or refused for now; the request did not take effect.
    #[error("metadata store unavailable: {0}")]
    Unavailable(String),
    /// The request may or may not have taken effect (e.g. the connection broke after sending).
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// The store returned data we cannot interpret, or failed internally.
    #[error("metadata store error: {0}")]
    Internal(String),
}

impl MetaError {
    /// The class of the error, for callers that act on it.
    ///
    /// A version mismatch is a lost race ([`ErrorClass::Contended`]): the record changed
    /// since it was read, and a new read-modify-write may succeed. An existing key is the
    /// state "this name is taken" ([`ErrorClass::Conflict`]); a caller for which it means a
    /// lost race to create the record (a loop that reads and tries again, as
    /// [`crate::cas::cas_update`] does) classifies it so itself.
    pub fn class(&self) -> ErrorClass {
        match self {
            MetaError::VersionMismatch { .. } => ErrorClass::Contended,
            MetaError::KeyExists { .. } => ErrorClass::Conflict,
            MetaError::InvalidRequest(_) => ErrorClass::InvalidInput,
            // The session is over: the request cannot succeed through it.
            MetaError::SessionEnded(_) => ErrorClass::Conflict,
            MetaError::Unavailable(_) => ErrorClass::Retryable,
            MetaError::OutcomeUnknown(_) => ErrorClass::OutcomeUnknown,
            MetaError::Internal(_) => ErrorClass::Internal,
        }
    }
}

/// The result type of metadata-store operations.
pub type MetaResult<T> = Result<T, MetaError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_race_is_contention_and_a_taken_key_a_conflict() {
        let mismatch = MetaError::VersionMismatch { key: "/k".into(), expected: 3 };
        assert_eq!(mismatch.class(), ErrorClass::Contended);
        assert_eq!(MetaError::KeyExists { key: "/k".into() }.class(), ErrorClass::Conflict);
        assert_eq!(MetaError::SessionEnded("s".into()).class(), ErrorClass::Conflict);
        assert_eq!(MetaError::Unavailable("down".into()).class(), ErrorClass::Retryable);
    }
}
