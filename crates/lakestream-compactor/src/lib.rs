#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
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
