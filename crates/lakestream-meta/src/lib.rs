//! The metadata store of the Lakestream spec: the [`MetaStore`] trait with the spec's
//! primitives, the lease and fence protocol every role uses, the in-memory and embedded
//! (redb) backends, and a conformance suite that every backend passes.
//!
//! | module | what |
//! |---|---|
//! | [`store`] | the [`MetaStore`] and [`Session`] traits |
//! | [`key_order`] | Oxia's hierarchical key order, which every backend uses |
//! | [`memory`] | [`InMemoryStore`]: linearizable, virtual shards, for unit tests |
//! | [`embedded`] | [`EmbeddedStore`]: durable, on redb, for `lakestream dev` |
//! | [`lease`] | acquire / release / fence / drain |
//! | [`cas`] | [`cas_update`]: read-modify-write of one record by compare-and-set, with backoff |
//! | [`linearizability`] | a checker of register histories |
//! | `conformance` | the suite every backend passes (feature `testkit`) |
//! | `racing` | [`MetaStore`] wrapper whose chosen writes lose real races (feature `testkit`) |
//!
//! An append under a write lease, against the in-memory store:
//!
//! ```
//! use std::time::Duration;
//! use bytes::Bytes;
//! use lakestream_format::{LogId, keys};
//! use lakestream_meta::lease::{self, RandomTokens, TokenSource};
//! use lakestream_meta::{InMemoryStore, MetaStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = InMemoryStore::new();
//! let log = LogId(7);
//! let session = store.open_session(Duration::from_secs(15)).await?;
//! let held = lease::acquire(&store, &session, log, &RandomTokens.new_token()).await?;
//! // A3: one sequenced put per log section: 3 records, 8 payload bytes.
//! let written = store
//!     .sequenced_put(&keys::partition(log), &keys::index_prefix(log), &[3, 8], Bytes::from_static(b"entry index"))
//!     .await?;
//! assert_eq!(written.key, keys::index_key(log, 3, 8));
//! held.release(&store).await?;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

pub mod cas;
pub mod embedded;
mod engine;
pub mod error;
pub mod key_order;
pub mod lease;
pub mod linearizability;
pub mod memory;
mod sessions;
pub mod store;

#[cfg(any(test, feature = "testkit"))]
pub mod conformance;
#[cfg(any(test, feature = "testkit"))]
pub mod racing;

pub use cas::{CasError, CasOptions, CasRecord, Change, Current, UnknownOutcome, Updated, cas_update};
pub use embedded::{EmbeddedStore, OpenError};
pub use error::{MetaError, MetaResult};
pub use memory::InMemoryStore;
pub use sessions::SESSION_TIMEOUT_RANGE;
pub use store::{Comparison, MetaStore, PutCondition, Record, Session, Version, WriteResult};

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
