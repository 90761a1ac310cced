#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
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
