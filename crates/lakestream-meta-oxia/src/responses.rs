//! Turning Oxia responses into the store's results (oxia.md §7, §8, §14). Pure functions.
//!
//! Per-operation outcomes are a `Status` in the response, not an RPC error. A response that
//! breaks the protocol (a missing version, a sequenced key without the prefix, a count that
//! does not match the request) is [`MetaError::Internal`], naming what was wrong.

use lakestream_meta::{MetaError, MetaResult, PutCondition, Record, WriteResult};

use crate::proto::oxia::{GetResponse, PutResponse, Status, Version, WriteResponse};

fn status_of(raw: i32, what: &str) -> MetaResult<Status> {
    Status::try_from(raw)
        .map_err(|_| MetaError::Internal(format!("{what}: unknown status {raw} from the server")))
}

fn timestamp(raw: u64, field: &str, key: &str) -> MetaResult<i64> {
    i64::try_from(raw).map_err(|_| MetaError::Internal(format!("{key}: {field} {raw} is out of range")))
}

fn write_result(key: String, version: Option<&Version>) -> MetaResult<WriteResult> {
    let version =
        version.ok_or_else(|| MetaError::Internal(format!("put of {key}: OK without a version")))?;
    Ok(WriteResult {
        version: version.version_id,
        created_ms: timestamp(version.created_timestamp, "created_timestamp", &key)?,
        modified_ms: timestamp(version.modified_timestamp, "modified_timestamp", &key)?,
        key,
    })
}

/// The one response of a single-operation write: checks that the server answered exactly the
/// operations sent (responses are positional).
pub fn single_put(response: WriteResponse, key: &str) -> MetaResult<PutResponse> {
    let count = (response.puts.len(), response.deletes.len(), response.delete_ranges.len());
    match (count, response.puts.into_iter().next()) {
        ((1, 0, 0), Some(put)) => Ok(put),
        _ => Err(MetaError::Internal(format!(
            "put of {key}: the response holds {count:?} results, expected one put"
        ))),
    }
}

/// The result of a `Put` / `CreateIfAbsent` / `CompareAndSet` (oxia.md §7.1).
pub fn put_outcome(key: &str, condition: PutCondition, response: &PutResponse) -> MetaResult<WriteResult> {
    match status_of(response.status, key)? {
        Status::Ok => write_result(key.to_owned(), response.version.as_ref()),
        Status::UnexpectedVersionId => match condition {
            PutCondition::IfAbsent => Err(MetaError::KeyExists { key: key.to_owned() }),
            PutCondition::IfVersion(expected) => {
                Err(MetaError::VersionMismatch { key: key.to_owned(), expected })
            }
            PutCondition::None => {
                Err(MetaError::Internal(format!("put of {key}: version conflict on an unconditional put")))
            }
        },
        Status::SessionDoesNotExist => {
            Err(MetaError::SessionEnded(format!("put of {key}: the session no longer exists")))
        }
        Status::KeyNotFound => {
            Err(MetaError::Internal(format!("put of {key}: the server answered KEY_NOT_FOUND")))
        }
    }
}

/// The result of a sequenced put: the generated key must extend `prefix` with `-` (oxia.md §8).
pub fn sequenced_put_outcome(prefix: &str, response: &PutResponse) -> MetaResult<WriteResult> {
    match status_of(response.status, prefix)? {
        Status::Ok => {}
        other => {
            return Err(MetaError::Internal(format!(
                "sequenced put on {prefix}: the server answered {}",
                other.as_str_name()
            )));
        }
    }
    let key = response.key.as_deref().ok_or_else(|| {
        MetaError::Internal(format!("sequenced put on {prefix}: OK without the generated key"))
    })?;
    let extends_prefix = key.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('-') && rest.len() > 1);
    if !extends_prefix {
        return Err(MetaError::Internal(format!(
            "sequenced put on {prefix}: the generated key {key} does not extend the prefix"
        )));
    }
    write_result(key.to_owned(), response.version.as_ref())
}

/// The result of a `Delete`: whether the key existed (oxia.md §7.2: KEY_NOT_FOUND also means
/// "gone").
pub fn delete_outcome(key: &str, response: WriteResponse) -> MetaResult<bool> {
    let count = (response.puts.len(), response.deletes.len(), response.delete_ranges.len());
    let Some(delete) = response.deletes.first().filter(|_| count == (0, 1, 0)) else {
        return Err(MetaError::Internal(format!(
            "delete of {key}: the response holds {count:?} results, expected one delete"
        )));
    };
    match status_of(delete.status, key)? {
        Status::Ok => Ok(true),
        Status::KeyNotFound => Ok(false),
        other => {
            Err(MetaError::Internal(format!("delete of {key}: the server answered {}", other.as_str_name())))
        }
    }
}

/// The result of a conditional `Delete`: a record at another version (UNEXPECTED_VERSION_ID)
/// or none (KEY_NOT_FOUND) is a version mismatch.
pub fn delete_if_version_outcome(key: &str, expected: i64, response: WriteResponse) -> MetaResult<()> {
    let count = (response.puts.len(), response.deletes.len(), response.delete_ranges.len());
    let Some(delete) = response.deletes.first().filter(|_| count == (0, 1, 0)) else {
        return Err(MetaError::Internal(format!(
            "delete of {key}: the response holds {count:?} results, expected one delete"
        )));
    };
    match status_of(delete.status, key)? {
        Status::Ok => Ok(()),
        Status::KeyNotFound | Status::UnexpectedVersionId => {
            Err(MetaError::VersionMismatch { key: key.to_owned(), expected })
        }
        other => {
            Err(MetaError::Internal(format!("delete of {key}: the server answered {}", other.as_str_name())))
        }
    }
}

/// The result of a `DeleteRange` (always OK on the server).
pub fn delete_range_outcome(start: &str, end: &str, response: WriteResponse) -> MetaResult<()> {
    let count = (response.puts.len(), response.deletes.len(), response.delete_ranges.len());
    let Some(range) = response.delete_ranges.first().filter(|_| count == (0, 0, 1)) else {
        return Err(MetaError::Internal(format!(
            "delete-range [{start}, {end}): the response holds {count:?} results, expected one delete-range"
        )));
    };
    match status_of(range.status, start)? {
        Status::Ok => Ok(()),
        other => Err(MetaError::Internal(format!(
            "delete-range [{start}, {end}): the server answered {}",
            other.as_str_name()
        ))),
    }
}

/// A record from a `GetResponse`. `requested_key` is used when the server leaves `key` out
/// (EQUAL lookups); comparison lookups and scans must carry it.
pub fn record(requested_key: Option<&str>, response: GetResponse) -> MetaResult<Record> {
    let key = match (response.key, requested_key) {
        (Some(key), _) => key,
        (None, Some(requested)) => requested.to_owned(),
        (None, None) => return Err(MetaError::Internal("a record came without its key".to_owned())),
    };
    let version = response
        .version
        .ok_or_else(|| MetaError::Internal(format!("record {key} came without a version")))?;
    Ok(Record {
        value: response.value.unwrap_or_default(),
        version: version.version_id,
        created_ms: timestamp(version.created_timestamp, "created_timestamp", &key)?,
        modified_ms: timestamp(version.modified_timestamp, "modified_timestamp", &key)?,
        key,
    })
}

/// The result of a `Get` / comparison lookup: KEY_NOT_FOUND is "absent" (oxia.md §7.4).
pub fn get_outcome(requested_key: &str, is_equal: bool, response: GetResponse) -> MetaResult<Option<Record>> {
    match status_of(response.status, requested_key)? {
        Status::Ok => {
            let fallback = is_equal.then_some(requested_key);
            record(fallback, response).map(Some)
        }
        Status::KeyNotFound => Ok(None),
        other => Err(MetaError::Internal(format!(
            "get of {requested_key}: the server answered {}",
            other.as_str_name()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use lakestream_format::ErrorClass;

    use super::*;
    use crate::proto::oxia::{DeleteRangeResponse, DeleteResponse};

    fn version(id: i64) -> Version {
        Version { version_id: id, created_timestamp: 1_000, modified_timestamp: 2_000, ..Version::default() }
    }

    fn put_response(status: Status, key: Option<&str>) -> PutResponse {
        PutResponse { status: status as i32, version: Some(version(5)), key: key.map(str::to_owned) }
    }

    #[test]
    fn put_statuses_map_to_results() {
        let ok = put_outcome("/k", PutCondition::None, &put_response(Status::Ok, None)).expect("ok");
        assert_eq!((ok.key.as_str(), ok.version, ok.created_ms, ok.modified_ms), ("/k", 5, 1_000, 2_000));

        let conflict = put_response(Status::UnexpectedVersionId, None);
        assert_eq!(
            put_outcome("/k", PutCondition::IfAbsent, &conflict),
            Err(MetaError::KeyExists { key: "/k".into() })
        );
        assert_eq!(
            put_outcome("/k", PutCondition::IfVersion(3), &conflict),
            Err(MetaError::VersionMismatch { key: "/k".into(), expected: 3 })
        );
        let gone =
            put_outcome("/k", PutCondition::IfAbsent, &put_response(Status::SessionDoesNotExist, None));
        assert!(matches!(gone, Err(MetaError::SessionEnded(_))));
        let unknown = PutResponse { status: 9, ..put_response(Status::Ok, None) };
        assert_eq!(
            put_outcome("/k", PutCondition::None, &unknown).map_err(|e| e.class()),
            Err(ErrorClass::Internal)
        );
        let no_version = PutResponse { version: None, ..put_response(Status::Ok, None) };
        assert!(put_outcome("/k", PutCondition::None, &no_version).is_err());
    }

    #[test]
    fn sequenced_put_returns_the_generated_key() {
        let key = "00000000000000000007-00000000000000000003-00000000000000000008";
        let ok =
            sequenced_put_outcome("00000000000000000007", &put_response(Status::Ok, Some(key))).expect("ok");
        assert_eq!(ok.key, key);
        assert_eq!(ok.created_ms, 1_000);
    }

    #[test]
    fn sequenced_put_responses_that_break_the_protocol_are_internal() {
        for response in [
            put_response(Status::Ok, None),
            put_response(Status::Ok, Some("00000000000000000008-1")),
            put_response(Status::Ok, Some("00000000000000000007")),
            put_response(Status::Ok, Some("00000000000000000007-")),
            put_response(Status::UnexpectedVersionId, Some("00000000000000000007-1")),
        ] {
            let result = sequenced_put_outcome("00000000000000000007", &response);
            assert_eq!(result.map_err(|e| e.class()), Err(ErrorClass::Internal), "{response:?}");
        }
    }

    #[test]
    fn single_put_checks_the_response_shape() {
        let one = WriteResponse { puts: vec![put_response(Status::Ok, None)], ..WriteResponse::default() };
        assert!(single_put(one, "/k").is_ok());
        assert!(single_put(WriteResponse::default(), "/k").is_err());
        let two = WriteResponse {
            puts: vec![put_response(Status::Ok, None), put_response(Status::Ok, None)],
            ..WriteResponse::default()
        };
        assert!(single_put(two, "/k").is_err());
    }

    #[test]
    fn delete_found_and_not_found_both_mean_gone() {
        let with = |status: Status| WriteResponse {
            deletes: vec![DeleteResponse { status: status as i32 }],
            ..WriteResponse::default()
        };
        assert_eq!(delete_outcome("/k", with(Status::Ok)), Ok(true));
        assert_eq!(delete_outcome("/k", with(Status::KeyNotFound)), Ok(false));
        assert!(delete_outcome("/k", with(Status::UnexpectedVersionId)).is_err());
        assert!(delete_outcome("/k", WriteResponse::default()).is_err());
    }

    #[test]
    fn delete_range_ok_and_malformed() {
        let ok = WriteResponse {
            delete_ranges: vec![DeleteRangeResponse { status: Status::Ok as i32 }],
            ..WriteResponse::default()
        };
        assert_eq!(delete_range_outcome("a", "b", ok), Ok(()));
        assert!(delete_range_outcome("a", "b", WriteResponse::default()).is_err());
    }

    #[test]
    fn get_outcomes() {
        let found = GetResponse {
            status: Status::Ok as i32,
            version: Some(version(9)),
            value: Some(Bytes::from_static(b"x")),
            key: None,
            secondary_index_key: None,
        };
        let record = get_outcome("/k", true, found.clone()).expect("ok").expect("present");
        assert_eq!((record.key.as_str(), record.value.as_ref(), record.version), ("/k", &b"x"[..], 9));
        // A comparison lookup must say which key it found.
        assert!(get_outcome("/k", false, found.clone()).is_err());
        let higher = GetResponse { key: Some("/l".into()), ..found.clone() };
        assert_eq!(get_outcome("/k", false, higher).expect("ok").map(|r| r.key), Some("/l".into()));
        let missing = GetResponse { status: Status::KeyNotFound as i32, version: None, ..found };
        assert_eq!(get_outcome("/k", true, missing), Ok(None));
    }

    #[test]
    fn timestamps_beyond_i64_are_rejected() {
        let response = PutResponse {
            status: Status::Ok as i32,
            version: Some(Version { created_timestamp: u64::MAX, ..version(1) }),
            key: None,
        };
        let error = put_outcome("/k", PutCondition::None, &response).expect_err("out of range");
        assert!(error.to_string().contains("created_timestamp"), "{error}");
    }
}
