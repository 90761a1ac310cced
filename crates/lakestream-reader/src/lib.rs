#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod cache;
pub mod config;
mod error;
mod reader;

pub use config::{ConfigError, ReaderConfig, WalReadMode};
pub use error::ReadError;
pub use reader::{ReadBatch, Reader, ReaderDeps};
