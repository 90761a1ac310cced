//! The Writer role of the Lakestream spec: leaderless appends and soft trim.
//!
//! A [`Writer`] accepts concurrent appends for many logs. It follows the spec's steps:
//!
//! - **A1 lease** — before a log's first append, it acquires a write lease on the log
//!   (an ephemeral lease record, then the fence check); a fenced log refuses appends.
//! - **A2 object** — it groups entries of many logs into a WAL object (each log's payloads
//!   together), flushed on a time window or a size, and writes it under a new name
//!   `yyyy/MM/dd/HH/mm/ss/{uuid}` (UTC).
//! - **A3 index** — after the object is written, one sequenced put per log section, in flush
//!   order per log.
//! - **A4 acknowledge** — each entry's future resolves only after its log's index record
//!   committed, with the entry's offsets and timestamp.
//!
//! [`Writer::soft_trim`] advances a log's trim marker.
#![doc = include_str!("../README.md")]
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
