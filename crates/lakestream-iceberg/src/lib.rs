#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod catalog;
pub mod config;
mod error;
pub mod files;
pub mod maintenance;
pub mod schema;
pub mod storage;
pub mod tables;

pub use config::{TABLE_ICEBERG, TABLE_NONE, TABLE_PROPERTY, TablesConfig};
pub use error::{TablesError, TablesResult};
pub use files::LogRange;
pub use maintenance::{CleanReport, MaintenanceOptions, TrimReport};
pub use schema::Layout;
pub use tables::{
    CommitReport, RangeOutcome, StagedAppend, StagedRange, StreamRef, Tables, TokenFn, watermarks_of,
};
