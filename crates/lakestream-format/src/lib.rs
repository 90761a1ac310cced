#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod clock;
pub mod compacted;
pub mod companion;
pub mod entry_index;
pub mod entry_offsets;
pub mod error;
pub mod file_index;
pub mod kafka;
pub mod keys;
pub mod legacy;
pub mod native;
pub mod retry;
mod thrift_sizes;
pub mod types;
mod varint;
pub mod wal;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{ErrorClass, FormatError, Result};
pub use types::{Entry, FileType, LogId, LogRef, Offset};
