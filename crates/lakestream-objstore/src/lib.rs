//! Object storage for Lakestream: the spec's three object-storage operations ("Write once",
//! "Read" whole or by byte range, "Delete"), plus head and list, as one async trait.
//!
//! | item | what it is |
//! |---|---|
//! | [`ObjectStore`] | the trait; object-safe, used as `Arc<dyn ObjectStore>` |
//! | [`Upload`] | an object written piece by piece, visible whole at `complete` |
//! | [`ObjectPath`], [`ObjectPrefix`], [`ObjectRoot`] | validated names; a root is a bucket plus a key prefix |
//! | [`ByteRange`] | `Bounded(start..end)`, `From(start)`, `Suffix(n)` |
//! | [`ObjectStoreError`] | errors, each with an [`ErrorClass`](lakestream_format::ErrorClass) |
//! | [`LocalFsStore`] | files below a directory: the embedded default |
//! | [`InMemoryStore`] | a map in memory, for unit tests |
//! | [`FaultyStore`] | a seeded fault-injecting wrapper for reliability tests |
//! | `CountingStore` | a wrapper counting GETs (whole, ranged, per object), bytes fetched, HEADs and PUTs (feature `testkit`) |
//! | `conformance` | the suite every backend passes (feature `testkit`) |
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use lakestream_format::SystemClock;
//! use lakestream_objstore::{ByteRange, InMemoryStore, ObjectPath, ObjectStore};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store: Arc<dyn ObjectStore> = Arc::new(InMemoryStore::new(Arc::new(SystemClock)));
//! let path = ObjectPath::new("wal/00000001.wal")?;
//! store.put(&path, Bytes::from_static(b"hello world")).await?;
//! assert_eq!(store.get_range(&path, ByteRange::Suffix(5)).await?, Bytes::from_static(b"world"));
//! assert!(store.put(&path, Bytes::new()).await.is_err()); // write once
//! # Ok::<(), lakestream_objstore::ObjectStoreError>(())
//! # }).unwrap();
//! ```
#![deny(missing_docs)]

pub mod error;
pub mod faulty;
pub mod local;
pub mod memory;
pub mod path;
pub mod range;
pub mod store;

#[cfg(any(test, feature = "testkit"))]
pub mod conformance;
#[cfg(any(test, feature = "testkit"))]
pub mod counting;

#[cfg(any(test, feature = "testkit"))]
pub use counting::{CountingStore, Counts};
pub use error::{ObjectResult, ObjectStoreError};
pub use faulty::{FaultConfig, FaultKind, FaultyStore, InjectedFault, Operation, OperationFaults};
pub use local::LocalFsStore;
pub use memory::InMemoryStore;
pub use path::{ObjectPath, ObjectPrefix, ObjectRoot};
pub use range::ByteRange;
pub use store::{ObjectMeta, ObjectStore, Upload, WriteOnce};
