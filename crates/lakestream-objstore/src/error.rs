//! Errors of object-store operations, each with its [`ErrorClass`].

use lakestream_format::ErrorClass;

/// An error from an object-store operation. Every variant names the object (or the
/// operation) involved, so that an operator can tell what failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectStoreError {
    /// A path, prefix or root that breaks the naming rules. Nothing was sent.
    #[error("invalid object path {path:?}: {reason}")]
    InvalidPath {
        /// The rejected text.
        path: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A byte range that is malformed or lies beyond the end of the object.
    #[error("invalid range {range} for object {path}: {reason}")]
    InvalidRange {
        /// The object.
        path: String,
        /// The range asked for.
        range: String,
        /// Why it cannot be served (with the object size when known).
        reason: String,
    },
    /// A write-once `put` found the name taken.
    #[error("object already exists: {path}")]
    AlreadyExists {
        /// The object.
        path: String,
    },
    /// The object does not exist.
    #[error("object not found: {path}")]
    NotFound {
        /// The object.
        path: String,
    },
    /// The store asked us to slow down (HTTP 503 SlowDown, 429). Did not take effect.
    #[error("throttled during {operation} of {path}: {detail}")]
    Throttled {
        /// The operation, e.g. `"put"`.
        operation: &'static str,
        /// The object or prefix.
        path: String,
        /// What the store said.
        detail: String,
    },
    /// The store could not be reached or failed transiently (HTTP 500, connection refused,
    /// a timeout before the request was sent). Did not take effect.
    #[error("object store unavailable during {operation} of {path}: {detail}")]
    Unavailable {
        /// The operation.
        operation: &'static str,
        /// The object or prefix.
        path: String,
        /// What went wrong.
        detail: String,
    },
    /// A write was sent but no answer came back in time: it may or may not have taken
    /// effect. Callers must not treat it as failed (e.g. must not reuse the name).
    #[error("outcome unknown: {operation} of {path} timed out after the request was sent: {detail}")]
    TimedOutAfterSend {
        /// The operation.
        operation: &'static str,
        /// The object.
        path: String,
        /// What went wrong.
        detail: String,
    },
    /// The bytes read do not match the checksum the store holds for them.
    #[error("checksum mismatch for object {path}: {algorithm} stored {expected}, computed {actual}")]
    ChecksumMismatch {
        /// The object.
        path: String,
        /// The algorithm, e.g. `"CRC32C"`.
        algorithm: &'static str,
        /// The checksum the store reported.
        expected: String,
        /// The checksum of the bytes received.
        actual: String,
    },
    /// A configuration value that cannot work. Names the field.
    #[error("invalid object-store configuration: {field}: {reason}")]
    InvalidConfig {
        /// The field, e.g. `"multipart_part_size"`.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// A local I/O failure or an answer from the store we cannot interpret.
    #[error("object store error during {operation} of {path}: {detail}")]
    Backend {
        /// The operation.
        operation: &'static str,
        /// The object or prefix.
        path: String,
        /// What went wrong.
        detail: String,
    },
}

impl ObjectStoreError {
    /// The class of the error, for callers that act on it. One `match`, no wildcard arm, so
    /// every new variant must be classified.
    pub fn class(&self) -> ErrorClass {
        match self {
            ObjectStoreError::InvalidPath { .. }
            | ObjectStoreError::InvalidRange { .. }
            | ObjectStoreError::InvalidConfig { .. } => ErrorClass::InvalidInput,
            ObjectStoreError::AlreadyExists { .. } => ErrorClass::Conflict,
            ObjectStoreError::NotFound { .. } => ErrorClass::NotFound,
            ObjectStoreError::Throttled { .. } | ObjectStoreError::Unavailable { .. } => {
                ErrorClass::Retryable
            }
            ObjectStoreError::TimedOutAfterSend { .. } => ErrorClass::OutcomeUnknown,
            ObjectStoreError::ChecksumMismatch { .. } => ErrorClass::CorruptData,
            ObjectStoreError::Backend { .. } => ErrorClass::Internal,
        }
    }

    /// Builds an [`ObjectStoreError::InvalidPath`].
    pub fn invalid_path(path: &str, reason: &'static str) -> Self {
        ObjectStoreError::InvalidPath { path: path.to_owned(), reason }
    }

    /// Builds an [`ObjectStoreError::NotFound`].
    pub fn not_found(path: impl ToString) -> Self {
        ObjectStoreError::NotFound { path: path.to_string() }
    }

    /// Builds an [`ObjectStoreError::AlreadyExists`].
    pub fn already_exists(path: impl ToString) -> Self {
        ObjectStoreError::AlreadyExists { path: path.to_string() }
    }

    /// Builds an [`ObjectStoreError::Backend`].
    pub fn backend(operation: &'static str, path: impl ToString, detail: impl ToString) -> Self {
        ObjectStoreError::Backend { operation, path: path.to_string(), detail: detail.to_string() }
    }
}

/// The result type of object-store operations.
pub type ObjectResult<T> = Result<T, ObjectStoreError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_the_error_model() {
        let s = || "p".to_owned();
        let cases = [
            (ObjectStoreError::invalid_path("x", "r"), ErrorClass::InvalidInput),
            (ObjectStoreError::InvalidRange { path: s(), range: s(), reason: s() }, ErrorClass::InvalidInput),
            (ObjectStoreError::InvalidConfig { field: "f", reason: s() }, ErrorClass::InvalidInput),
            (ObjectStoreError::already_exists("p"), ErrorClass::Conflict),
            (ObjectStoreError::not_found("p"), ErrorClass::NotFound),
            (ObjectStoreError::Throttled { operation: "put", path: s(), detail: s() }, ErrorClass::Retryable),
            (
                ObjectStoreError::Unavailable { operation: "put", path: s(), detail: s() },
                ErrorClass::Retryable,
            ),
            (
                ObjectStoreError::TimedOutAfterSend { operation: "put", path: s(), detail: s() },
                ErrorClass::OutcomeUnknown,
            ),
            (
                ObjectStoreError::ChecksumMismatch {
                    path: s(),
                    algorithm: "CRC32C",
                    expected: s(),
                    actual: s(),
                },
                ErrorClass::CorruptData,
            ),
            (ObjectStoreError::backend("get", "p", "d"), ErrorClass::Internal),
        ];
        for (error, class) in cases {
            assert_eq!(error.class(), class, "{error}");
        }
    }
}
