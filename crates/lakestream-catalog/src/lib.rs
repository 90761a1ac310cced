//! The Catalog role of the Lakestream storage format v3, over any
//! [`MetaStore`](lakestream_meta::MetaStore).
//!
//! A catalog creates and deletes streams and their logs. It hands out log IDs that no log
//! of the deployment ever had ([`allocator`]), keeps each stream's *layout* (its logs in
//! partition order) and publishes a grown layout atomically after the new logs exist
//! ([`Catalog::add_partitions`]), records a durable tombstone for every dropped identity,
//! and deletes a log by fencing it, waiting for its write leases to drain, and removing its
//! index records ([`Catalog::delete_log`]). Readers and compactors learn which stream a log
//! belongs to from [`Catalog::open_log`], which never changes anything.
//!
//! | module | what |
//! |---|---|
//! | [`catalog`] | the [`Catalog`] and the types it returns |
//! | [`records`] | keys and JSON values of the catalog's records |
//! | [`allocator`] | the log-ID counter and why it never repeats an ID |
//! | [`names`] | name rules, and the Kafka binding's stream identity |
//! | [`config`] | [`CatalogConfig`] |
//! | [`error`] | [`CatalogError`] and its classes |
//!
//! `docs/catalog.md` in the repository describes every record, the protocols and their
//! crash safety.
//!
//! # Example
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::sync::Arc;
//!
//! use lakestream_catalog::{Catalog, CatalogConfig, Growth};
//! use lakestream_meta::InMemoryStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lakestream_catalog::CatalogError> {
//! let catalog = Catalog::new(Arc::new(InMemoryStore::new()), CatalogConfig::default())?;
//! catalog.create_namespace("default", BTreeMap::new()).await?;
//! let stream = catalog.create_stream("default", "orders", 2, BTreeMap::new()).await?;
//! assert_eq!(stream.partition_count(), 2);
//!
//! // A reader resolves a log ID to the stream it belongs to; this changes nothing.
//! let info = catalog.open_log(stream.logs[1]).await?;
//! assert_eq!((info.log_ref.stream.as_str(), info.partition), ("orders", 1));
//!
//! let grown = catalog.add_partitions("default", "orders", Growth::To(3)).await?;
//! assert_eq!(&grown.logs[..2], &stream.logs[..]);
//!
//! catalog.drop_stream("default", "orders").await?;
//! assert!(catalog.create_stream("default", "orders", 1, BTreeMap::new()).await.is_err());
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

pub mod allocator;
pub mod catalog;
pub mod config;
pub mod error;
pub mod names;
pub mod records;

pub use catalog::{BINDING_PROPERTIES, Catalog, Growth, LogInfo, Namespace, Page, Stream};
pub use config::CatalogConfig;
pub use error::{CatalogError, NameKind, NameRule, Result};
pub use names::{KAFKA_NAMESPACE, MAX_NAME_BYTES, kafka_stream_name};

/// Runs the README's example as a doctest, so that it cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
