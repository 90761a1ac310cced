//! Lakestream's HTTP/JSON and gRPC transports over the service layer
//! (`lakestream_service::Api`): each handler decodes its request, calls one operation, and
//! encodes the answer or the error; the CloudEvents HTTP and gRPC bindings too.
//!
//! [`ServerConfig`] holds the listeners' settings (`[http]`, `[grpc]`, `[tls]`,
//! `[listener]`); [`serve`] runs both APIs, and any other front end (the Kafka wire protocol
//! of `lakestream-kafka`), over one [`Api`] until a shutdown signal, then drains and lets
//! open requests finish; [`run`] does that for a [`Service`] and then shuts the service down.
#![deny(missing_docs)]

pub mod config;
pub mod events;
pub mod grpc;
pub mod http;
pub mod listener;

use std::future::Future;

pub use config::ServerConfig;
use lakestream_service::{Api, Service};

/// Where a running service listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listening {
    /// The HTTP API.
    pub http: std::net::SocketAddr,
    /// The gRPC API, when `grpc.addr` is set.
    pub grpc: Option<std::net::SocketAddr>,
}

/// A future a front end runs until it has shut down.
pub type FrontEndTask = std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A front end served beside the HTTP and gRPC APIs over the same service layer (the Kafka
/// wire protocol of `lakestream-kafka`): given the [`Api`] and a future that resolves when
/// the listeners should stop accepting, it returns the task that serves until then and lets
/// open requests finish. It is started with the other listeners and awaited before the
/// service shuts down.
pub type FrontEnd = Box<dyn FnOnce(Api, FrontEndTask) -> FrontEndTask + Send>;

/// Serves `service` with [`serve`], then shuts it down: background roles stop, and the writer
/// publishes pending appends and releases its leases. From the signal, after the listener's
/// drain delay, the rest (open requests finishing, then the service's shutdown) takes at most
/// the service's `shutdown.timeout`: past it, open requests are cut and the service gives up
/// ([`lakestream_service::Shutdown::DeadlinePassed`]).
pub async fn run(
    config: &ServerConfig,
    service: Service,
    front_ends: Vec<FrontEnd>,
    on_listening: impl FnOnce(Listening),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let bound = service.shutdown_timeout();
    let drain_delay = config.listener.drain_delay;
    let (signalled, mut signal_seen) = tokio::sync::watch::channel(None::<tokio::time::Instant>);
    let shutdown = async move {
        shutdown.await;
        let _ = signalled.send(Some(tokio::time::Instant::now()));
    };
    let deadline_of = |at: tokio::time::Instant| at + drain_delay + bound;
    let serving = serve(config, service.api().clone(), front_ends, on_listening, shutdown);
    let passed = async {
        let at = match signal_seen.wait_for(Option::is_some).await {
            Ok(at) => *at,
            Err(_) => None,
        };
        match at {
            Some(at) => tokio::time::sleep_until(deadline_of(at)).await,
            None => std::future::pending::<()>().await,
        }
    };
    let served = tokio::select! {
        served = serving => served,
        () = passed => {
            tracing::warn!(?bound, "open requests did not finish within shutdown.timeout: they are cut");
            Ok(())
        }
    };
    let at = *signal_seen.borrow();
    let left = at.map_or(bound, |at| deadline_of(at).saturating_duration_since(tokio::time::Instant::now()));
    service.shutdown_within(left).await;
    served
}

/// Runs the HTTP API over `api` on `config.http.addr`, the gRPC API on `config.grpc.addr` when
/// set, and each of `front_ends`, until `shutdown` resolves (or a listener fails); then
/// drains: readiness fails at once, requests are served for `listener.drain_delay` more (load
/// balancers take the instance out), the listeners stop accepting and in-flight requests
/// finish. `on_listening` is called with the bound addresses (useful with port 0).
pub async fn serve(
    config: &ServerConfig,
    api: Api,
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
    let app = http::router(http::AppState::with_api(api.clone(), config.http.clone()));
    let tls = config.tls.acceptor().map_err(std::io::Error::other)?;
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
    api: Api,
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
