//! The Lakestream service layer: the one door under every front end.
//!
//! HTTP, gRPC, CloudEvents and Kafka are front ends: each decodes its protocol, calls an
//! operation of [`Api`] (streams and namespaces, produce in all its forms, fetch and read
//! sessions, offsets and trims, consumer-group offsets, CloudEvents ingest and consume), and
//! encodes the answer or the [`ApiError`], whose [`ErrorKind`] decides the HTTP status, the
//! gRPC code, the Kafka error code and the stable code in one table. Authorization, rate
//! limits, idempotent producers, group offsets and metrics live here, so every front end gets
//! them alike.
//!
//! [`Service::start`] wires the metadata store, the object stores and the roles a
//! [`ServiceConfig`] names, starts the background roles (compaction, Iceberg tables,
//! retention, producer-state expiry, the CloudEvents ledger's cleanup) and hands out the
//! [`Api`]; [`Service::shutdown`] stops them and closes the writer (pending appends are
//! published and leases released).
#![deny(missing_docs)]

pub mod api;
pub mod auth;
pub mod background;
pub mod config;
pub mod deployment;
pub mod events;
pub mod groups;
pub mod limits;
pub mod metrics;
pub mod objects;
pub mod producers;
mod stack;
pub mod state;

use std::sync::Arc;

pub use api::{Api, ApiError, ApiResult, ErrorKind};
pub use config::ServiceConfig;
/// Where identifiers come from (topic IDs, member ids): injected, so that tests can seed them.
pub use lakestream_meta::lease::{RandomTokens, SeededTokens, TokenSource};
pub use stack::{DEFAULT_NAMESPACE, StartError};

/// Access to the wiring behind the operations, for tests and benchmarks that check what lies
/// behind the API (the metadata store, the roles). Behind the `testkit` feature: no front end
/// enables it, so none can reach the writer, reader, catalog or metadata store except through
/// the operations of [`Api`].
#[cfg(feature = "testkit")]
pub mod testkit {
    pub use crate::stack::Stack;
}

/// A running service: the operations, and the background roles behind them.
#[derive(Debug)]
pub struct Service {
    api: Api,
    background: background::Background,
    shutdown_timeout: std::time::Duration,
}

/// How a [`Service::shutdown`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// Background roles stopped, pending appends published, write leases released.
    Complete,
    /// The deadline passed first: what was left is abandoned, and the write leases expire
    /// with the metadata session (as after a crash; nothing acknowledged is lost).
    DeadlinePassed,
}

impl Service {
    /// Opens every component `config` names (refusing a configuration that breaks a rule),
    /// starts the background roles this process serves, and returns the running service.
    pub async fn start(config: &ServiceConfig) -> Result<Service, StartError> {
        Ok(Self::running(stack::Stack::open(config).await?, config))
    }

    /// The service over an opened stack: its background roles started.
    fn running(stack: stack::Stack, config: &ServiceConfig) -> Service {
        let metrics = Arc::new(metrics::Metrics::of(&stack));
        let background = background::Background::spawn(&stack, config, &metrics);
        let api = Api::new(stack, metrics, config.max_fetch_wait);
        Service { api, background, shutdown_timeout: config.shutdown.timeout }
    }

    /// [`Service::start`] over a metadata store the caller opened (`config.metadata` is not
    /// used): for tests that run a whole service on a store with injected faults.
    #[cfg(feature = "testkit")]
    pub async fn start_with_meta(
        config: &ServiceConfig,
        meta: Arc<dyn lakestream_meta::MetaStore>,
    ) -> Result<Service, StartError> {
        Ok(Self::running(stack::Stack::open_with_meta(config, meta).await?, config))
    }

    /// The operations, for the front ends (a cheap handle: clone it freely).
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// The configured bound of a shutdown (`shutdown.timeout`).
    pub fn shutdown_timeout(&self) -> std::time::Duration {
        self.shutdown_timeout
    }

    /// Stops the background roles (a running compaction pass is abandoned, safely), then
    /// closes the writer: pending appends are published and leases released; all within
    /// `shutdown.timeout` ([`Service::shutdown_within`]).
    pub async fn shutdown(self) -> Shutdown {
        let limit = self.shutdown_timeout;
        self.shutdown_within(limit).await
    }

    /// [`Service::shutdown`] within `limit` (what is left of the shutdown's bound after the
    /// front ends drained). Past it the rest is abandoned: appends not yet acknowledged stay
    /// so, and write leases are left to expire with the metadata session.
    pub async fn shutdown_within(self, limit: std::time::Duration) -> Shutdown {
        let Service { api, background, .. } = self;
        let stopping = async move {
            background.stop().await;
            api.close().await;
        };
        match tokio::time::timeout(limit, stopping).await {
            Ok(()) => Shutdown::Complete,
            Err(_) => {
                tracing::warn!(
                    ?limit,
                    "shutdown.timeout passed before the service stopped (is the metadata store reachable?): \
                     unacknowledged appends are abandoned and write leases are left to expire with the \
                     metadata session"
                );
                Shutdown::DeadlinePassed
            }
        }
    }
}

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
