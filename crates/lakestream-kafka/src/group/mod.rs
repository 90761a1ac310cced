//! One consumer group's membership, in the process that coordinates it: Kafka's classic
//! group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), as Kafka's group coordinator
//! runs it.
//!
//! ## States
//!
//! ```text
//!            join                    every member joined (or the              the leader's
//!  Empty ───────────► Preparing ───── rebalance timeout passed) ───► Completing ─ SyncGroup ─► Stable
//!    ▲                Rebalance        generation + 1, persisted      Rebalance                  │
//!    │                   ▲                                                 │                       │
//!    └── no member left ─┘◄──── a join, a leave, a session expiry ────────┴───────────────────────┘
//! ```
//!
//! - **PreparingRebalance**: JoinGroup requests are held until every known member has joined
//!   again (and none handed a member id is still to come), or until the longest rebalance
//!   timeout of the members passes; members that did not join are then removed. The first
//!   rebalance of an empty group also waits `kafka.group_initial_rebalance_delay` for more
//!   members. Heartbeats answer `REBALANCE_IN_PROGRESS`, so members know to join.
//! - **Completing the join**: the generation goes up by one and is written to the group's
//!   record in the metadata store (compare-and-set: a lost race means another process now
//!   coordinates the group, which this one then gives up); the protocol most members prefer
//!   among those all support is chosen; the leader (the previous one if it is still a member,
//!   else the first to join) gets every member's metadata.
//! - **CompletingRebalance**: SyncGroup requests wait for the leader's, which carries the
//!   assignments; all are then answered with their own, and the group is **Stable**.
//! - A member whose session timeout passes without a heartbeat (or a join, sync or commit) is
//!   removed, and the group rebalances.
//!
//! JoinGroup v4+ with no member id is answered `MEMBER_ID_REQUIRED` with a new id, which the
//! member joins with (KIP-394). A static member (`group.instance.id`) replaces the member
//! with the same instance id, whose requests are then `FENCED_INSTANCE_ID`; unlike Kafka, its
//! rejoining still rebalances the group.
//!
//! ## Machine and driver
//!
//! The rules above are [`machine::GroupMachine`]'s: a state machine without I/O that is
//! given the time with every event and answers with effects — answer this held JoinGroup or
//! SyncGroup, write this record — and says when it next needs the time (a session or a
//! rebalance that times out). [`Group`] drives it: it holds the requests' reply channels,
//! writes the record to the metadata store, and arms one timer at the machine's next
//! deadline, on tokio's clock (so its tests run on paused time).

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use serde::{Deserialize, Serialize};

mod driver;
mod machine;

pub(crate) use driver::Group;

/// The key of a group's record.
pub(crate) fn record_key(group: &str) -> String {
    format!("{GROUP_RECORD_PREFIX}{group}")
}

/// The prefix of every group record's key.
pub(crate) const GROUP_RECORD_PREFIX: &str = "/lakestream-kafka/groups/";

/// A group's record in the metadata store, written at each new generation: what survives the
/// coordinating process, so that the next one continues the generations (committed offsets
/// carry them) and other processes can list the group.
///
/// ```text
/// key (metadata partition `lakestream-kafka`)   value (JSON)
/// /lakestream-kafka/groups/{group}              {"v":1,"generation":4,"protocol_type":"consumer",
///                                                "protocol":"range","state":"Stable","members":3}
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GroupRecord {
    pub v: u32,
    pub generation: i32,
    #[serde(default)]
    pub protocol_type: Option<String>,
    #[serde(default)]
    pub protocol: Option<String>,
    /// `Stable` with members at the generation's start, else `Empty`.
    pub state: String,
    #[serde(default)]
    pub members: usize,
}

/// Where a group stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    /// This process no longer coordinates the group.
    Dead,
}

impl Phase {
    /// The state's name in DescribeGroups and ListGroups.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Empty => "Empty",
            Phase::PreparingRebalance => "PreparingRebalance",
            Phase::CompletingRebalance => "CompletingRebalance",
            Phase::Stable => "Stable",
            Phase::Dead => "Dead",
        }
    }
}

/// What a JoinGroup asks.
#[derive(Debug, Clone)]
pub(crate) struct Join {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a new member first gets its id with `MEMBER_ID_REQUIRED`.
    pub require_known_member_id: bool,
}

/// A JoinGroup's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Joined {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// For the leader: every member's id, instance id and metadata for the chosen protocol.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

impl Joined {
    fn error(error: ResponseError, member_id: &str) -> Self {
        Joined { error: error.code(), generation: -1, member_id: member_id.to_owned(), ..Joined::default() }
    }
}

/// A SyncGroup's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Synced {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub assignment: Bytes,
}

impl Synced {
    fn error(error: ResponseError) -> Self {
        Synced { error: error.code(), ..Synced::default() }
    }
}

/// One member, as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub(crate) struct MemberView {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// The group as DescribeGroups and ListGroups show it.
#[derive(Debug, Clone)]
pub(crate) struct GroupView {
    pub phase: Phase,
    pub generation: i32,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<MemberView>,
}
