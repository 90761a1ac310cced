//! The codec's error type.

use lakestream_format::ErrorClass;

/// An event or message the codec refuses. Every variant names what was wrong, and attribute
/// errors name the attribute, so an HTTP or gRPC answer can tell the sender what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CeError {
    /// An attribute (or `data` / `data_base64`) breaks a CloudEvents rule.
    #[error("invalid CloudEvent attribute {attribute:?}: {reason}")]
    InvalidAttribute {
        /// The attribute's name as it arrived (possibly itself the problem).
        attribute: String,
        /// What rule the value breaks.
        reason: String,
    },
    /// A message that is not an event at all: not JSON, not an object, a bad batch, a
    /// malformed protobuf message.
    #[error("malformed {structure}: {reason}")]
    Malformed {
        /// The structure being decoded, e.g. `"JSON batch"`.
        structure: &'static str,
        /// What was wrong with it.
        reason: String,
    },
    /// Stored bytes (a Kafka record batch) that break the record layout.
    #[error("corrupt {structure}: {reason}")]
    Corrupt {
        /// The structure being decoded.
        structure: &'static str,
        /// What rule the bytes break.
        reason: String,
    },
}

impl CeError {
    /// Builds a [`CeError::InvalidAttribute`].
    pub fn attribute(attribute: impl Into<String>, reason: impl Into<String>) -> Self {
        CeError::InvalidAttribute { attribute: attribute.into(), reason: reason.into() }
    }

    /// Builds a [`CeError::Malformed`].
    pub fn malformed(structure: &'static str, reason: impl Into<String>) -> Self {
        CeError::Malformed { structure, reason: reason.into() }
    }

    /// Builds a [`CeError::Corrupt`].
    pub fn corrupt(structure: &'static str, reason: impl Into<String>) -> Self {
        CeError::Corrupt { structure, reason: reason.into() }
    }

    /// The attribute this error names, if it is about one.
    pub fn attribute_name(&self) -> Option<&str> {
        match self {
            CeError::InvalidAttribute { attribute, .. } => Some(attribute),
            _ => None,
        }
    }

    /// What a caller should do about the error: bad events and messages are the sender's
    /// fault; a stored batch that does not parse is corrupt data.
    pub fn class(&self) -> ErrorClass {
        match self {
            CeError::InvalidAttribute { .. } | CeError::Malformed { .. } => ErrorClass::InvalidInput,
            CeError::Corrupt { .. } => ErrorClass::CorruptData,
        }
    }
}

/// The codec's result type.
pub type Result<T> = std::result::Result<T, CeError>;
