//! Errors of the format codecs, and the error classes every Lakestream crate reports.

/// The class of an error: what a caller should do about it. Every crate's error type can say
/// which class it is, and services map classes to HTTP and gRPC status codes in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// The caller's fault (a bad argument or request). Never retried.
    InvalidInput,
    /// A transient failure (throttling, leader change, timeout before sending). Safe to retry.
    Retryable,
    /// A write that may or may not have taken effect. Never reported as failed.
    OutcomeUnknown,
    /// The state forbids the request (a fenced log, a dropped stream, an existing name):
    /// retrying the same request will not help.
    Conflict,
    /// A lost race with a concurrent change (a compare-and-set that found another version,
    /// or a loop of them that kept losing): nothing was changed, and retrying — which reads
    /// the new state first — may succeed.
    Contended,
    /// The thing asked for does not exist.
    NotFound,
    /// Stored bytes that break a format rule.
    CorruptData,
    /// A bug or an unexpected state of our own.
    Internal,
}

/// An error decoding or encoding a Lakestream structure. Each variant names the structure and
/// what was wrong with it, so that an operator can tell which object or record is broken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Bytes that break a rule of the format.
    #[error("corrupt {structure}: {detail}")]
    Corrupt {
        /// The structure being decoded, e.g. `"WAL object"`.
        structure: &'static str,
        /// What rule the bytes break, with the values involved.
        detail: String,
    },
    /// A format version or identifier this implementation does not read.
    #[error("unsupported {structure}: {detail}")]
    Unsupported {
        /// The structure being decoded.
        structure: &'static str,
        /// The version or identifier found, and what is supported.
        detail: String,
    },
    /// A value passed to an encoder that the format cannot represent.
    #[error("invalid input for {structure}: {detail}")]
    InvalidInput {
        /// The structure being encoded.
        structure: &'static str,
        /// What was wrong with the value.
        detail: String,
    },
}

impl FormatError {
    /// Builds a [`FormatError::Corrupt`].
    pub fn corrupt(structure: &'static str, detail: impl Into<String>) -> Self {
        FormatError::Corrupt { structure, detail: detail.into() }
    }

    /// Builds a [`FormatError::Unsupported`].
    pub fn unsupported(structure: &'static str, detail: impl Into<String>) -> Self {
        FormatError::Unsupported { structure, detail: detail.into() }
    }

    /// Builds a [`FormatError::InvalidInput`].
    pub fn invalid(structure: &'static str, detail: impl Into<String>) -> Self {
        FormatError::InvalidInput { structure, detail: detail.into() }
    }

    /// The error's class: decoding errors are corrupt data, encoding errors invalid input.
    pub fn class(&self) -> ErrorClass {
        match self {
            FormatError::Corrupt { .. } | FormatError::Unsupported { .. } => ErrorClass::CorruptData,
            FormatError::InvalidInput { .. } => ErrorClass::InvalidInput,
        }
    }
}

/// The result type of the format codecs.
pub type Result<T, E = FormatError> = std::result::Result<T, E>;
