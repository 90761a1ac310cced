#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

#[cfg(feature = "azure")]
mod azure;
pub mod config;
#[cfg(feature = "gcs")]
mod gcs;
pub mod store;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

pub use config::{AzureConfig, ConditionalPut, GcsConfig};
pub use store::{CloudStore, Service};
