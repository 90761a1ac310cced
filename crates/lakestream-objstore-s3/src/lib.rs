#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod config;
pub mod credentials;
#[cfg(feature = "lifecycle")]
pub mod lifecycle;
pub mod store;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use config::{ConditionalPut, S3Config};
pub use store::{S3Store, crc32c_base64};
