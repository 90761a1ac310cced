//! Messages of the Oxia client protocol, generated from `proto/oxia/*.proto` by the build
//! script (protox + tonic-prost-build; no `protoc`).

/// `io.streamnative.oxia.proto`: the Oxia client messages (oxia.md §3).
#[allow(missing_docs, clippy::all, clippy::pedantic, unreachable_pub)]
pub mod oxia {
    include!(concat!(env!("OUT_DIR"), "/io.streamnative.oxia.proto.rs"));
}

/// `google.rpc`: the status and `ErrorInfo` details of v0.17+ servers (oxia.md §12).
#[allow(missing_docs, clippy::all, clippy::pedantic, unreachable_pub)]
pub mod rpc_status {
    include!(concat!(env!("OUT_DIR"), "/google.rpc.rs"));
}

#[cfg(test)]
mod tests {
    //! Golden bytes written by hand from the field numbers and types of oxia.md §3, so a
    //! mistake in `proto/oxia/client.proto` cannot go unnoticed.

    use prost::Message;

    use super::oxia::*;

    #[test]
    fn sequenced_put_write_request_bytes() {
        let request = WriteRequest {
            shard: Some(0),
            puts: vec![PutRequest {
                key: "p".into(),
                value: bytes::Bytes::from_static(b"v"),
                partition_key: Some("7".into()),
                sequence_key_delta: vec![3, 8],
                ..PutRequest::default()
            }],
            ..WriteRequest::default()
        };
        let expected = [
            0x08, 0x00, // shard = 0: optional, so sent although zero
            0x12, 0x0d, // puts[0], 13 bytes
            0x0a, 0x01, b'p', // key (1)
            0x12, 0x01, b'v', // value (2)
            0x32, 0x01, b'7', // partition_key (6)
            0x3a, 0x02, 0x03, 0x08, // sequence_key_delta (7), packed
        ];
        assert_eq!(request.encode_to_vec(), expected);
    }

    #[test]
    fn conditional_ephemeral_put_bytes() {
        let put = PutRequest {
            key: "k".into(),
            expected_version_id: Some(-1),
            session_id: Some(5),
            client_identity: Some("c".into()),
            ..PutRequest::default()
        };
        let mut expected = vec![0x0a, 0x01, b'k', 0x18];
        expected.extend([0xff; 9]); // expected_version_id (3) = -1: ten-byte varint
        expected.push(0x01);
        expected.extend([0x20, 0x05, 0x2a, 0x01, b'c']); // session_id (4), client_identity (5)
        assert_eq!(put.encode_to_vec(), expected);
    }

    #[test]
    fn read_and_list_request_bytes() {
        let read = ReadRequest {
            shard: Some(2),
            gets: vec![GetRequest {
                key: "k".into(),
                include_value: true,
                comparison_type: KeyComparisonType::Higher as i32,
                secondary_index_name: None,
            }],
        };
        assert_eq!(read.encode_to_vec(), [0x08, 0x02, 0x12, 0x07, 0x0a, 0x01, b'k', 0x10, 0x01, 0x18, 0x04]);
        let list = ListRequest {
            shard: Some(1),
            start_inclusive: "a".into(),
            end_exclusive: "b".into(),
            ..Default::default()
        };
        assert_eq!(list.encode_to_vec(), [0x08, 0x01, 0x12, 0x01, b'a', 0x1a, 0x01, b'b']);
        let heartbeat = SessionHeartbeat { shard: 3, session_id: 9 };
        assert_eq!(heartbeat.encode_to_vec(), [0x08, 0x03, 0x10, 0x09]);
        let create =
            CreateSessionRequest { shard: 0, session_timeout_ms: 15_000, client_identity: "c".into() };
        assert_eq!(create.encode_to_vec(), [0x10, 0x98, 0x75, 0x1a, 0x01, b'c']);
    }

    #[test]
    fn shard_assignment_decodes_fixed32_inclusive_range() {
        let bytes = [
            0x08, 0x01, // shard = 1
            0x12, 0x03, b'a', b':', b'1', // leader
            0x1a, 0x05, 0x15, 0xff, 0xff, 0xff,
            0xff, // int32_hash_range { max = 0xFFFFFFFF } (min 0 omitted)
        ];
        let assignment = ShardAssignment::decode(&bytes[..]).expect("decodes");
        assert_eq!(assignment.shard, 1);
        assert_eq!(assignment.leader, "a:1");
        assert_eq!(
            assignment.shard_boundaries,
            Some(shard_assignment::ShardBoundaries::Int32HashRange(Int32HashRange {
                min_hash_inclusive: 0,
                max_hash_inclusive: u32::MAX
            }))
        );
    }

    #[test]
    fn put_response_decodes_fixed64_timestamps_and_generated_key() {
        let mut bytes = vec![0x12, 0x14, 0x08, 0x05, 0x19];
        bytes.extend(1_000u64.to_le_bytes()); // created_timestamp (3), fixed64
        bytes.push(0x21);
        bytes.extend(2_000u64.to_le_bytes()); // modified_timestamp (4), fixed64
        bytes.extend([0x1a, 0x03, b'p', b'-', b'1']); // key (3)
        let response = PutResponse::decode(bytes.as_slice()).expect("decodes");
        assert_eq!(response.status, Status::Ok as i32);
        assert_eq!(response.key.as_deref(), Some("p-1"));
        let version = response.version.expect("version");
        assert_eq!(
            (version.version_id, version.created_timestamp, version.modified_timestamp),
            (5, 1_000, 2_000)
        );
    }
}
