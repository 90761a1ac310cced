//! The Kafka front end's settings: the `[kafka]` section of the `lakestream` command's
//! configuration file.

use std::net::SocketAddr;
use std::time::Duration;

use lakestream_service::config::InvalidSetting;
use serde::Deserialize;

/// The Kafka wire-protocol front end's settings (served by the `lakestream-kafka` crate over
/// the same service layer as the HTTP and gRPC APIs; see `docs/kafka.md`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaConfig {
    /// Where to listen; absent (the default) serves no Kafka. `lakestream dev` listens on
    /// `127.0.0.1:9092`.
    pub addr: Option<SocketAddr>,
    /// The `host:port` clients are told to connect to (Metadata's broker address): set it
    /// when clients reach this process through another name, as in containers. Default: the
    /// bound address.
    pub advertised_listener: Option<String>,
    /// This process's broker id in Metadata; give each front-end process its own.
    pub node_id: i32,
    /// The largest request frame accepted; a larger one closes the connection before any of
    /// it is read, as Kafka's `socket.request.max.bytes` does. Default 100 MiB, Kafka's.
    pub max_request_bytes: usize,
    /// Whether Metadata and Produce create a topic a client names that does not exist
    /// (Kafka's `auto.create.topics.enable`, on by default there too).
    pub auto_create_topics: bool,
    /// Partitions of an automatically created topic, and of CreateTopics with `-1`.
    pub default_partitions: u32,
    /// How long the first rebalance of an empty consumer group waits for more members to
    /// join (Kafka's `group.initial.rebalance.delay.ms`, 3 s there too): fewer rebalances
    /// when a group's consumers start together, a slower start for a lone one.
    #[serde(with = "humantime_serde")]
    pub group_initial_rebalance_delay: Duration,
    /// The session behind this process's claims to coordinate consumer groups (ephemeral
    /// records in the metadata store): when the process dies, its groups move to another
    /// front-end process after at most this long. Between 2 s and 5 min.
    #[serde(with = "humantime_serde")]
    pub coordinator_session_timeout: Duration,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            addr: None,
            advertised_listener: None,
            node_id: 1,
            max_request_bytes: 100 << 20,
            auto_create_topics: true,
            default_partitions: 1,
            group_initial_rebalance_delay: Duration::from_secs(3),
            coordinator_session_timeout: Duration::from_secs(15),
        }
    }
}

impl KafkaConfig {
    /// Checks the settings, naming the key (`kafka.…`) of a bad one.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.max_request_bytes < 1024 || self.max_request_bytes > i32::MAX as usize {
            return Err(InvalidSetting::new("kafka.max_request_bytes", "must be between 1024 and 2^31-1"));
        }
        if self.default_partitions == 0 {
            return Err(InvalidSetting::new("kafka.default_partitions", "must be at least 1"));
        }
        if self.node_id < 0 {
            return Err(InvalidSetting::new("kafka.node_id", "must not be negative"));
        }
        if self.group_initial_rebalance_delay > Duration::from_secs(300) {
            return Err(InvalidSetting::new("kafka.group_initial_rebalance_delay", "must be at most 5min"));
        }
        if !(Duration::from_secs(2)..=Duration::from_secs(300)).contains(&self.coordinator_session_timeout) {
            return Err(InvalidSetting::new(
                "kafka.coordinator_session_timeout",
                "must be between 2s and 5min",
            ));
        }
        if let Some(listener) = &self.advertised_listener {
            let port = listener.rsplit_once(':').and_then(|(host, port)| {
                (!host.is_empty()).then_some(())?;
                port.parse::<u16>().ok()
            });
            if port.is_none() {
                return Err(InvalidSetting::new(
                    "kafka.advertised_listener",
                    format!("{listener:?} is not host:port"),
                ));
            }
        }
        Ok(())
    }
}
