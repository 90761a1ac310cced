//! The consumer-group APIs of the classic protocol but the committed offsets'
//! (`group_offsets.rs`): FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! ListGroups, DescribeGroups. Membership is `crate::group`'s, coordination across processes
//! `crate::coordinator`'s.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use lakestream_format::kafka::NAMESPACE;
use lakestream_service::api::{ApiError, ErrorKind};
use lakestream_service::auth::Permission;
use lakestream_service::groups::check_group_id;

use super::{Handler, TRANSACTIONS_REFUSED, text};
use crate::coordinator::Location;
use crate::group::{Group, Join, Phase};

/// Kafka's bounds on a member's session timeout (`group.min.session.timeout.ms`,
/// `group.max.session.timeout.ms`).
const MIN_SESSION_TIMEOUT_MS: i32 = 6_000;
const MAX_SESSION_TIMEOUT_MS: i32 = 1_800_000;

/// The code of an outcome (0: none).
pub(super) fn code(outcome: Result<(), ResponseError>) -> i16 {
    outcome.err().map_or(0, |e| e.code())
}

pub(super) fn opt_text(s: Option<&StrBytes>) -> Option<&str> {
    s.map(|s| s.as_str())
}

/// The code of a service-layer error in a group request.
pub(super) fn group_code_of(e: &ApiError) -> ResponseError {
    match e.kind() {
        ErrorKind::Unauthenticated | ErrorKind::PermissionDenied => ResponseError::GroupAuthorizationFailed,
        ErrorKind::RateLimited => ResponseError::ThrottlingQuotaExceeded,
        ErrorKind::InvalidArgument => ResponseError::InvalidGroupId,
        // The store did not answer, or the claim raced: the client finds the coordinator again.
        _ => ResponseError::CoordinatorNotAvailable,
    }
}

impl Handler {
    /// The group if this process coordinates it (claiming it when nobody does), else the
    /// error to answer: `NOT_COORDINATOR` when another process does.
    pub(super) async fn coordinated(&self, group: &str) -> Result<Arc<Group>, ResponseError> {
        check_group_id(group).map_err(|_| ResponseError::InvalidGroupId)?;
        self.admit(Permission::Read).map_err(|e| group_code_of(&e))?;
        match self.shared.coordinator.locate(group).await {
            Ok(Location::Here(g)) => Ok(g),
            Ok(Location::There(_)) => Err(ResponseError::NotCoordinator),
            Err(e) => {
                tracing::debug!(group, error = %e, "locating a group's coordinator failed");
                Err(group_code_of(&e))
            }
        }
    }

    pub(crate) async fn find_coordinator(
        &self,
        request: FindCoordinatorRequest,
        version: i16,
    ) -> FindCoordinatorResponse {
        let keys = if version >= 4 { request.coordinator_keys.clone() } else { vec![request.key.clone()] };
        let mut found = Vec::with_capacity(keys.len());
        for key in keys {
            let out = find_coordinator_response::Coordinator::default()
                .with_key(key.clone())
                .with_node_id(BrokerId(-1))
                .with_port(-1);
            let fail = |error: ResponseError, message: String| {
                out.clone().with_error_code(error.code()).with_error_message(Some(text(message)))
            };
            found.push(match request.key_type {
                1 => fail(
                    TRANSACTIONS_REFUSED,
                    "transactions are not served by Lakestream (see docs/kafka.md)".into(),
                ),
                0 => match check_group_id(&key) {
                    Err(e) => fail(ResponseError::InvalidGroupId, e.message().to_owned()),
                    Ok(()) => match self.admit(Permission::Read) {
                        Err(e) => fail(group_code_of(&e), e.message().to_owned()),
                        Ok(()) => match self.shared.coordinator.locate(&key).await {
                            Ok(Location::Here(_)) => out
                                .with_node_id(BrokerId(self.settings.node_id))
                                .with_host(text(self.settings.advertised_host.clone()))
                                .with_port(self.settings.advertised_port),
                            Ok(Location::There(a)) => out
                                .with_node_id(BrokerId(a.node_id))
                                .with_host(text(a.host))
                                .with_port(a.port),
                            Err(e) => fail(group_code_of(&e), e.message().to_owned()),
                        },
                    },
                },
                other => fail(
                    ResponseError::InvalidRequest,
                    format!("key type {other} is neither 0 (group) nor 1 (transaction)"),
                ),
            });
        }
        if version >= 4 {
            return FindCoordinatorResponse::default().with_coordinators(found);
        }
        let c = found.remove(0);
        let out = FindCoordinatorResponse::default()
            .with_error_code(c.error_code)
            .with_node_id(c.node_id)
            .with_host(c.host)
            .with_port(c.port);
        if version >= 1 { out.with_error_message(c.error_message) } else { out }
    }

    pub(crate) async fn join_group(
        &self,
        request: JoinGroupRequest,
        version: i16,
        client_id: String,
    ) -> JoinGroupResponse {
        let nullable =
            |s: Option<String>| if version >= 7 { s.map(text) } else { Some(text(s.unwrap_or_default())) };
        let fail = |error: ResponseError| {
            JoinGroupResponse::default()
                .with_error_code(error.code())
                .with_generation_id(-1)
                .with_protocol_name(nullable(None))
                .with_member_id(request.member_id.clone())
        };
        if !(MIN_SESSION_TIMEOUT_MS..=MAX_SESSION_TIMEOUT_MS).contains(&request.session_timeout_ms) {
            return fail(ResponseError::InvalidSessionTimeout);
        }
        let group = match self.coordinated(&request.group_id.0).await {
            Ok(g) => g,
            Err(e) => return fail(e),
        };
        let ms = |ms: i32| std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
        let rebalance_timeout = if version >= 1 && request.rebalance_timeout_ms > 0 {
            request.rebalance_timeout_ms
        } else {
            request.session_timeout_ms
        };
        let join = Join {
            member_id: request.member_id.to_string(),
            instance_id: request.group_instance_id.as_ref().map(|s| s.to_string()),
            client_id: client_id.clone(),
            client_host: format!("/{}", self.peer.ip()),
            session_timeout: ms(request.session_timeout_ms),
            rebalance_timeout: ms(rebalance_timeout),
            protocol_type: request.protocol_type.to_string(),
            protocols: request.protocols.iter().map(|p| (p.name.to_string(), p.metadata.clone())).collect(),
            require_known_member_id: version >= 4,
        };
        let tokens = self.settings.tokens.clone();
        let joined = group.join(join, || format!("{client_id}-{}", tokens.new_token())).await;
        JoinGroupResponse::default()
            .with_error_code(joined.error)
            .with_generation_id(joined.generation)
            .with_protocol_type(if version >= 7 { joined.protocol_type.map(text) } else { None })
            .with_protocol_name(nullable(joined.protocol))
            .with_leader(text(joined.leader))
            .with_member_id(text(joined.member_id))
            .with_members(
                joined
                    .members
                    .into_iter()
                    .map(|(id, instance, metadata)| {
                        join_group_response::JoinGroupResponseMember::default()
                            .with_member_id(text(id))
                            .with_group_instance_id(if version >= 5 { instance.map(text) } else { None })
                            .with_metadata(metadata)
                    })
                    .collect(),
            )
    }

    pub(crate) async fn sync_group(&self, request: SyncGroupRequest, version: i16) -> SyncGroupResponse {
        let group = match self.coordinated(&request.group_id.0).await {
            Ok(g) => g,
            Err(e) => return SyncGroupResponse::default().with_error_code(e.code()),
        };
        let assignments =
            request.assignments.iter().map(|a| (a.member_id.to_string(), a.assignment.clone())).collect();
        let synced = group
            .sync(
                &request.member_id,
                opt_text(request.group_instance_id.as_ref()),
                request.generation_id,
                (opt_text(request.protocol_type.as_ref()), opt_text(request.protocol_name.as_ref())),
                assignments,
            )
            .await;
        let out =
            SyncGroupResponse::default().with_error_code(synced.error).with_assignment(synced.assignment);
        if version >= 5 {
            out.with_protocol_type(synced.protocol_type.map(text))
                .with_protocol_name(synced.protocol.map(text))
        } else {
            out
        }
    }

    pub(crate) async fn heartbeat(&self, request: HeartbeatRequest, _version: i16) -> HeartbeatResponse {
        let outcome = match self.coordinated(&request.group_id.0).await {
            Ok(g) => {
                g.heartbeat(
                    &request.member_id,
                    opt_text(request.group_instance_id.as_ref()),
                    request.generation_id,
                )
                .await
            }
            Err(e) => Err(e),
        };
        HeartbeatResponse::default().with_error_code(code(outcome))
    }

    pub(crate) async fn leave_group(&self, request: LeaveGroupRequest, version: i16) -> LeaveGroupResponse {
        let group = match self.coordinated(&request.group_id.0).await {
            Ok(g) => g,
            Err(e) => return LeaveGroupResponse::default().with_error_code(e.code()),
        };
        if version < 3 {
            let outcome = group.leave(&request.member_id, None).await;
            return LeaveGroupResponse::default().with_error_code(code(outcome));
        }
        let mut members = Vec::with_capacity(request.members.len());
        for m in &request.members {
            let outcome = group.leave(&m.member_id, opt_text(m.group_instance_id.as_ref())).await;
            members.push(
                leave_group_response::MemberResponse::default()
                    .with_member_id(m.member_id.clone())
                    .with_group_instance_id(m.group_instance_id.clone())
                    .with_error_code(code(outcome)),
            );
        }
        LeaveGroupResponse::default().with_members(members)
    }

    pub(crate) async fn list_groups(&self, request: ListGroupsRequest, _version: i16) -> ListGroupsResponse {
        if let Err(e) = self.admit(Permission::Read) {
            return ListGroupsResponse::default().with_error_code(group_code_of(&e).code());
        }
        let caller = self.caller();
        // Name -> (protocol type, state): recorded groups, then groups with committed offsets
        // only, then the live state of those coordinated here.
        let mut groups: BTreeMap<String, (String, String)> = BTreeMap::new();
        match self.shared.coordinator.recorded_groups().await {
            Ok(recorded) => {
                for (name, r) in recorded {
                    groups.insert(name, (r.protocol_type.unwrap_or_default(), r.state));
                }
            }
            Err(e) => return ListGroupsResponse::default().with_error_code(group_code_of(&e).code()),
        }
        let mut after: Option<String> = None;
        loop {
            let page = match self.api.list_groups(caller, NAMESPACE, after.as_deref(), Some(1000)).await {
                Ok(page) => page,
                Err(e) if e.kind() == ErrorKind::NotFound => break,
                Err(e) => return ListGroupsResponse::default().with_error_code(group_code_of(&e).code()),
            };
            for name in page.items {
                groups.entry(name).or_insert_with(|| (String::new(), Phase::Empty.name().to_owned()));
            }
            match page.next_page {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        for g in self.shared.coordinator.local_groups() {
            let view = g.view().await;
            if view.phase != Phase::Empty || groups.contains_key(&g.id) {
                groups.insert(g.id.clone(), (view.protocol_type, view.phase.name().to_owned()));
            }
        }
        // Each group is listed by one process, so that a client asking every broker (Admin's
        // listing does) sees it once: by its coordinator, or, when no live process coordinates
        // it, by the live process of the lowest node id.
        let claims = match self.shared.coordinator.claims().await {
            Ok(claims) => claims,
            Err(e) => return ListGroupsResponse::default().with_error_code(group_code_of(&e).code()),
        };
        let live: Vec<i32> =
            self.shared.coordinator.brokers().await.into_iter().map(|(id, _, _)| id).collect();
        let me = self.settings.node_id;
        let lowest = live.iter().copied().min().unwrap_or(me);
        groups.retain(|name, _| match claims.get(name) {
            Some(node) if live.contains(node) => *node == me,
            _ => me == lowest,
        });
        let wants_state = |state: &str| {
            request.states_filter.is_empty()
                || request.states_filter.iter().any(|s| s.eq_ignore_ascii_case(state))
        };
        let classic = request.types_filter.is_empty()
            || request.types_filter.iter().any(|t| t.eq_ignore_ascii_case("classic"));
        let listed = groups
            .into_iter()
            .filter(|(_, (_, state))| classic && wants_state(state))
            .map(|(name, (protocol_type, state))| {
                list_groups_response::ListedGroup::default()
                    .with_group_id(GroupId(text(name)))
                    .with_protocol_type(text(protocol_type))
                    .with_group_state(text(state))
                    .with_group_type(text("classic"))
            })
            .collect();
        ListGroupsResponse::default().with_groups(listed)
    }

    pub(crate) async fn describe_groups(
        &self,
        request: DescribeGroupsRequest,
        version: i16,
    ) -> DescribeGroupsResponse {
        let mut described = Vec::with_capacity(request.groups.len());
        for id in request.groups {
            let out = describe_groups_response::DescribedGroup::default()
                .with_group_id(id.clone())
                .with_authorized_operations(i32::MIN);
            let group = match self.coordinated(&id.0).await {
                Ok(g) => g,
                Err(e) => {
                    described.push(out.with_error_code(e.code()).with_group_state(text(Phase::Dead.name())));
                    continue;
                }
            };
            let view = group.view().await;
            let exists = view.phase != Phase::Empty
                || view.generation > 0
                || self
                    .api
                    .group_committed_offsets(self.caller(), NAMESPACE, &id.0)
                    .await
                    .is_ok_and(|c| !c.is_empty());
            if !exists {
                // Kafka: a group it does not know is Dead; from v6 also GROUP_ID_NOT_FOUND.
                let out = out.with_group_state(text(Phase::Dead.name()));
                described.push(if version >= 6 {
                    out.with_error_code(ResponseError::GroupIdNotFound.code())
                        .with_error_message(Some(text(format!("group {} does not exist", id.0))))
                } else {
                    out
                });
                continue;
            }
            described.push(
                out.with_group_state(text(view.phase.name()))
                    .with_protocol_type(text(view.protocol_type))
                    .with_protocol_data(text(view.protocol))
                    .with_members(
                        view.members
                            .into_iter()
                            .map(|m| {
                                describe_groups_response::DescribedGroupMember::default()
                                    .with_member_id(text(m.member_id))
                                    .with_group_instance_id(if version >= 4 {
                                        m.instance_id.map(text)
                                    } else {
                                        None
                                    })
                                    .with_client_id(text(m.client_id))
                                    .with_client_host(text(m.client_host))
                                    .with_member_metadata(m.metadata)
                                    .with_member_assignment(m.assignment)
                            })
                            .collect(),
                    ),
            );
        }
        DescribeGroupsResponse::default().with_groups(described)
    }
}
