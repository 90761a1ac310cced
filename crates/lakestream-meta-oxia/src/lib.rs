//! # lakestream-meta-oxia
//!
//! Lakestream's own [Oxia](https://github.com/oxia-db/oxia) client, written on tonic and
//! prost, and [`OxiaStore`], the Lakestream [`MetaStore`](lakestream_meta::MetaStore) on it.
//!
//! ```no_run
//! use bytes::Bytes;
//! use lakestream_meta::MetaStore;
//! use lakestream_meta_oxia::{OxiaConfig, OxiaStore};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! // Every setting but the addresses has a default; `validate()` names a bad field.
//! let config = OxiaConfig::new(["127.0.0.1:6648"]);
//! let store = OxiaStore::connect(config).await?;
//!
//! // Append to log 7's index: the server derives the next key from the greatest existing one.
//! let written = store
//!     .sequenced_put("7", "00000000000000000007", &[3, 8], Bytes::from_static(b"index value"))
//!     .await?;
//! assert_eq!(written.key, "00000000000000000007-00000000000000000003-00000000000000000008");
//! # Ok(())
//! # }
//! ```
//!
//! ## What it does
//!
//! | concern | how | module |
//! |---|---|---|
//! | settings | [`OxiaConfig`] with defaults; [`OxiaConfig::validate`] names the bad field | [`config`] |
//! | messages | `proto/oxia/*.proto`, compiled by protox + tonic-prost-build (no `protoc`) | [`proto`] |
//! | service name | the HTTP/2 path is built from the configured name: `io.oxia.proto.v1.OxiaClient` by default, the pre-0.15 `io.streamnative.oxia.proto.OxiaClient` as a config change | [`rpc`] |
//! | routing | low 32 bits of XXH3-64 of the partition key, shard map from the `GetShardAssignments` stream | [`routing`] |
//! | writes | one ordered, pipelined `WriteStream` per shard, confirmed by a handshake before any write is sent: writes commit in the order they were issued | [`write_stream`] |
//! | requests | the spec's primitives as Oxia requests; sequenced puts validated before sending | [`requests`], [`responses`] |
//! | sessions | one Oxia session per shard, created lazily, kept alive every `min(max(timeout/10, 2 s), timeout/3)`; expiry ends the session | [`session`], [`keepalive`] |
//! | errors | custom codes 100–112 (≤ v0.16) and `ErrorInfo` reasons (v0.17+) mapped to [`MetaError`](lakestream_meta::MetaError) classes | [`errors`] |
//!
//! ## Failure semantics
//!
//! - A write that was sent on a stream that then broke, or that got no answer within the
//!   request timeout, fails with `MetaError::OutcomeUnknown`: it may have committed. The
//!   client never retries writes (a retried sequenced put could append twice).
//! - A write that never left the client (no connection, no route, a stream the server
//!   refused, withdrawn at its timeout while still queued) fails with
//!   `MetaError::Unavailable` and may be retried. Writes still queued when a stream is
//!   refused or breaks are sent, in order, on the next stream.
//! - Reads and session calls are retried within the request timeout, re-routing on "not
//!   leader" (following the server's leader hint when it gives one).
//! - A malformed sequenced put (no partition key, an expected version, a first delta of 0)
//!   fails with `MetaError::InvalidRequest` and is never sent: on the server it would break
//!   the shard's write stream for every other writer.
//!
//! ## Testing against a real server
//!
//! The tests in `tests/oxia_server.rs` run the `lakestream-meta` conformance suite and
//! client-specific checks against a real Oxia server, which `scripts/test` starts (`oxia
//! standalone --shards 4`, see `scripts/servers.sh`). Elsewhere set
//! `LAKESTREAM_TEST_OXIA=host:port`; without it those tests fail with instructions.
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
