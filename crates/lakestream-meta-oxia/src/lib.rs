#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod client;
pub mod config;
pub mod errors;
pub mod keepalive;
pub mod merge;
pub mod proto;
pub mod requests;
pub mod responses;
pub mod routing;
pub mod rpc;
pub mod session;
pub mod stats;
pub mod store;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod write_stream;

pub use client::OxiaClient;
pub use config::{
    ConfigError, DEFAULT_SERVICE_NAME, LEGACY_SERVICE_NAME, OxiaConfig, OxiaTls, V1_SERVICE_NAME,
};
pub use errors::{OxiaError, OxiaErrorKind};
pub use routing::{ShardId, ShardMap, routing_hash};
pub use session::{OxiaSession, shard_sessions_from_id};
pub use stats::{OxiaStats, RequestCounts, RequestKind};
pub use store::OxiaStore;
