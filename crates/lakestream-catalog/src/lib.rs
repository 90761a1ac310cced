#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod allocator;
pub mod catalog;
pub mod config;
pub mod error;
pub mod names;
pub mod records;

pub use catalog::{BINDING_PROPERTIES, Catalog, Growth, LogInfo, Namespace, Page, Stream};
pub use config::CatalogConfig;
pub use error::{CatalogError, NameKind, NameRule, Result};
pub use names::{KAFKA_NAMESPACE, MAX_NAME_BYTES, kafka_stream_name};
