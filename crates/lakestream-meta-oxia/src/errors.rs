//! RPC errors of Oxia servers (oxia.md §12) and their mapping to [`MetaError`].
//!
//! Servers up to v0.16 answer with custom gRPC codes 100–112. tonic turns codes it does not
//! know into `Code::Unknown` and drops the raw value, so those errors are recognised by their
//! fixed message text (each code has one message upstream, e.g. `oxia: session not found`;
//! the not-leader message varies: `oxia: node is not leader for shard`, `node is not leader
//! for shard 3`). Servers from v0.17 on answer with standard codes and a `google.rpc.ErrorInfo`
//! detail (domain `oxia.io`) whose `reason` names the error. [`OxiaError::from_status`] reads
//! the detail first, then the message text, then the standard code.
//!
//! Whether an error means "failed" or "outcome unknown" depends on where the request was when
//! it happened ([`RequestPhase`]): a write that was sent on a stream that then broke may have
//! committed, whatever the error says.

use prost::Message;
use tonic::Code;

use lakestream_meta::MetaError;

use crate::proto::oxia::LeaderHint;
use crate::proto::rpc_status::{ErrorInfo, Status as RpcStatus};

/// The `ErrorInfo.domain` of Oxia errors.
pub const ERROR_DOMAIN: &str = "oxia.io";

/// What went wrong, as far as a client acts on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OxiaErrorKind {
    /// 100 / `NOT_INITIALIZED`: the shard is not ready yet.
    NotInitialized,
    /// 101 / `INVALID_TERM`.
    InvalidTerm,
    /// 102 / `INVALID_STATUS`: the node is in the wrong state (e.g. mid-election).
    InvalidStatus,
    /// 103: the operation was cancelled on the server.
    Cancelled,
    /// 104: the resource is already closed.
    AlreadyClosed,
    /// 105: a leader is already connected (replication-internal).
    LeaderAlreadyConnected,
    /// 106 / `NODE_IS_NOT_LEADER`: re-route; `leader_hint` is the new leader when the server
    /// named it.
    NotLeader {
        /// `host:port` of the leader, from a v0.16 `LeaderHint` or v0.17 `ErrorInfo` metadata.
        leader_hint: Option<String>,
    },
    /// 107: the node is not a follower (replication-internal).
    NotFollower,
    /// 108 / `SESSION_NOT_FOUND`: the session expired or was closed.
    SessionNotFound,
    /// 109 / `INVALID_SESSION_TIMEOUT`: outside 2 s ..= 5 min.
    InvalidSessionTimeout,
    /// 110 / `NAMESPACE_NOT_FOUND`.
    NamespaceNotFound,
    /// 111 / `NOTIFICATIONS_NOT_ENABLED`.
    NotificationsNotEnabled,
    /// 112 / `NODE_IS_NOT_MEMBER`: the node does not hold the shard; re-route.
    NotMember,
    /// v0.17 `SHARD_NOT_FOUND`: the shard is gone (e.g. split); re-route.
    ShardNotFound,
    /// v0.17 `RESOURCE_UNAVAILABLE`.
    ResourceUnavailable,
    /// v0.17 `RESOURCE_CONFLICT`.
    ResourceConflict,
    /// v0.17 `ABORTED` reason, or a plain `ABORTED` code.
    Aborted,
    /// No connection to the server could be made: nothing was sent.
    ConnectFailed,
    /// The connection failed or the server was unavailable (`UNAVAILABLE`).
    Transport,
    /// The request took longer than its deadline (`DEADLINE_EXCEEDED`).
    DeadlineExceeded,
    /// The server rejected the request's shape (`INVALID_ARGUMENT`, e.g. a missing shard id).
    InvalidArgument,
    /// Authentication or `:authority` check failed (`UNAUTHENTICATED`, `PERMISSION_DENIED`).
    AccessDenied,
    /// A stream ended without an answer to a request that was sent.
    StreamEnded,
    /// Any other error.
    Other,
}

/// An error from an Oxia RPC, with the server's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct OxiaError {
    /// What went wrong.
    pub kind: OxiaErrorKind,
    /// The server's (or transport's) message.
    pub message: String,
}

/// Where a request was when its error happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestPhase {
    /// It never left the client (no connection, no route, stream not open).
    NotSent,
    /// The server answered this request with the error: it did not take effect.
    Rejected,
    /// It was sent as a write and no answer came (stream broke, timeout): it may have
    /// committed.
    WriteInFlight,
}

/// What the client should do before trying again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryAdvice {
    /// Not retryable.
    DoNotRetry,
    /// Retry as is (reads freely; writes only if not in flight).
    Retry,
    /// The shard moved: re-route (to the hint, or after the next assignment update), then retry.
    Reroute {
        /// The leader the server named, if any.
        leader_hint: Option<String>,
    },
}

/// The custom gRPC codes of servers up to v0.16 with the text their messages contain
/// (oxia.md §12; `common/constant` upstream, where messages read `oxia: {text}`, sometimes
/// followed by a shard id). Code 112 exists only in v0.16.x.
pub const LEGACY_CODES: &[(i32, &str)] = &[
    (100, "server not initialized yet"),
    (101, "invalid term"),
    (102, "invalid status"),
    (103, "operation was cancelled"),
    (104, "resource is already closed"),
    (105, "leader is already connected"),
    (106, "node is not leader"),
    (107, "node is not follower"),
    (108, "session not found"),
    (109, "invalid session timeout"),
    (110, "namespace not found"),
    (111, "notifications not enabled on namespace"),
    (112, "node is not a member"),
];

/// The kind of a custom code of servers up to v0.16.
pub fn legacy_code_kind(code: i32) -> Option<OxiaErrorKind> {
    Some(match code {
        100 => OxiaErrorKind::NotInitialized,
        101 => OxiaErrorKind::InvalidTerm,
        102 => OxiaErrorKind::InvalidStatus,
        103 => OxiaErrorKind::Cancelled,
        104 => OxiaErrorKind::AlreadyClosed,
        105 => OxiaErrorKind::LeaderAlreadyConnected,
        106 => OxiaErrorKind::NotLeader { leader_hint: None },
        107 => OxiaErrorKind::NotFollower,
        108 => OxiaErrorKind::SessionNotFound,
        109 => OxiaErrorKind::InvalidSessionTimeout,
        110 => OxiaErrorKind::NamespaceNotFound,
        111 => OxiaErrorKind::NotificationsNotEnabled,
        112 => OxiaErrorKind::NotMember,
        _ => return None,
    })
}

/// The custom code whose fixed text `message` contains: tonic reports custom codes as
/// `Unknown`, keeping the message but not the raw code.
pub fn legacy_code_from_message(message: &str) -> Option<i32> {
    LEGACY_CODES.iter().find(|(_, text)| message.contains(text)).map(|(code, _)| *code)
}

/// The kind named by a v0.17+ `ErrorInfo` reason; `leader` is the metadata's leader hint.
pub fn error_info_kind(reason: &str, leader: Option<&str>) -> OxiaErrorKind {
    match reason {
        "NODE_IS_NOT_LEADER" => {
            OxiaErrorKind::NotLeader { leader_hint: leader.filter(|l| !l.is_empty()).map(str::to_owned) }
        }
        "NODE_IS_NOT_MEMBER" => OxiaErrorKind::NotMember,
        "ABORTED" => OxiaErrorKind::Aborted,
        "SESSION_NOT_FOUND" => OxiaErrorKind::SessionNotFound,
        "NAMESPACE_NOT_FOUND" => OxiaErrorKind::NamespaceNotFound,
        "SHARD_NOT_FOUND" => OxiaErrorKind::ShardNotFound,
        "INVALID_SESSION_TIMEOUT" => OxiaErrorKind::InvalidSessionTimeout,
        "NOT_INITIALIZED" => OxiaErrorKind::NotInitialized,
        "RESOURCE_UNAVAILABLE" => OxiaErrorKind::ResourceUnavailable,
        "INVALID_TERM" => OxiaErrorKind::InvalidTerm,
        "INVALID_STATUS" => OxiaErrorKind::InvalidStatus,
        "NOTIFICATIONS_NOT_ENABLED" => OxiaErrorKind::NotificationsNotEnabled,
        "RESOURCE_CONFLICT" => OxiaErrorKind::ResourceConflict,
        _ => OxiaErrorKind::Other,
    }
}

/// The kind of a standard gRPC code without Oxia details.
fn standard_code_kind(code: Code) -> OxiaErrorKind {
    match code {
        Code::Unavailable => OxiaErrorKind::Transport,
        Code::DeadlineExceeded => OxiaErrorKind::DeadlineExceeded,
        Code::InvalidArgument => OxiaErrorKind::InvalidArgument,
        Code::Unauthenticated | Code::PermissionDenied => OxiaErrorKind::AccessDenied,
        Code::Aborted => OxiaErrorKind::Aborted,
        Code::Cancelled => OxiaErrorKind::Cancelled,
        _ => OxiaErrorKind::Other,
    }
}

/// What the `grpc-status-details-bin` bytes say: an Oxia `ErrorInfo` reason with its leader
/// hint, or a v0.16 `LeaderHint`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Details {
    reason: Option<String>,
    leader: Option<String>,
}

fn decode_details(bytes: &[u8]) -> Details {
    let mut found = Details::default();
    if bytes.is_empty() {
        return found;
    }
    // Undecodable details are ignored: the code and message still classify the error.
    let Ok(status) = RpcStatus::decode(bytes) else { return found };
    for detail in status.details {
        if detail.type_url.ends_with("/google.rpc.ErrorInfo") {
            if let Ok(info) = ErrorInfo::decode(detail.value.as_slice())
                && info.domain == ERROR_DOMAIN
            {
                found.leader = info.metadata.get("leader").cloned().or(found.leader);
                found.reason = Some(info.reason);
            }
        } else if (detail.type_url.ends_with(".LeaderHint") || detail.type_url.ends_with(".ServerRedirect"))
            && let Ok(hint) = LeaderHint::decode(detail.value.as_slice())
            && !hint.leader_address.is_empty()
        {
            found.leader = Some(hint.leader_address);
        }
    }
    found
}

impl OxiaError {
    /// Classifies a status from any server version. A status caused by a failure to connect
    /// (tonic's `ConnectError` in its source chain) is [`OxiaErrorKind::ConnectFailed`].
    ///
    /// A status with a source error was made by the client's own transport (HTTP/2 or
    /// connection failures, e.g. a `GOAWAY`), never sent by a server: it is
    /// [`OxiaErrorKind::Transport`], so reads retry on a fresh connection instead of failing.
    pub fn from_status(status: &tonic::Status) -> Self {
        let first: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
        let mut source = first;
        while let Some(error) = source {
            if error.downcast_ref::<tonic::ConnectError>().is_some() {
                return Self::new(OxiaErrorKind::ConnectFailed, status.message());
            }
            source = error.source();
        }
        if let Some(cause) = first
            && matches!(status.code(), Code::Unknown | Code::Internal | Code::Unavailable | Code::Cancelled)
        {
            return Self::new(OxiaErrorKind::Transport, format!("{}: {cause}", status.message()));
        }
        Self::classify(status.code(), status.message(), status.details())
    }

    /// Classifies a gRPC error from its parts: `details` is the raw
    /// `grpc-status-details-bin` value (a `google.rpc.Status`).
    pub fn classify(code: Code, message: &str, details: &[u8]) -> Self {
        let details = decode_details(details);
        let kind = if let Some(reason) = &details.reason {
            error_info_kind(reason, details.leader.as_deref())
        } else if let Some(kind) = legacy_code_from_message(message).and_then(legacy_code_kind) {
            // Oxia's own texts: under the custom codes (reported as Unknown), and under the
            // standard codes of servers that send no ErrorInfo.
            match kind {
                OxiaErrorKind::NotLeader { .. } => OxiaErrorKind::NotLeader { leader_hint: details.leader },
                other => other,
            }
        } else {
            standard_code_kind(code)
        };
        Self { kind, message: message.to_owned() }
    }

    /// An error of this kind with a message of our own.
    pub fn new(kind: OxiaErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    /// What to do before retrying.
    pub fn retry_advice(&self) -> RetryAdvice {
        match &self.kind {
            OxiaErrorKind::NotLeader { leader_hint } => {
                RetryAdvice::Reroute { leader_hint: leader_hint.clone() }
            }
            OxiaErrorKind::NotMember | OxiaErrorKind::ShardNotFound => {
                RetryAdvice::Reroute { leader_hint: None }
            }
            OxiaErrorKind::NotInitialized
            | OxiaErrorKind::InvalidTerm
            | OxiaErrorKind::InvalidStatus
            | OxiaErrorKind::Cancelled
            | OxiaErrorKind::AlreadyClosed
            | OxiaErrorKind::LeaderAlreadyConnected
            | OxiaErrorKind::NotFollower
            | OxiaErrorKind::ResourceUnavailable
            | OxiaErrorKind::Aborted
            | OxiaErrorKind::ConnectFailed
            | OxiaErrorKind::Transport
            | OxiaErrorKind::DeadlineExceeded
            | OxiaErrorKind::StreamEnded => RetryAdvice::Retry,
            OxiaErrorKind::SessionNotFound
            | OxiaErrorKind::InvalidSessionTimeout
            | OxiaErrorKind::NamespaceNotFound
            | OxiaErrorKind::NotificationsNotEnabled
            | OxiaErrorKind::ResourceConflict
            | OxiaErrorKind::InvalidArgument
            | OxiaErrorKind::AccessDenied
            | OxiaErrorKind::Other => RetryAdvice::DoNotRetry,
        }
    }

    /// The store error a caller sees. A write in flight is always
    /// [`MetaError::OutcomeUnknown`]: it may have committed whatever the error says.
    pub fn to_meta_error(&self, phase: RequestPhase) -> MetaError {
        let text = format!("oxia: {self}");
        if phase == RequestPhase::WriteInFlight {
            return MetaError::OutcomeUnknown(text);
        }
        match &self.kind {
            OxiaErrorKind::SessionNotFound => MetaError::SessionEnded(text),
            OxiaErrorKind::InvalidSessionTimeout | OxiaErrorKind::InvalidArgument => {
                MetaError::InvalidRequest(text)
            }
            // A namespace missing is a setting that cannot work; retrying will not help.
            OxiaErrorKind::NamespaceNotFound
            | OxiaErrorKind::NotificationsNotEnabled
            | OxiaErrorKind::ResourceConflict
            | OxiaErrorKind::AccessDenied
            | OxiaErrorKind::Other => MetaError::Internal(text),
            OxiaErrorKind::NotInitialized
            | OxiaErrorKind::InvalidTerm
            | OxiaErrorKind::InvalidStatus
            | OxiaErrorKind::Cancelled
            | OxiaErrorKind::AlreadyClosed
            | OxiaErrorKind::LeaderAlreadyConnected
            | OxiaErrorKind::NotLeader { .. }
            | OxiaErrorKind::NotFollower
            | OxiaErrorKind::NotMember
            | OxiaErrorKind::ShardNotFound
            | OxiaErrorKind::ResourceUnavailable
            | OxiaErrorKind::Aborted
            | OxiaErrorKind::ConnectFailed
            | OxiaErrorKind::Transport
            | OxiaErrorKind::DeadlineExceeded
            | OxiaErrorKind::StreamEnded => MetaError::Unavailable(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use lakestream_format::ErrorClass;

    use super::*;
    use crate::proto::rpc_status::AnyDetail;

    /// oxia.md §12, servers ≤ v0.16: every custom code, the kind it means, the class of the
    /// store error when the server rejected the request, and the retry advice.
    #[test]
    fn legacy_codes_map_to_kinds_and_classes() {
        use ErrorClass::*;
        use OxiaErrorKind as K;
        let reroute = RetryAdvice::Reroute { leader_hint: None };
        let table: &[(i32, OxiaErrorKind, ErrorClass, RetryAdvice)] = &[
            (100, K::NotInitialized, Retryable, RetryAdvice::Retry),
            (101, K::InvalidTerm, Retryable, RetryAdvice::Retry),
            (102, K::InvalidStatus, Retryable, RetryAdvice::Retry),
            (103, K::Cancelled, Retryable, RetryAdvice::Retry),
            (104, K::AlreadyClosed, Retryable, RetryAdvice::Retry),
            (105, K::LeaderAlreadyConnected, Retryable, RetryAdvice::Retry),
            // "not leader" → retry after re-route.
            (106, K::NotLeader { leader_hint: None }, Retryable, reroute.clone()),
            (107, K::NotFollower, Retryable, RetryAdvice::Retry),
            // "session not found" → the session ended.
            (108, K::SessionNotFound, Conflict, RetryAdvice::DoNotRetry),
            (109, K::InvalidSessionTimeout, InvalidInput, RetryAdvice::DoNotRetry),
            (110, K::NamespaceNotFound, Internal, RetryAdvice::DoNotRetry),
            (111, K::NotificationsNotEnabled, Internal, RetryAdvice::DoNotRetry),
            (112, K::NotMember, Retryable, reroute),
        ];
        assert_eq!(table.len(), LEGACY_CODES.len());
        for (code, kind, class, advice) in table {
            assert_eq!(legacy_code_kind(*code).as_ref(), Some(kind), "code {code}");
            // tonic reports the custom code as Unknown; the message identifies it.
            let (_, message) = LEGACY_CODES.iter().find(|(c, _)| c == code).expect("listed");
            let error = OxiaError::classify(Code::Unknown, message, &[]);
            assert_eq!(&error.kind, kind, "code {code} by message");
            assert_eq!(error.to_meta_error(RequestPhase::Rejected).class(), *class, "code {code}");
            assert_eq!(&error.retry_advice(), advice, "code {code}");
        }
        assert_eq!(legacy_code_kind(99), None);
        assert_eq!(legacy_code_kind(113), None);
    }

    #[test]
    fn legacy_messages_with_details_appended_still_match() {
        for message in ["oxia: node is not leader for shard 3", "node is not leader for shard 3"] {
            let error = OxiaError::classify(Code::Unknown, message, &[]);
            assert_eq!(error.kind, OxiaErrorKind::NotLeader { leader_hint: None }, "{message}");
        }
        // Standard codes with Oxia's texts and no ErrorInfo are read by their text too.
        let error = OxiaError::classify(Code::Aborted, "oxia: node is not leader", &[]);
        assert_eq!(error.retry_advice(), RetryAdvice::Reroute { leader_hint: None });
        let error = OxiaError::classify(Code::NotFound, "oxia: session not found", &[]);
        assert_eq!(error.kind, OxiaErrorKind::SessionNotFound);
        let error = OxiaError::classify(Code::Internal, "disk full", &[]);
        assert_eq!(error.kind, OxiaErrorKind::Other);
    }

    fn error_info_details(reason: &str, metadata: &[(&str, &str)]) -> Vec<u8> {
        let info = ErrorInfo {
            reason: reason.to_owned(),
            domain: ERROR_DOMAIN.to_owned(),
            metadata: metadata.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        };
        RpcStatus {
            code: 0,
            message: String::new(),
            details: vec![AnyDetail {
                type_url: "type.googleapis.com/google.rpc.ErrorInfo".to_owned(),
                value: info.encode_to_vec(),
            }],
        }
        .encode_to_vec()
    }

    /// oxia.md §12, servers ≥ v0.17: every `ErrorInfo` reason with its gRPC code.
    #[test]
    fn error_info_reasons_map_to_kinds_and_classes() {
        use ErrorClass::*;
        use OxiaErrorKind as K;
        let table: &[(&str, Code, OxiaErrorKind, ErrorClass)] = &[
            ("NODE_IS_NOT_LEADER", Code::Aborted, K::NotLeader { leader_hint: None }, Retryable),
            ("NODE_IS_NOT_MEMBER", Code::Aborted, K::NotMember, Retryable),
            ("ABORTED", Code::Aborted, K::Aborted, Retryable),
            ("SESSION_NOT_FOUND", Code::NotFound, K::SessionNotFound, Conflict),
            ("NAMESPACE_NOT_FOUND", Code::NotFound, K::NamespaceNotFound, Internal),
            ("SHARD_NOT_FOUND", Code::NotFound, K::ShardNotFound, Retryable),
            ("INVALID_SESSION_TIMEOUT", Code::InvalidArgument, K::InvalidSessionTimeout, InvalidInput),
            ("NOT_INITIALIZED", Code::Unavailable, K::NotInitialized, Retryable),
            ("RESOURCE_UNAVAILABLE", Code::Unavailable, K::ResourceUnavailable, Retryable),
            ("INVALID_TERM", Code::FailedPrecondition, K::InvalidTerm, Retryable),
            ("INVALID_STATUS", Code::FailedPrecondition, K::InvalidStatus, Retryable),
            ("NOTIFICATIONS_NOT_ENABLED", Code::FailedPrecondition, K::NotificationsNotEnabled, Internal),
            ("RESOURCE_CONFLICT", Code::FailedPrecondition, K::ResourceConflict, Internal),
            ("SOMETHING_NEW", Code::Unknown, K::Other, Internal),
        ];
        for (reason, code, kind, class) in table {
            let error = OxiaError::classify(*code, "server message", &error_info_details(reason, &[]));
            assert_eq!(&error.kind, kind, "reason {reason}");
            assert_eq!(error.to_meta_error(RequestPhase::Rejected).class(), *class, "reason {reason}");
        }
    }

    #[test]
    fn not_leader_carries_the_leader_hint_of_either_version() {
        let v17 = error_info_details("NODE_IS_NOT_LEADER", &[("shard", "3"), ("leader", "10.0.0.2:6648")]);
        let error = OxiaError::classify(Code::Aborted, "node is not leader", &v17);
        assert_eq!(error.retry_advice(), RetryAdvice::Reroute { leader_hint: Some("10.0.0.2:6648".into()) });

        let hint = LeaderHint { shard: 3, leader_address: "10.0.0.3:6648".into() };
        let v16 = RpcStatus {
            code: 106,
            message: String::new(),
            details: vec![AnyDetail {
                type_url: "type.googleapis.com/io.streamnative.oxia.proto.LeaderHint".into(),
                value: hint.encode_to_vec(),
            }],
        }
        .encode_to_vec();
        let error = OxiaError::classify(Code::Unknown, "oxia: node is not leader for shard", &v16);
        assert_eq!(error.kind, OxiaErrorKind::NotLeader { leader_hint: Some("10.0.0.3:6648".into()) });
    }

    #[test]
    fn error_info_of_another_domain_and_garbage_details_are_ignored() {
        let foreign = RpcStatus {
            code: 10,
            message: String::new(),
            details: vec![AnyDetail {
                type_url: "type.googleapis.com/google.rpc.ErrorInfo".into(),
                value: ErrorInfo {
                    reason: "SESSION_NOT_FOUND".into(),
                    domain: "x.io".into(),
                    metadata: HashMap::new(),
                }
                .encode_to_vec(),
            }],
        }
        .encode_to_vec();
        assert_eq!(OxiaError::classify(Code::Aborted, "m", &foreign).kind, OxiaErrorKind::Aborted);
        assert_eq!(
            OxiaError::classify(Code::Unavailable, "m", &[0xff, 0xff, 0xff]).kind,
            OxiaErrorKind::Transport
        );
    }

    #[test]
    fn a_failure_to_connect_is_recognised_from_the_source_chain() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let status = tonic::Status::from_error(Box::new(tonic::ConnectError(Box::new(refused))));
        assert_eq!(OxiaError::from_status(&status).kind, OxiaErrorKind::ConnectFailed);
        let plain = tonic::Status::unavailable("connection reset");
        assert_eq!(OxiaError::from_status(&plain).kind, OxiaErrorKind::Transport);
    }

    #[test]
    fn standard_codes_without_details() {
        use OxiaErrorKind as K;
        for (code, kind) in [
            (Code::Unavailable, K::Transport),
            (Code::DeadlineExceeded, K::DeadlineExceeded),
            (Code::InvalidArgument, K::InvalidArgument),
            (Code::PermissionDenied, K::AccessDenied),
            (Code::Unauthenticated, K::AccessDenied),
            (Code::Internal, K::Other),
            (Code::Unknown, K::Other),
        ] {
            assert_eq!(OxiaError::classify(code, "shard id is required", &[]).kind, kind, "{code:?}");
        }
        // Missing shard id (every version): INVALID_ARGUMENT, the caller's fault.
        let error = OxiaError::classify(Code::InvalidArgument, "shard id is required", &[]);
        assert_eq!(error.to_meta_error(RequestPhase::Rejected).class(), ErrorClass::InvalidInput);
    }

    /// oxia.md §6: an error after a write was sent fails it with an unknown outcome, never as
    /// failed — including "not leader", which would otherwise be retryable.
    #[test]
    fn a_write_in_flight_is_outcome_unknown_whatever_the_error() {
        let kinds = [
            OxiaErrorKind::StreamEnded,
            OxiaErrorKind::Transport,
            OxiaErrorKind::NotLeader { leader_hint: None },
            OxiaErrorKind::InvalidStatus,
            OxiaErrorKind::DeadlineExceeded,
            OxiaErrorKind::Other,
        ];
        for kind in kinds {
            let error = OxiaError::new(kind.clone(), "stream broke");
            let meta = error.to_meta_error(RequestPhase::WriteInFlight);
            assert!(matches!(meta, MetaError::OutcomeUnknown(_)), "{kind:?}");
            assert_eq!(meta.class(), ErrorClass::OutcomeUnknown);
        }
        // The same errors before sending are plainly retryable.
        let not_sent =
            OxiaError::new(OxiaErrorKind::Transport, "connect refused").to_meta_error(RequestPhase::NotSent);
        assert_eq!(not_sent.class(), ErrorClass::Retryable);
    }
}
