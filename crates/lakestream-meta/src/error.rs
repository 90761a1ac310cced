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
    pub fn class(&self) -> ErrorClass {
        match self {
            MetaError::KeyExists { .. } | MetaError::VersionMismatch { .. } => ErrorClass::Conflict,
            MetaError::InvalidRequest(_) => ErrorClass::InvalidInput,
            MetaError::SessionEnded(_) => ErrorClass::Conflict,
            MetaError::Unavailable(_) => ErrorClass::Retryable,
            MetaError::OutcomeUnknown(_) => ErrorClass::OutcomeUnknown,
            MetaError::Internal(_) => ErrorClass::Internal,
        }
    }
}

/// The result type of metadata-store operations.
pub type MetaResult<T> = Result<T, MetaError>;
