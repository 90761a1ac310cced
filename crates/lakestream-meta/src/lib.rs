#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
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
pub mod hooked;
#[cfg(any(test, feature = "testkit"))]
pub mod test_rng;

pub use cas::{CasError, CasOptions, CasRecord, Change, Current, UnknownOutcome, Updated, cas_update};
pub use embedded::{EmbeddedStore, OpenError};
pub use error::{MetaError, MetaResult};
pub use memory::InMemoryStore;
pub use sessions::SESSION_TIMEOUT_RANGE;
pub use store::{Comparison, MetaStore, PutCondition, Record, Session, Version, WriteResult};
