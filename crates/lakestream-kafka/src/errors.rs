//! Kafka error codes of service-layer errors: the service's table
//! ([`lakestream_service::ErrorKind::kafka_code`]), with the overrides some requests need.

use kafka_protocol::error::ResponseError;
use lakestream_service::api::{ApiError, ErrorKind};

/// The Kafka error code of a service-layer error.
pub(crate) fn code_of(e: &ApiError) -> i16 {
    e.kind().kafka_code()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The service's table names Kafka's codes by number; they are the protocol's.
    #[test]
    fn the_service_table_names_kafka_codes() {
        use ResponseError as R;
        for (kind, expected) in [
            (ErrorKind::InvalidArgument, R::InvalidRequest),
            (ErrorKind::UnsupportedMediaType, R::InvalidRequest),
            (ErrorKind::Unauthenticated, R::TopicAuthorizationFailed),
            (ErrorKind::PermissionDenied, R::TopicAuthorizationFailed),
            (ErrorKind::NotFound, R::UnknownTopicOrPartition),
            (ErrorKind::Conflict, R::UnknownTopicOrPartition),
            (ErrorKind::AlreadyExists, R::TopicAlreadyExists),
            (ErrorKind::TooLarge, R::MessageTooLarge),
            (ErrorKind::RateLimited, R::ThrottlingQuotaExceeded),
            (ErrorKind::Contended, R::KafkaStorageError),
            (ErrorKind::InFlight, R::KafkaStorageError),
            (ErrorKind::Backpressure, R::KafkaStorageError),
            (ErrorKind::Unavailable, R::KafkaStorageError),
            (ErrorKind::NotReady, R::KafkaStorageError),
            (ErrorKind::OutcomeUnknown, R::RequestTimedOut),
            (ErrorKind::CorruptData, R::CorruptMessage),
            (ErrorKind::OutOfSequence, R::OutOfOrderSequenceNumber),
            (ErrorKind::PreconditionFailed, R::InvalidRequest),
            (ErrorKind::RoleNotServed, R::UnknownServerError),
            (ErrorKind::NotImplemented, R::UnknownServerError),
            (ErrorKind::Internal, R::UnknownServerError),
        ] {
            assert_eq!(kind.kafka_code(), expected.code(), "{kind:?}");
        }
    }
}
