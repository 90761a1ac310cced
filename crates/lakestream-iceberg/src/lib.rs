//! Streams as Apache Iceberg tables (issue #23): each compacted offset range of a log is
//! appended, exactly once, to its stream's table, which Spark, Trino, DuckDB and pyiceberg
//! query through the same catalog. `docs/tables.md` is the user's guide.
//!
//! | module | what |
//! |---|---|
//! | [`schema`] | the two row layouts (Kafka records, entries), their Iceberg and Arrow schemas, `day(timestamp)` partitioning |
//! | [`files`] | rows from entries (Kafka batches decoded by `lakestream_format::kafka`), Parquet data files and their Iceberg entries |
//! | [`tables`] | [`Tables`]: a table per stream, [`Tables::stage`] and [`Tables::commit`], the exactly-once protocol |
//! | [`maintenance`] | trims (a snapshot without the trimmed files), snapshot expiry, deletion of unreferenced files, dropping a table |
//! | [`storage`] | Iceberg file I/O on a Lakestream `ObjectStore` (tables live in the compacted root) |
//! | [`catalog`] | the Iceberg SQL catalog on SQLite or PostgreSQL |
//! | [`config`] | `[tables]` settings, validated with the key named |
//!
//! Table metadata, manifests and the commit come from `iceberg` (apache/iceberg-rust) and its
//! SQL catalog; data files are written with the workspace's `parquet` crate, with Iceberg
//! field ids in their schema.
//!
//! ```no_run
//! # async fn run(store: std::sync::Arc<dyn lakestream_objstore::ObjectStore>) -> Result<(), lakestream_iceberg::TablesError> {
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use lakestream_format::Entry;
//! use lakestream_iceberg::{LogRange, StreamRef, Tables, TablesConfig};
//!
//! let config = TablesConfig { uri: Some("sqlite:///tmp/catalog.db".into()), ..TablesConfig::default() };
//! let tokens = Arc::new(|| "0f6c2a8e".to_owned()); // unique per call in real use
//! let tables = Tables::connect(&config, store, "file:///var/lakestream/compacted", tokens).await?;
//! let stream = StreamRef::new("default", "orders");
//! let entry = Entry { offset: 0, record_count: 1, timestamp_ms: 1_700_000_000_000, payload: Bytes::from("hi") };
//! let range = LogRange { log_id: 7, partition: 0, start: 0, end: 1, entries: vec![entry] };
//! let report = tables.append(&stream, vec![range]).await?;
//! assert_eq!(report.committed.len(), 1);
//! assert_eq!(tables.watermarks(&stream).await?.get(&7), Some(&1));
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod catalog;
pub mod config;
mod error;
pub mod files;
pub mod maintenance;
pub mod schema;
pub mod storage;
pub mod tables;

pub use config::{TABLE_ICEBERG, TABLE_NONE, TABLE_PROPERTY, TablesConfig};
pub use error::{TablesError, TablesResult};
pub use files::LogRange;
pub use maintenance::{CleanReport, MaintenanceOptions, TrimReport};
pub use schema::Layout;
pub use tables::{
    CommitReport, RangeOutcome, StagedAppend, StagedRange, StreamRef, Tables, TokenFn, watermarks_of,
};

/// Runs the README's example as a doctest, so that it cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
