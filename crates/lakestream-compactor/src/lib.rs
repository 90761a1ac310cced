//! The Compactor role of the Lakestream spec: compaction of RAW records into Parquet files
//! with companions (C1–C5), scheduling, hard trim, and reclamation of compacted files and
//! WAL objects.
//!
//! | module | what |
//! |---|---|
//! | [`plan`] | which range to compact next (C1, closing by size or age), as a pure function |
//! | [`compactor`] | [`Compactor`]: claim, C2 data, C3 install, C4 retire, C5 progress, `compact_once` |
//! | `fetch` | C2's reads: each WAL object once for all the logs of a pass, fetched ahead |
//! | [`trim`] | hard trim, deleting compacted files before the records naming them |
//! | [`ledger`] | the WAL retirement ledger in the metadata store |
//! | [`gc`] | `gc_once`: WAL objects after a grace period, orphaned compacted files |
//! | [`names`] | compacted file names (`ls-{L}-{uuid}.parquet`) and WAL name times |
//! | [`progress`] | progress events and reports |
//!
//! The crate takes the logs to compact as [`CompactionLog`]s — a [`lakestream_format::LogRef`]
//! and the binding of its stream, which names the compacted files (the catalog resolves both:
//! [`lakestream_format::native::binding_of_stream`] of the stream's properties) — and knows
//! nothing of the catalog. Time and randomness come from the
//! injected [`lakestream_format::Clock`] and [`lakestream_meta::lease::TokenSource`].
//! `docs/compaction.md` gives the design and the safety argument.
//!
//! ```no_run
//! # async fn run(deps: lakestream_compactor::CompactorDeps, logs: Vec<lakestream_format::LogRef>) {
//! use lakestream_compactor::{Compactor, CompactorConfig, no_progress};
//! let compactor = Compactor::new(CompactorConfig::default(), deps).unwrap();
//! let report = compactor.compact_once(&logs, &no_progress).await;
//! println!("{} ranges, {} bytes", report.ranges.len(), report.payload_bytes);
//! let gc = compactor.gc_once(&no_progress).await.unwrap();
//! println!("{} WAL objects deleted", gc.wal_deleted.len());
//! # }
//! ```
#![deny(missing_docs)]

pub mod compactor;
pub mod config;
mod error;
mod fetch;
pub mod gc;
pub mod ledger;
pub mod names;
pub mod plan;
pub mod progress;
pub mod records;
pub mod trim;

pub use compactor::{
    Claim, CompactionLog, Compactor, CompactorDeps, InstallOutcome, PreparedCompaction, WrittenFile,
    claim_key,
};
pub use config::{CompactorConfig, ConfigError, ParquetCodec};
pub use error::{CompactError, CompactResult};
pub use progress::{
    Backlog, CompactReport, GcReport, HardTrimReport, Progress, ProgressFn, RangeReport, no_progress,
};
