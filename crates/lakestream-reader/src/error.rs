//! Read errors, each with its class.

use lakestream_format::{ErrorClass, LogId};
use lakestream_meta::MetaError;
use lakestream_objstore::ObjectStoreError;

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A metadata-store error.
    #[error("reading log {log_id}: metadata store: {source}")]
    Meta {
        /// The log.
        log_id: LogId,
        /// The store's error.
        source: MetaError,
    },
    /// An object-store error other than a missing object.
    #[error("reading log {log_id}: object {object}: {source}")]
    Object {
        /// The log.
        log_id: LogId,
        /// The object's name.
        object: String,
        /// The store's error.
        source: ObjectStoreError,
    },
    /// The object a record names stayed missing after looking the record up again.
    #[error("reading log {log_id}: object {object} named by {key} is missing")]
    MissingObject {
        /// The log.
        log_id: LogId,
        /// The object's name.
        object: String,
        /// The index record naming it.
        key: String,
    },
    /// Stored bytes or records that break a rule of the format.
    #[error("reading log {log_id}: corrupt data in {what}: {detail}")]
    Corrupt {
        /// The log.
        log_id: LogId,
        /// The record or object.
        what: String,
        /// The rule broken.
        detail: String,
    },
}

impl ReadError {
    /// The class of the error.
    pub fn class(&self) -> ErrorClass {
        match self {
            ReadError::Meta { source, .. } => source.class(),
            ReadError::Object { source, .. } => source.class(),
            ReadError::MissingObject { .. } => ErrorClass::NotFound,
            ReadError::Corrupt { .. } => ErrorClass::CorruptData,
        }
    }
}
