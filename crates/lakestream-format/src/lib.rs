//! Pure codecs for the Lakestream storage format, version 3.
//!
//! Everything here turns bytes into values and values into bytes: no I/O, no async, no
//! global state. The other crates (writer, reader, compactor, catalog) do the I/O and call
//! these codecs. Each module owns one persisted structure of the spec:
//!
//! | module | structure (spec section) |
//! |---|---|
//! | [`keys`] | offset index keys `K(L, x, y)`, `P(L)`, trim marker, fence and lease keys |
//! | [`wal`] | WAL objects: index region with log sections, payload region |
//! | [`entry_index`] | `EntryIndex` values of RAW and PARQUET index records |
//! | [`entry_offsets`] | JavaFastPFOR 0.2.1 `IntegratedIntCompressor` words (Appendix D) |
//! | [`file_index`] | the `CompactedObjectFileIndex` of a PARQUET record |
//! | [`companion`] | the gzip `.index` companion of a compacted file |
//! | [`compacted`] | compacted Parquet files (one nullable BINARY column `payload`) |
//! | [`kafka`] | the Kafka binding (Appendix A): record-batch validation and stream identity |
//! | [`native`] | the native binding of every stream that is not a Kafka topic |
//! | [`legacy`] | read-only parsers for format versions 1 and 2 (Appendix C) |
//!
//! Beside them, values every crate shares: [`ErrorClass`], the [`Clock`], and the one retry
//! policy ([`retry`]: exponential backoff with full, seeded jitter).
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
pub mod types;
mod varint;
pub mod wal;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{ErrorClass, FormatError, Result};
pub use types::{Entry, FileType, LogId, LogRef, Offset};

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
