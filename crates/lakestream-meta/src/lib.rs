//! The metadata store of the Lakestream spec: the [`MetaStore`] trait with the spec's
//! primitives, the lease and fence protocol every role uses, the in-memory and embedded
//! (redb) backends, and a conformance suite that every backend passes.
#![deny(missing_docs)]

pub mod error;
pub mod store;

pub use error::{MetaError, MetaResult};
pub use store::{Comparison, MetaStore, PutCondition, Record, Session, Version, WriteResult};
