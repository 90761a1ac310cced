//! The S3 backend of [`lakestream_objstore`]: [`S3Store`] implements
//! [`ObjectStore`](lakestream_objstore::ObjectStore) over aws-sdk-s3, configured by a plain
//! [`S3Config`].
//!
//! ```no_run
//! use lakestream_objstore_s3::{ConditionalPut, S3Config, S3Store};
//!
//! let store = S3Store::new(S3Config {
//!     bucket: "lakestream".into(),
//!     prefix: Some("wal".into()),
//!     endpoint: Some("http://127.0.0.1:9000".into()),
//!     force_path_style: true,
//!     conditional_put: ConditionalPut::Sequential,
//!     ..S3Config::default()
//! })?;
//! # Ok::<(), lakestream_objstore::ObjectStoreError>(())
//! ```
#![deny(missing_docs)]

pub mod config;
pub mod credentials;
#[cfg(feature = "lifecycle")]
pub mod lifecycle;
pub mod store;

pub use config::{ConditionalPut, S3Config};
pub use store::{S3Store, crc32c_base64};
