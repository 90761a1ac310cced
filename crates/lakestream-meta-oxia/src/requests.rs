//! Building Oxia requests from the spec's primitives (oxia.md §14), and validating them
//! before they are sent. Pure functions: nothing here does I/O.
//!
//! The client checks sequenced puts itself (oxia.md §8): a missing partition key or a first
//! delta of 0 is an *apply error* on the server, which breaks the whole write stream and
//! turns every other write in flight on it into an unknown outcome. A malformed sequenced put
//! must therefore never reach the server.

use bytes::Bytes;

use lakestream_meta::{Comparison, MetaError, MetaResult, PutCondition};

use crate::proto::oxia::{
    DeleteRangeRequest, DeleteRequest, GetRequest, KeyComparisonType, ListRequest, PutRequest,
    RangeScanRequest, ReadRequest, WriteRequest,
};
use crate::routing::ShardId;

/// `expected_version_id` meaning "the key must not exist".
pub const EXPECT_ABSENT: i64 = -1;

/// The spec's `Put`, `CreateIfAbsent` or `CompareAndSet` of `key` in `partition`.
pub fn put_request(
    partition: &str,
    key: &str,
    value: Bytes,
    condition: PutCondition,
) -> MetaResult<PutRequest> {
    check_key("key", key)?;
    let expected_version_id = match condition {
        PutCondition::None => None,
        PutCondition::IfAbsent => Some(EXPECT_ABSENT),
        PutCondition::IfVersion(version) if version < 0 => {
            return Err(MetaError::InvalidRequest(format!(
                "put of {key}: expected version {version} is negative (versions start at 0)"
            )));
        }
        PutCondition::IfVersion(version) => Some(version),
    };
    Ok(PutRequest {
        key: key.to_owned(),
        value,
        expected_version_id,
        // Sent on every put: the server stores it with the record and uses it for splits.
        partition_key: Some(partition.to_owned()),
        ..PutRequest::default()
    })
}

/// The spec's `CreateIfAbsent(P, k, v, ephemeral)`: bound to `session_id` on the shard of
/// the partition.
pub fn ephemeral_put_request(
    partition: &str,
    key: &str,
    value: Bytes,
    session_id: i64,
    client_identity: &str,
) -> MetaResult<PutRequest> {
    let mut request = put_request(partition, key, value, PutCondition::IfAbsent)?;
    request.session_id = Some(session_id);
    request.client_identity = Some(client_identity.to_owned());
    Ok(request)
}

/// The spec's `SequencedPut(P, prefix, deltas…, v)`, validated.
pub fn sequenced_put_request(
    partition: &str,
    prefix: &str,
    deltas: &[u64],
    value: Bytes,
) -> MetaResult<PutRequest> {
    if deltas.is_empty() {
        // Without deltas the server would store a plain put under the prefix itself.
        return Err(MetaError::InvalidRequest(format!(
            "sequenced put on {prefix}: at least one delta is needed"
        )));
    }
    let request = PutRequest {
        key: prefix.to_owned(),
        value,
        partition_key: Some(partition.to_owned()),
        sequence_key_delta: deltas.to_vec(),
        ..PutRequest::default()
    };
    validate_put(&request)?;
    Ok(request)
}

/// Checks a put before it is sent. For a sequenced put (non-empty `sequence_key_delta`,
/// oxia.md §8): the partition key MUST be set, `expected_version_id` MUST NOT be set, and the
/// first delta MUST be greater than 0.
pub fn validate_put(request: &PutRequest) -> MetaResult<()> {
    check_key("key", &request.key)?;
    let Some(first_delta) = request.sequence_key_delta.first() else {
        return Ok(());
    };
    let prefix = &request.key;
    if request.partition_key.is_none() {
        return Err(MetaError::InvalidRequest(format!(
            "sequenced put on {prefix}: the partition key must be set"
        )));
    }
    if let Some(version) = request.expected_version_id {
        return Err(MetaError::InvalidRequest(format!(
            "sequenced put on {prefix}: takes no expected version (got {version})"
        )));
    }
    if *first_delta == 0 {
        return Err(MetaError::InvalidRequest(format!(
            "sequenced put on {prefix}: the first delta must be > 0"
        )));
    }
    if request.session_id.is_some() {
        return Err(MetaError::InvalidRequest(format!("sequenced put on {prefix}: cannot be ephemeral")));
    }
    Ok(())
}

/// The spec's `Delete(P, k)`. The partition key (field 3) is set for servers that route by it;
/// released servers skip it as an unknown field.
pub fn delete_request(partition: &str, key: &str) -> MetaResult<DeleteRequest> {
    check_key("key", key)?;
    Ok(DeleteRequest {
        key: key.to_owned(),
        expected_version_id: None,
        partition_key: Some(partition.to_owned()),
    })
}

/// A conditional `Delete(P, k)`: applied only while the record's version is `version`.
pub fn delete_if_version_request(partition: &str, key: &str, version: i64) -> MetaResult<DeleteRequest> {
    if version < 0 {
        return Err(MetaError::InvalidRequest(format!(
            "delete of {key}: expected version {version} is negative (versions start at 0)"
        )));
    }
    Ok(DeleteRequest { expected_version_id: Some(version), ..delete_request(partition, key)? })
}

/// The spec's `DeleteRange(P, a, b)`. Both bounds must be non-empty (oxia.md §7.3: empty
/// bounds are not reliably "unbounded" for DeleteRange).
pub fn delete_range_request(start: &str, end: &str) -> MetaResult<DeleteRangeRequest> {
    check_key("start of the range", start)?;
    check_key("end of the range", end)?;
    Ok(DeleteRangeRequest { start_inclusive: start.to_owned(), end_exclusive: end.to_owned() })
}

/// A write of one shard, with the shard always set (oxia.md §3.2), holding one put.
pub fn write_put(shard: ShardId, put: PutRequest) -> WriteRequest {
    WriteRequest { shard: Some(shard), puts: vec![put], ..WriteRequest::default() }
}

/// A write of one shard holding one delete.
pub fn write_delete(shard: ShardId, delete: DeleteRequest) -> WriteRequest {
    WriteRequest { shard: Some(shard), deletes: vec![delete], ..WriteRequest::default() }
}

/// A write of one shard holding one delete-range.
pub fn write_delete_range(shard: ShardId, range: DeleteRangeRequest) -> WriteRequest {
    WriteRequest { shard: Some(shard), delete_ranges: vec![range], ..WriteRequest::default() }
}

/// The comparison type on the wire.
pub fn comparison_type(cmp: Comparison) -> KeyComparisonType {
    match cmp {
        Comparison::Equal => KeyComparisonType::Equal,
        Comparison::Floor => KeyComparisonType::Floor,
        Comparison::Ceiling => KeyComparisonType::Ceiling,
        Comparison::Lower => KeyComparisonType::Lower,
        Comparison::Higher => KeyComparisonType::Higher,
    }
}

/// A read of one key by comparison, with the value (oxia.md §14: `include_value: true`).
pub fn read_request(shard: ShardId, key: &str, cmp: Comparison) -> MetaResult<ReadRequest> {
    // An empty key is meaningful for comparisons (Ceiling("") is the first key).
    if cmp == Comparison::Equal {
        check_key("key", key)?;
    }
    Ok(ReadRequest {
        shard: Some(shard),
        gets: vec![GetRequest {
            key: key.to_owned(),
            include_value: true,
            comparison_type: comparison_type(cmp) as i32,
            secondary_index_name: None,
        }],
    })
}

/// A list of `[start, end)` on one shard; `""` means unbounded on that side.
pub fn list_request(shard: ShardId, start: &str, end: &str) -> ListRequest {
    ListRequest {
        shard: Some(shard),
        start_inclusive: start.to_owned(),
        end_exclusive: end.to_owned(),
        ..ListRequest::default()
    }
}

/// A range scan of `[start, end)` on one shard; `""` means unbounded on that side.
pub fn range_scan_request(shard: ShardId, start: &str, end: &str) -> RangeScanRequest {
    RangeScanRequest {
        shard: Some(shard),
        start_inclusive: start.to_owned(),
        end_exclusive: end.to_owned(),
        ..RangeScanRequest::default()
    }
}

/// Whether `key` is one of Oxia's internal keys (sessions, indexes), which servers before
/// v0.15 can return from wide lists and scans. They are never Lakestream records.
pub fn is_internal_key(key: &str) -> bool {
    key.starts_with("__oxia/")
}

fn check_key(what: &str, key: &str) -> MetaResult<()> {
    if key.is_empty() {
        return Err(MetaError::InvalidRequest(format!("the {what} must not be empty")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use lakestream_format::ErrorClass;

    use super::*;

    fn value() -> Bytes {
        Bytes::from_static(b"v")
    }

    #[test]
    fn put_conditions_become_expected_versions() {
        let plain = put_request("7", "/k", value(), PutCondition::None).expect("valid");
        assert_eq!(plain.expected_version_id, None);
        assert_eq!(plain.partition_key.as_deref(), Some("7"));
        let absent = put_request("7", "/k", value(), PutCondition::IfAbsent).expect("valid");
        assert_eq!(absent.expected_version_id, Some(-1));
        let cas = put_request("7", "/k", value(), PutCondition::IfVersion(12)).expect("valid");
        assert_eq!(cas.expected_version_id, Some(12));
        assert!(cas.sequence_key_delta.is_empty() && cas.session_id.is_none());
    }

    #[test]
    fn bad_puts_are_invalid_requests() {
        for result in [
            put_request("7", "", value(), PutCondition::None),
            put_request("7", "/k", value(), PutCondition::IfVersion(-1)),
        ] {
            assert_eq!(result.map_err(|e| e.class()), Err(ErrorClass::InvalidInput));
        }
    }

    #[test]
    fn ephemeral_put_is_create_if_absent_bound_to_the_session() {
        let request =
            ephemeral_put_request("7", "/stream-write-leases/7/u", value(), 42, "me").expect("valid");
        assert_eq!(request.expected_version_id, Some(-1));
        assert_eq!(request.session_id, Some(42));
        assert_eq!(request.client_identity.as_deref(), Some("me"));
        assert_eq!(request.partition_key.as_deref(), Some("7"));
    }

    #[test]
    fn sequenced_put_shape() {
        let request = sequenced_put_request("7", "00000000000000000007", &[3, 8], value()).expect("valid");
        assert_eq!(request.key, "00000000000000000007");
        assert_eq!(request.sequence_key_delta, vec![3, 8]);
        assert_eq!(request.partition_key.as_deref(), Some("7"));
        assert_eq!(request.expected_version_id, None);
        // Later deltas may be 0.
        assert!(sequenced_put_request("7", "p", &[1, 0], value()).is_ok());
    }

    /// oxia.md §8: a sequenced put MUST have a partition key, MUST NOT have an expected
    /// version, and its first delta MUST be > 0; the client refuses each before sending.
    #[test]
    fn malformed_sequenced_puts_never_pass_validation() {
        let good = sequenced_put_request("7", "p", &[1, 1], value()).expect("valid");
        let cases = [
            ("no partition key", PutRequest { partition_key: None, ..good.clone() }, "partition key"),
            (
                "expected version set",
                PutRequest { expected_version_id: Some(-1), ..good.clone() },
                "expected version",
            ),
            ("first delta 0", PutRequest { sequence_key_delta: vec![0, 5], ..good.clone() }, "first delta"),
            ("ephemeral", PutRequest { session_id: Some(1), ..good.clone() }, "ephemeral"),
            ("empty prefix", PutRequest { key: String::new(), ..good.clone() }, "key"),
        ];
        for (case, request, named) in cases {
            let error = validate_put(&request).expect_err(case);
            assert_eq!(error.class(), ErrorClass::InvalidInput, "{case}");
            assert!(error.to_string().contains(named), "{case}: {error}");
        }
        assert!(sequenced_put_request("7", "p", &[0], value()).is_err());
        let no_deltas = sequenced_put_request("7", "p", &[], value()).expect_err("no deltas");
        assert!(no_deltas.to_string().contains("delta"), "{no_deltas}");
        assert_eq!(validate_put(&good), Ok(()));
    }

    #[test]
    fn delete_range_needs_both_bounds() {
        assert!(delete_range_request("", "b").is_err());
        assert!(delete_range_request("a", "").is_err());
        let range = delete_range_request("a", "b").expect("valid");
        assert_eq!((range.start_inclusive.as_str(), range.end_exclusive.as_str()), ("a", "b"));
    }

    #[test]
    fn writes_and_reads_always_carry_the_shard() {
        let put = put_request("7", "/k", value(), PutCondition::None).expect("valid");
        assert_eq!(write_put(0, put).shard, Some(0));
        let delete = delete_request("7", "/k").expect("valid");
        assert_eq!(delete.partition_key.as_deref(), Some("7"));
        assert_eq!(write_delete(3, delete).shard, Some(3));
        assert_eq!(write_delete_range(2, delete_range_request("a", "b").expect("valid")).shard, Some(2));
        assert_eq!(list_request(0, "", "").shard, Some(0));
        assert_eq!(range_scan_request(1, "a", "b").shard, Some(1));
        let read = read_request(0, "k", Comparison::Higher).expect("valid");
        assert_eq!(read.shard, Some(0));
        let get = &read.gets[0];
        assert!(get.include_value);
        assert_eq!(get.comparison_type, KeyComparisonType::Higher as i32);
        assert!(read_request(0, "", Comparison::Equal).is_err());
        assert!(read_request(0, "", Comparison::Ceiling).is_ok());
    }

    #[test]
    fn comparison_types_match_the_wire_enum() {
        let pairs = [
            (Comparison::Equal, 0),
            (Comparison::Floor, 1),
            (Comparison::Ceiling, 2),
            (Comparison::Lower, 3),
            (Comparison::Higher, 4),
        ];
        for (cmp, wire) in pairs {
            assert_eq!(comparison_type(cmp) as i32, wire, "{cmp:?}");
        }
    }
}
