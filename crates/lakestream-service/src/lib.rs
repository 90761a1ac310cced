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
pub mod stack;

use std::sync::Arc;

pub use api::{Api, ApiError, ApiResult, ErrorKind};
pub use config::ServiceConfig;
pub use stack::{Stack, StartError};

/// A running service: the operations, and the background roles behind them.
#[derive(Debug)]
pub struct Service {
    api: Api,
    background: background::Background,
}

impl Service {
    /// Opens every component `config` names (refusing a configuration that breaks a rule),
    /// starts the background roles this process serves, and returns the running service.
    pub async fn start(config: &ServiceConfig) -> Result<Service, StartError> {
        let stack = Stack::open(config).await?;
        let metrics = Arc::new(metrics::Metrics::default());
        let background = background::Background::spawn(&stack, config, &metrics);
        let api = Api::new(stack, metrics, config.max_fetch_wait);
        Ok(Service { api, background })
    }

    /// The operations, for the front ends (a cheap handle: clone it freely).
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// Stops the background roles (a running compaction pass is abandoned, safely), then
    /// closes the writer: pending appends are published and leases released.
    pub async fn shutdown(self) {
        self.background.stop().await;
        self.api.stack().close().await;
    }
}

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
