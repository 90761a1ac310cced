//! Google Cloud Storage and Azure Blob Storage backends of [`lakestream_objstore`], on
//! arrow-rs's `object_store` crate: [`CloudStore`] implements
//! [`ObjectStore`](lakestream_objstore::ObjectStore) for either, configured by a plain
//! [`GcsConfig`] or [`AzureConfig`] (features `gcs` and `azure`, both on by default).
//!
//! ```no_run
//! use lakestream_objstore_cloud::{AzureConfig, CloudStore, GcsConfig};
//!
//! let gcs = CloudStore::gcs(GcsConfig { url: Some("gs://lakestream/wal".into()), ..GcsConfig::default() })?;
//! let azure = CloudStore::azure(AzureConfig {
//!     url: Some("az://lakestream/compacted".into()),
//!     account: Some("myaccount".into()),
//!     ..AzureConfig::default()
//! })?;
//! # Ok::<(), lakestream_objstore::ObjectStoreError>(())
//! ```
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
