//! One method per served API: Kafka request in, Kafka response out, every operation through
//! the service layer ([`Api`]). The connection's dispatch table (`crate::conn`) names them;
//! they live here by API family:
//!
//! | file | APIs |
//! |---|---|
//! | `api_versions.rs` | ApiVersions |
//! | `metadata.rs` | Metadata |
//! | `produce.rs` | Produce, InitProducerId |
//! | `fetch.rs` | Fetch |
//! | `list_offsets.rs` | ListOffsets |
//! | `topics_admin.rs` | CreateTopics, DeleteTopics, CreatePartitions |
//! | `groups.rs` | FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups, DescribeGroups |
//! | `group_offsets.rs` | OffsetCommit, OffsetFetch |

use std::net::SocketAddr;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;
use lakestream_format::kafka::NAMESPACE;
use lakestream_service::api::{Api, ApiError, ApiResult, ErrorKind};
use lakestream_service::auth::{Caller, Permission};

use crate::topics::{self, Topic};
use crate::{Settings, Shared};

mod api_versions;
mod fetch;
mod group_offsets;
mod groups;
mod list_offsets;
mod metadata;
mod produce;
mod topics_admin;

pub(crate) use api_versions::api_versions_unsupported;

/// The answer to a transactional producer's FindCoordinator and InitProducerId: transactions
/// are not served (`docs/kafka.md`). No transactional id is allowed, and this is the one code
/// both librdkafka and the Java client treat as final there (librdkafka retries every other
/// FindCoordinator error until its timeout).
pub(crate) const TRANSACTIONS_REFUSED: ResponseError = ResponseError::TransactionalIdAuthorizationFailed;

/// Serves the requests of one connection.
#[derive(Debug, Clone)]
pub(crate) struct Handler {
    pub(crate) api: Api,
    pub settings: Arc<Settings>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) peer: SocketAddr,
    /// Who the connection's client is, as authenticated when it connected (Kafka clients
    /// present no bearer token: with tokens configured, it is anonymous and every request is
    /// refused).
    caller: Caller,
}

pub(crate) fn text(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(text(name))
}

impl Handler {
    pub(crate) fn new(api: Api, settings: Arc<Settings>, shared: Arc<Shared>, peer: SocketAddr) -> Self {
        let caller = api.authenticate(None).unwrap_or_else(|_| Caller::anonymous());
        Handler { api, settings, shared, peer, caller }
    }

    /// Admits one request: the connection's caller, the client's rate limit (counting the
    /// peer's address) and `needed` on the topics' namespace. The operations the request then
    /// calls check their own permissions against the same caller.
    pub(crate) fn admit(&self, needed: Permission) -> ApiResult<()> {
        self.api.throttle(&self.caller, Some(self.peer.ip()))?;
        self.api.authorize(&self.caller, Some(NAMESPACE), needed)
    }

    /// The connection's caller.
    pub(crate) fn caller(&self) -> &Caller {
        &self.caller
    }

    /// Looks a topic up, creating it when `create` and it does not exist.
    pub(crate) async fn topic(&self, name: &str, create: bool) -> ApiResult<Topic> {
        if let Some(topic) = topics::find(&self.api, self.caller(), name).await? {
            return Ok(topic);
        }
        if create {
            self.admit(Permission::Admin)?;
            topics::check_name(name)?;
            match topics::create(
                &self.api,
                self.caller(),
                self.settings.tokens.as_ref(),
                name,
                self.settings.default_partitions,
            )
            .await
            {
                // Another client created it meanwhile.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                other => return other,
            }
            if let Some(topic) = topics::find(&self.api, self.caller(), name).await? {
                return Ok(topic);
            }
        }
        Err(ApiError::new(ErrorKind::NotFound, format!("topic {name:?} does not exist")))
    }
}
