//! The Kafka wire-protocol front end of Lakestream: Kafka clients produce to and fetch from
//! streams stored in the spec's Kafka binding, over the same service layer
//! ([`lakestream_service::api::Api`]) as the HTTP and gRPC APIs — no second path to the writer
//! or the reader. Frames and messages are encoded and decoded by the `kafka-protocol` crate.
//!
//! * A topic is the stream `default/{topic}-topic-id-{topic ID}` (the binding's stream
//!   identity); a partition is one of its logs. Appends are leaderless, so this process
//!   answers Metadata as the leader of every partition, and any number of front-end processes
//!   may serve the same topics.
//! * Produce stores each partition's record batches (magic 2, compression as sent) in one
//!   entry — with those of the connection's other requests queued for the partition at the
//!   same time — checked and counted by the binding; Fetch returns whole entries with their
//!   batches' base offsets rewritten, whether they are still in the WAL or compacted.
//! * Served: ApiVersions, Metadata, Produce, Fetch, ListOffsets, CreateTopics, DeleteTopics,
//!   CreatePartitions, and InitProducerId with idempotent produce (`crate::idempotence`, on
//!   the service layer's idempotent producers); consumer groups of the classic protocol
//!   (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
//!   ListGroups, DescribeGroups: `crate::group`), each coordinated by one front-end process
//!   chosen through the metadata store (`crate::coordinator`), committed offsets in the service
//!   layer's group offset store. Transactions are refused. `docs/kafka.md` lists versions,
//!   refusals and the client settings needed.
//!
//! ```no_run
//! # async fn run(api: lakestream_service::Api) -> std::io::Result<()> {
//! use lakestream_kafka::{KafkaConfig, KafkaFrontEnd};
//!
//! let config = KafkaConfig {
//!     addr: Some("127.0.0.1:9092".parse().unwrap()),
//!     ..KafkaConfig::default()
//! };
//! let front_end = KafkaFrontEnd::bind(&config, std::time::Duration::from_secs(30)).await?;
//! println!("Kafka on {}", front_end.local_addr());
//! // Serves until the future resolves (Ctrl-C here), then lets open requests finish.
//! front_end.serve(api, async { let _ = tokio::signal::ctrl_c().await; }).await;
//! # Ok(()) }
//! ```
//!
//! The `lakestream` command serves it beside the HTTP and gRPC listeners of
//! `lakestream-server`, over the same [`Api`], with one shutdown signal.
#![deny(missing_docs)]

mod appends;
pub mod config;
mod conn;
mod coordinator;
mod errors;
mod group;
mod handlers;
mod idempotence;
mod topics;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lakestream_service::api::Api;
use lakestream_service::{RandomTokens, TokenSource};
use tokio::net::TcpListener;

pub use config::KafkaConfig;

/// What the connections of one front end share.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub node_id: i32,
    pub advertised_host: String,
    pub advertised_port: i32,
    pub max_request_bytes: usize,
    pub auto_create_topics: bool,
    pub default_partitions: u32,
    /// The longest fetch wait the service layer allows; longer client waits are cut to it.
    pub max_fetch_wait: Duration,
    /// Where topic IDs and member ids come from.
    pub tokens: Arc<dyn TokenSource>,
    /// `kafka.group_initial_rebalance_delay`.
    pub group_initial_rebalance_delay: Duration,
    /// `kafka.coordinator_session_timeout`.
    pub coordinator_session_timeout: Duration,
}

/// What every connection of one front end shares besides its settings.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The consumer groups this process coordinates.
    pub coordinator: Arc<coordinator::Coordinator>,
    /// The topics produce requests named recently.
    pub topics: topics::TopicCache,
}

/// The name of this front end's own records in the metadata store (see
/// `lakestream_service::state`): partition `lakestream-kafka`, keys under `/lakestream-kafka/`.
pub(crate) const STATE_NAME: &str = "kafka";

impl Shared {
    fn new(api: &Api, settings: &Settings) -> std::io::Result<Self> {
        let store = api.front_end_state(STATE_NAME).map_err(std::io::Error::other)?;
        Ok(Shared {
            coordinator: coordinator::Coordinator::new(
                store,
                settings.node_id,
                (settings.advertised_host.clone(), settings.advertised_port),
                settings.coordinator_session_timeout,
                settings.group_initial_rebalance_delay,
            ),
            topics: topics::TopicCache::new(topics::TOPIC_CACHE_TTL),
        })
    }
}

/// A bound Kafka listener, ready to serve.
#[derive(Debug)]
pub struct KafkaFrontEnd {
    listener: TcpListener,
    settings: Settings,
}

impl KafkaFrontEnd {
    /// Binds `config.addr` (an error names the listener when there is none, or it is in use).
    /// Fetch waits are cut to `max_fetch_wait` (the service's `http.max_fetch_wait`).
    pub async fn bind(config: &KafkaConfig, max_fetch_wait: Duration) -> std::io::Result<Self> {
        let addr = config
            .addr
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "kafka.addr is not set"))?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| std::io::Error::new(e.kind(), format!("Kafka listener on {addr}: {e}")))?;
        Self::from_listener(listener, config, max_fetch_wait, Arc::new(RandomTokens))
    }

    /// A front end on an already bound listener, drawing topic IDs from `tokens`.
    pub fn from_listener(
        listener: TcpListener,
        config: &KafkaConfig,
        max_fetch_wait: Duration,
        tokens: Arc<dyn TokenSource>,
    ) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (advertised_host, advertised_port) = match &config.advertised_listener {
            Some(listener) => {
                let (host, port) = listener.rsplit_once(':').ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("kafka.advertised_listener {listener:?} is not host:port"),
                    )
                })?;
                let port: u16 = port.parse().map_err(|e| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("kafka.advertised_listener {listener:?}: port {port:?}: {e}"),
                    )
                })?;
                (host.trim_start_matches('[').trim_end_matches(']').to_owned(), port)
            }
            None => (local.ip().to_string(), local.port()),
        };
        Ok(KafkaFrontEnd {
            listener,
            settings: Settings {
                node_id: config.node_id,
                advertised_host,
                advertised_port: i32::from(advertised_port),
                max_request_bytes: config.max_request_bytes,
                auto_create_topics: config.auto_create_topics,
                default_partitions: config.default_partitions,
                max_fetch_wait,
                tokens,
                group_initial_rebalance_delay: config.group_initial_rebalance_delay,
                coordinator_session_timeout: config.coordinator_session_timeout,
            },
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        // A bound listener has an address; the fallback is never reached.
        self.listener.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Serves Kafka clients over `api` until `shutdown` resolves; then stops accepting, lets
    /// each connection finish the request it is serving, and closes them.
    pub async fn serve(self, api: Api, shutdown: impl Future<Output = ()> + Send + 'static) {
        let shared = match Shared::new(&api, &self.settings) {
            Ok(shared) => Arc::new(shared),
            Err(e) => {
                tracing::error!(error = %e, "the Kafka front end cannot start");
                return;
            }
        };
        shared.coordinator.start().await;
        conn::serve(self.listener, api, Arc::new(self.settings), shared.clone(), shutdown).await;
        // Hand the groups coordinated here to another process at once.
        shared.coordinator.close().await;
    }
}
