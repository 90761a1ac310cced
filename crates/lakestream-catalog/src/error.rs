//! The catalog's error type, with the [`ErrorClass`] of each variant.

use std::time::Duration;

use lakestream_format::{ErrorClass, LogId};
use lakestream_meta::{CasError, MetaError};

/// Which kind of name a [`CatalogError::InvalidName`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// A stream namespace.
    Namespace,
    /// A stream name.
    Stream,
}

impl std::fmt::Display for NameKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NameKind::Namespace => "namespace",
            NameKind::Stream => "stream",
        })
    }
}

/// The name rule a namespace or stream name breaks (see [`crate::names`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameRule {
    /// The name is empty.
    #[error("a name must not be empty")]
    Empty,
    /// Spec: a namespace or stream name MUST NOT contain `/` in format version 3.
    #[error(
        "a name must not contain '/' (found at byte {byte_index}); spec v3 keeps each stream directory two levels below the compacted root"
    )]
    ContainsSlash {
        /// Where the `/` is.
        byte_index: usize,
    },
    /// The name is `.` or `..`, which file-system object stores would resolve as path steps.
    #[error("a name must not be \".\" or \"..\"")]
    DotSegment,
    /// The name contains a control character.
    #[error("a name must not contain control characters (found U+{code_point:04X} at byte {byte_index})")]
    ControlCharacter {
        /// Where the character is.
        byte_index: usize,
        /// The character's code point.
        code_point: u32,
    },
    /// The name contains a Unicode noncharacter (such as U+FFFF or U+10FFFF).
    #[error("a name must not contain Unicode noncharacters (found U+{code_point:04X} at byte {byte_index})")]
    Noncharacter {
        /// Where the character is.
        byte_index: usize,
        /// The character's code point.
        code_point: u32,
    },
    /// The name is longer than [`crate::names::MAX_NAME_BYTES`].
    #[error("a name must be at most {max} UTF-8 bytes (this one has {bytes})")]
    TooLong {
        /// The name's length in bytes.
        bytes: usize,
        /// The limit.
        max: usize,
    },
}

/// An error of a catalog operation. [`CatalogError::class`] says what a caller should do.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// A namespace or stream name breaks a name rule.
    #[error("invalid {kind} name {name:?}: {rule}")]
    InvalidName {
        /// Namespace or stream.
        kind: NameKind,
        /// The name as given.
        name: String,
        /// The rule it breaks.
        rule: NameRule,
    },
    /// Another argument is out of range (a partition count, a page size, a Kafka topic).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The catalog configuration is unusable.
    #[error("invalid catalog configuration: {0}")]
    InvalidConfig(String),
    /// No namespace has this name.
    #[error("namespace {namespace:?} not found")]
    NamespaceNotFound {
        /// The namespace.
        namespace: String,
    },
    /// A namespace with this name exists already.
    #[error("namespace {namespace:?} already exists")]
    NamespaceExists {
        /// The namespace.
        namespace: String,
    },
    /// The namespace still holds live streams (or is being deleted by another caller).
    #[error("namespace {namespace:?} is not empty: it holds {streams} live stream(s); drop them first")]
    NamespaceNotEmpty {
        /// The namespace.
        namespace: String,
        /// How many live streams it holds (counted when the deletion was refused).
        streams: usize,
    },
    /// No stream has this identity.
    #[error("stream {namespace}/{stream} not found")]
    StreamNotFound {
        /// The namespace.
        namespace: String,
        /// The stream name.
        stream: String,
    },
    /// A live stream with this identity exists already.
    #[error("stream {namespace}/{stream} already exists")]
    StreamExists {
        /// The namespace.
        namespace: String,
        /// The stream name.
        stream: String,
    },
    /// The identity has been dropped: its tombstone forbids creating it again, and the stream
    /// can no longer be changed. A re-created stream needs a new identity (a new incarnation,
    /// as [`crate::names::kafka_stream_name`] builds for Kafka topics).
    #[error("stream {namespace}/{stream} has been dropped; its identity cannot be used again")]
    StreamDropped {
        /// The namespace.
        namespace: String,
        /// The stream name.
        stream: String,
    },
    /// No published layout names this log.
    #[error("log {log_id} not found")]
    LogNotFound {
        /// The log ID.
        log_id: LogId,
    },
    /// The log belongs to a live stream; deleting it alone would leave a layout naming a
    /// deleted log. Drop the stream instead.
    #[error("log {log_id} belongs to the live stream {namespace}/{stream}; drop the stream to delete it")]
    LogInUse {
        /// The log ID.
        log_id: LogId,
        /// The stream's namespace.
        namespace: String,
        /// The stream's name.
        stream: String,
    },
    /// Deleting a log stopped waiting while lease records remained. The log is fenced, and
    /// nothing else changed: its records stay until a later deletion finds no lease.
    #[error(
        "log {log_id} is fenced but {} lease record(s) remained after waiting {waited:?}: {remaining:?}; \
         nothing was deleted and the fence stays",
        remaining.len()
    )]
    LeasesRemain {
        /// The log ID.
        log_id: LogId,
        /// The lease record keys still present when waiting stopped.
        remaining: Vec<String>,
        /// How long the catalog waited.
        waited: Duration,
    },
    /// The log-ID counter cannot hand out this many more IDs without passing `2^63 - 1`.
    #[error("log IDs exhausted: the next free ID is {next}, and {requested} more would pass 2^63-1")]
    LogIdsExhausted {
        /// The counter's value.
        next: u64,
        /// How many IDs were asked for.
        requested: u64,
    },
    /// A catalog record's bytes cannot be read.
    #[error("corrupt catalog record {key}: {detail}")]
    CorruptRecord {
        /// The record's key.
        key: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A write would break a rule of the record's life (see [`crate::records`]): a bug of
    /// this catalog; nothing was written.
    #[error("catalog record {key}: refused a write that breaks a rule: {rule}")]
    InvariantBroken {
        /// The record's key.
        key: String,
        /// The rule, with the values involved.
        rule: String,
    },
    /// A compare-and-set loop lost more times than the configured bound allows: concurrent
    /// changes of the same record kept winning. Nothing was changed; retrying may succeed.
    #[error("gave up on {key} after {attempts} lost compare-and-set attempts")]
    Contended {
        /// The contended record's key.
        key: String,
        /// How many attempts were made.
        attempts: u32,
    },
    /// The metadata store failed.
    #[error("metadata store: {0}")]
    Meta(#[from] MetaError),
}

impl CatalogError {
    /// The class of the error. One arm per variant, no wildcard, so that a new variant must
    /// be classified.
    pub fn class(&self) -> ErrorClass {
        match self {
            CatalogError::InvalidName { .. }
            | CatalogError::InvalidArgument(_)
            | CatalogError::InvalidConfig(_) => ErrorClass::InvalidInput,
            CatalogError::NamespaceNotFound { .. }
            | CatalogError::StreamNotFound { .. }
            | CatalogError::LogNotFound { .. } => ErrorClass::NotFound,
            CatalogError::NamespaceExists { .. }
            | CatalogError::NamespaceNotEmpty { .. }
            | CatalogError::StreamExists { .. }
            | CatalogError::StreamDropped { .. }
            | CatalogError::LogInUse { .. }
            | CatalogError::LeasesRemain { .. } => ErrorClass::Conflict,
            CatalogError::LogIdsExhausted { .. } | CatalogError::InvariantBroken { .. } => {
                ErrorClass::Internal
            }
            CatalogError::CorruptRecord { .. } => ErrorClass::CorruptData,
            // A lost race, as a lost compare-and-set is everywhere (not a transient failure).
            CatalogError::Contended { .. } => ErrorClass::Contended,
            CatalogError::Meta(e) => e.class(),
        }
    }

    pub(crate) fn corrupt(key: &str, detail: impl Into<String>) -> Self {
        CatalogError::CorruptRecord { key: key.to_owned(), detail: detail.into() }
    }
}

impl From<CasError<CatalogError>> for CatalogError {
    fn from(e: CasError<CatalogError>) -> Self {
        match e {
            CasError::Record(e) => e,
            CasError::Contended { key, attempts } => CatalogError::Contended { key, attempts },
            CasError::Meta(e) => CatalogError::Meta(e),
        }
    }
}

/// The result type of catalog operations.
pub type Result<T, E = CatalogError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_the_error_contract() {
        let log_id = LogId(7);
        let cases = [
            (CatalogError::LogNotFound { log_id }, ErrorClass::NotFound),
            (CatalogError::StreamExists { namespace: "n".into(), stream: "s".into() }, ErrorClass::Conflict),
            (CatalogError::StreamDropped { namespace: "n".into(), stream: "s".into() }, ErrorClass::Conflict),
            (
                CatalogError::LeasesRemain { log_id, remaining: vec![], waited: Duration::ZERO },
                ErrorClass::Conflict,
            ),
            (
                CatalogError::InvalidName { kind: NameKind::Stream, name: "".into(), rule: NameRule::Empty },
                ErrorClass::InvalidInput,
            ),
            (CatalogError::Meta(MetaError::Unavailable("x".into())), ErrorClass::Retryable),
            (CatalogError::Meta(MetaError::OutcomeUnknown("x".into())), ErrorClass::OutcomeUnknown),
            (CatalogError::corrupt("k", "bad"), ErrorClass::CorruptData),
            // A lost race is contention, whether the loop gave up or one CAS reported it.
            (CatalogError::Contended { key: "k".into(), attempts: 3 }, ErrorClass::Contended),
            (
                CatalogError::Meta(MetaError::VersionMismatch { key: "k".into(), expected: 1 }),
                ErrorClass::Contended,
            ),
            (CatalogError::InvariantBroken { key: "k".into(), rule: "r".into() }, ErrorClass::Internal),
        ];
        for (err, class) in cases {
            assert_eq!(err.class(), class, "{err}");
        }
    }
}
