//! The one mapping from the service layer's error kinds to Kafka error codes.

use kafka_protocol::error::ResponseError;
use lakestream_service::api::{ApiError, ErrorKind};

/// The Kafka error code of a service-layer error. No wildcard arm: a new kind must be mapped.
pub(crate) fn code_of(e: &ApiError) -> i16 {
    let error = match e.kind() {
        ErrorKind::InvalidArgument | ErrorKind::UnsupportedMediaType => ResponseError::InvalidRequest,
        // Kafka clients have no bearer tokens: a deployment with tokens refuses them.
        ErrorKind::Unauthenticated | ErrorKind::PermissionDenied => ResponseError::TopicAuthorizationFailed,
        ErrorKind::NotFound | ErrorKind::Conflict => ResponseError::UnknownTopicOrPartition,
        ErrorKind::AlreadyExists => ResponseError::TopicAlreadyExists,
        ErrorKind::TooLarge => ResponseError::MessageTooLarge,
        ErrorKind::RateLimited => ResponseError::ThrottlingQuotaExceeded,
        // Retriable: the client backs off and tries again.
        ErrorKind::Contended | ErrorKind::Backpressure | ErrorKind::Unavailable | ErrorKind::NotReady => {
            ResponseError::KafkaStorageError
        }
        // "May have been written": Kafka's timeout says exactly that.
        ErrorKind::OutcomeUnknown => ResponseError::RequestTimedOut,
        ErrorKind::CorruptData => ResponseError::CorruptMessage,
        // An idempotent producer's sequence out of order, as Kafka answers it.
        ErrorKind::OutOfSequence => ResponseError::OutOfOrderSequenceNumber,
        // A conditional append whose expected offset no longer holds.
        ErrorKind::PreconditionFailed => ResponseError::InvalidRequest,
        ErrorKind::RoleNotServed | ErrorKind::NotImplemented | ErrorKind::Internal => {
            ResponseError::UnknownServerError
        }
    };
    error.code()
}

/// The code of an error in a produced partition: invalid record batches are
/// `INVALID_RECORD`, which clients do not retry (`CORRUPT_MESSAGE` they would).
pub(crate) fn produce_code_of(e: &ApiError) -> i16 {
    match e.kind() {
        ErrorKind::InvalidArgument => ResponseError::InvalidRecord.code(),
        _ => code_of(e),
    }
}

/// The code of an error in topic administration.
pub(crate) fn admin_code_of(e: &ApiError) -> i16 {
    match e.kind() {
        ErrorKind::InvalidArgument => ResponseError::InvalidTopicException.code(),
        _ => code_of(e),
    }
}
