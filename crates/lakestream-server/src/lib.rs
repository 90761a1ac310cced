//! Lakestream services: configuration, wiring, and the HTTP/JSON and gRPC APIs over one
//! service layer ([`api`]).
//!
//! [`ServerConfig`] is read from one TOML file, environment variables and flags;
//! [`Stack::open`] builds the metadata store, object stores and roles it names; [`serve_all`]
//! runs the HTTP API (and the gRPC API when `grpc.addr` is set) until a shutdown signal,
//! then closes the writer gracefully (pending appends are published and leases released).
#![deny(missing_docs)]

pub mod api;
pub mod auth;
mod compaction;
pub mod config;
pub mod deployment;
pub mod events;
pub mod groups;
pub mod grpc;
pub mod http;
pub mod limits;
pub mod listener;
pub mod metrics;
pub mod objects;
pub mod producers;
pub mod retention;
pub mod stack;
mod sweep;
pub mod tables;

use std::future::Future;

pub use config::{ConfigError, ServerConfig};
pub use stack::{Stack, StartError};

/// Where a running service listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listening {
    /// The HTTP API.
    pub http: std::net::SocketAddr,
    /// The gRPC API, when `grpc.addr` is set.
    pub grpc: Option<std::net::SocketAddr>,
}

/// [`serve_all`], telling `on_listening` only the HTTP address.
pub async fn serve(
    config: &ServerConfig,
    stack: Stack,
    on_listening: impl FnOnce(std::net::SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_all(config, stack, |at| on_listening(at.http), shutdown).await
}

/// A future a front end runs until it has shut down.
pub type FrontEndTask = std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A front end served beside the HTTP and gRPC APIs over the same service layer (the Kafka
/// wire protocol of `lakestream-kafka`): given the [`api::Api`] and a future that resolves
/// when the listeners should stop accepting, it returns the task that serves until then and
/// lets open requests finish. It is started with the other listeners and awaited before the
/// writer closes.
pub type FrontEnd = Box<dyn FnOnce(api::Api, FrontEndTask) -> FrontEndTask + Send>;

/// [`serve_all_with`] with no other front end.
pub async fn serve_all(
    config: &ServerConfig,
    stack: Stack,
    on_listening: impl FnOnce(Listening),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_all_with(config, stack, Vec::new(), on_listening, shutdown).await
}

/// Runs the HTTP API of `stack` on `config.http.addr`, and the gRPC API on `config.grpc.addr`
/// when set, until `shutdown` resolves (or either listener fails), then shuts down
/// gracefully: both stop accepting, in-flight requests finish, background tasks stop, and
/// the writer publishes pending appends and releases its leases. `on_listening` is called
/// with the bound addresses (useful with port 0). Each of `front_ends` is served alongside,
/// over the same [`api::Api`] and metrics.
pub async fn serve_all_with(
    config: &ServerConfig,
    stack: Stack,
    front_ends: Vec<FrontEnd>,
    on_listening: impl FnOnce(Listening),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Bind errors name the listener: "address in use" alone does not say which port.
    let bind = |what: &'static str, addr: std::net::SocketAddr| async move {
        tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| std::io::Error::new(e.kind(), format!("{what} listener on {addr}: {e}")))
    };
    let listener = bind("HTTP", config.http.addr).await?;
    let grpc_listener = match config.grpc.addr {
        Some(addr) => Some(bind("gRPC", addr).await?),
        None => None,
    };
    on_listening(Listening {
        http: listener.local_addr()?,
        grpc: grpc_listener.as_ref().map(tokio::net::TcpListener::local_addr).transpose()?,
    });
    // One set of metrics behind both APIs and the compactor role.
    let metrics = std::sync::Arc::new(metrics::Metrics::default());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let compaction = stack.compactor.clone().map(|c| {
        let schedule = config.compactor_schedule.clone();
        tokio::spawn(compaction::run(stack.clone(), c, schedule, metrics.clone(), stopped))
    });
    // Streams as Iceberg tables: committed beside compaction, never in its way.
    let tables = match (stack.compactor.clone(), stack.tables.clone()) {
        (Some(c), Some(role)) => {
            Some(tokio::spawn(tables::run(stack.clone(), c, role, metrics.clone(), stop.subscribe())))
        }
        _ => None,
    };
    let retention = (stack.writer.is_some() && !config.retention.interval.is_zero()).then(|| {
        tokio::spawn(retention::run(
            stack.clone(),
            config.retention.interval,
            metrics.clone(),
            stop.subscribe(),
        ))
    });
    // Idle producers' states are deleted periodically (a writer-role duty, like retention).
    let producer_expiry = (stack.writer.is_some()
        && !config.producers.idle_expiry.is_zero()
        && !config.producers.sweep_interval.is_zero())
    .then(|| {
        tokio::spawn(producers::run_expiry(
            stack.clone(),
            config.producers.idle_expiry,
            config.producers.sweep_interval,
            metrics.clone(),
            stop.subscribe(),
        ))
    });
    // Expired CloudEvents deduplication records are deleted periodically.
    let ledger_cleanup = tokio::spawn(events::run_cleanup(stack.clone(), stop.subscribe()));
    // One service layer and one set of metrics behind both APIs.
    let api = api::Api::new(stack.clone(), metrics, config.http.max_fetch_wait);
    let app = http::router(http::AppState::with_api(api.clone(), config.http.clone()));
    let tls = config.tls.acceptor().map_err(std::io::Error::other)?;
    // A drain: readiness fails at once, requests are served for `listener.drain_delay` more
    // (load balancers take the instance out), then the listeners close.
    let drain_delay = config.listener.drain_delay;
    let draining = api.clone();
    let shutdown = async move {
        shutdown.await;
        draining.start_draining();
        tracing::info!(
            ?drain_delay,
            "shutting down: readiness fails now, listeners close after the drain delay"
        );
        tokio::time::sleep(drain_delay).await;
    };
    let listeners = Listeners { http: listener, grpc: grpc_listener, front_ends };
    serve_listeners(listeners, app, api, config, tls, shutdown).await;
    // Stop the compaction loop (a running pass is abandoned, safely) before closing the writer.
    let _ = stop.send(true);
    if let Some(task) = compaction {
        let _ = task.await;
    }
    if let Some(task) = tables {
        let _ = task.await;
    }
    let _ = ledger_cleanup.await;
    if let Some(r) = retention {
        let _ = r.await;
    }
    if let Some(task) = producer_expiry {
        let _ = task.await;
    }
    stack.close().await;
    Ok(())
}

/// What [`serve_listeners`] serves.
struct Listeners {
    http: tokio::net::TcpListener,
    grpc: Option<tokio::net::TcpListener>,
    front_ends: Vec<FrontEnd>,
}

/// Serves both listeners (over TLS when `tls` is given) until `shutdown` resolves; both
/// then stop accepting and let open requests finish before this returns.
async fn serve_listeners(
    listeners: Listeners,
    app: axum::Router,
    api: api::Api,
    config: &ServerConfig,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let signal = tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stopped| *stopped).await;
    };
    let limits = &config.listener;
    let http_stats = api.metrics().http_connections.clone();
    let Listeners { http: http_listener, grpc: grpc_listener, front_ends } = listeners;
    let http = listener::serve_connections(
        http_listener,
        tls.clone(),
        app,
        limits,
        http_stats,
        wait(stopped.clone()),
    );
    let others = futures::future::join_all(
        front_ends.into_iter().map(|start| start(api.clone(), Box::pin(wait(stopped.clone())))),
    );
    let grpc = async {
        if let Some(l) = grpc_listener {
            grpc::serve(l, api, &config.grpc, limits, tls, wait(stopped.clone())).await;
        }
    };
    tokio::join!(http, grpc, others);
    signal.abort();
}

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
