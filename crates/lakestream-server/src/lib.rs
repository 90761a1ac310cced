//! Lakestream services: configuration, wiring and the HTTP/JSON API.
//!
//! [`ServerConfig`] is read from one TOML file, environment variables and flags;
//! [`Stack::open`] builds the metadata store, object stores and roles it names; [`serve`]
//! runs the HTTP API until a shutdown signal, then closes the writer gracefully (pending
//! appends are published and leases released).
#![deny(missing_docs)]

pub mod auth;
mod compaction;
pub mod config;
pub mod http;
pub mod metrics;
pub mod stack;

use std::future::Future;

pub use config::{ConfigError, ServerConfig};
pub use stack::{Stack, StartError};

/// Runs the HTTP API of `stack` on `config.http.addr` until `shutdown` resolves, then shuts
/// down gracefully. `on_listening` is called with the bound address (useful with port 0).
pub async fn serve(
    config: &ServerConfig,
    stack: Stack,
    on_listening: impl FnOnce(std::net::SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.http.addr).await?;
    on_listening(listener.local_addr()?);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let compaction = stack
        .compactor
        .clone()
        .map(|c| tokio::spawn(compaction::run(stack.clone(), c, config.compactor_schedule.clone(), stopped)));
    let app = http::router(http::AppState::new(stack.clone(), config.http.clone()));
    let result = axum::serve(listener, app).with_graceful_shutdown(shutdown).await;
    // Let a running compaction pass finish its step, then stop the loop before the writer.
    let _ = stop.send(true);
    if let Some(task) = compaction {
        let _ = task.await;
    }
    stack.close().await;
    result
}

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
