#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod config;
mod error;
mod leases;
pub mod naming;
mod retention;
pub mod stats;
mod trim;
mod writer;

pub use config::{Backpressure, ConfigError, WriterConfig};
pub use error::{AppendError, TrimError};
pub use retention::RetentionPolicy;
pub use stats::{HistogramSnapshot, WriterStats};
pub use trim::TrimOutcome;
pub use writer::{AppendAck, AppendOptions, PendingAppend, PublishGate, Writer, WriterDeps};
