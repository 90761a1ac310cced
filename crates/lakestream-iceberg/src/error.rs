//! Errors of table operations.

/// Why a table operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TablesError {
    /// A setting is invalid; names its key (`tables.…`).
    #[error("{key}: {message}")]
    Config {
        /// The key, e.g. `tables.uri`.
        key: String,
        /// Why.
        message: String,
    },
    /// The catalog could not be reached or refused an operation.
    #[error("iceberg catalog ({what}): {source}")]
    Catalog {
        /// The operation.
        what: String,
        /// The catalog's error.
        #[source]
        source: Box<iceberg::Error>,
    },
    /// A data file could not be encoded.
    #[error("data file for {table}: {message}")]
    Encode {
        /// The table.
        table: String,
        /// Why.
        message: String,
    },
    /// The object store failed.
    #[error("object store ({path}): {source}")]
    Objects {
        /// The object.
        path: String,
        /// The store's error.
        #[source]
        source: Box<lakestream_objstore::ObjectStoreError>,
    },
    /// A range handed to the table is malformed (not the caller's data error: a bug or a
    /// corrupt log).
    #[error("invalid range for {table}: {message}")]
    InvalidRange {
        /// The table.
        table: String,
        /// Why.
        message: String,
    },
}

impl TablesError {
    pub(crate) fn catalog(what: impl Into<String>) -> impl FnOnce(iceberg::Error) -> TablesError {
        let what = what.into();
        move |source| TablesError::Catalog { what, source: Box::new(source) }
    }
}

/// The result of table operations.
pub type TablesResult<T> = Result<T, TablesError>;
