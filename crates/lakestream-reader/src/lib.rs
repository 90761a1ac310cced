//! The Reader role of the Lakestream spec: reads R1–R4 from RAW and PARQUET index records.
//!
//! A [`Reader`] needs no lease and no catalog: it takes a [`lakestream_format::LogRef`]
//! (log ID, namespace, stream), which the caller resolves, so other teams can read logs with
//! any catalog. It keeps an LRU cache of immutable objects bounded in bytes, batches reads
//! over consecutive index records, looks a covering record up again when its object is
//! missing, and waits for new data on tail reads without busy loops.
#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod cache;
pub mod config;
mod error;
mod reader;

pub use config::{ConfigError, ReaderConfig, WalReadMode};
pub use error::ReadError;
pub use reader::{ReadBatch, Reader, ReaderDeps};
