//! The service layer decides permissions, whatever front end calls it: every operation checks
//! the one it needs against the caller [`Api::admit`] resolved, and a refused operation
//! changes nothing. Runs on the embedded stores (the permission rule is the service's alone).

use std::collections::BTreeMap;

use bytes::Bytes;
use lakestream_service::api::{PartitionRef, ProduceInput};
use lakestream_service::auth::{Caller, Operation, Permission};
use lakestream_service::{ErrorKind, Service, ServiceConfig};

const READ: &str = "Bearer read-token-0123456789";
const WRITE: &str = "Bearer write-token-0123456789";
const ADMIN: &str = "Bearer admin-token-0123456789";

async fn secured_service(dir: &std::path::Path) -> Service {
    let mut toml = ServiceConfig::dev_toml(dir);
    toml.push_str(
        r#"
[[auth.tokens]]
name = "reader"
token = "read-token-0123456789"
namespaces = { default = "read" }
[[auth.tokens]]
name = "producer"
token = "write-token-0123456789"
namespaces = { default = "write" }
[[auth.tokens]]
name = "ops"
token = "admin-token-0123456789"
namespaces = { "*" = "admin" }
"#,
    );
    let config: ServiceConfig = toml::from_str(&toml).expect("the secured dev profile parses");
    Service::start(&config).await.expect("the service starts on the embedded stores")
}

fn target(stream: &str) -> PartitionRef<'_> {
    PartitionRef { namespace: "default", stream, partition: 0 }
}

fn one_entry() -> ProduceInput {
    ProduceInput::Entries(vec![(Bytes::from_static(b"payload"), 1)])
}

#[test]
fn each_operation_needs_the_permission_of_its_kind() {
    use Operation::*;
    for op in [
        ListNamespaces,
        ListStreams,
        GetStream,
        Fetch,
        Offsets,
        ConsumeEvents,
        ListGroups,
        GroupOffsets,
        CommitOffset,
    ] {
        assert_eq!(op.permission(), Permission::Read, "{op:?}");
    }
    for op in [Produce, Trim, IngestEvents, NewProducerId] {
        assert_eq!(op.permission(), Permission::Write, "{op:?}");
    }
    for op in [CreateNamespace, DeleteNamespace, CreateStream, UpdateStream, DropStream, AddPartitions] {
        assert_eq!(op.permission(), Permission::Admin, "{op:?}");
    }
}

#[tokio::test]
async fn operations_refuse_callers_without_their_permission_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let service = secured_service(dir.path()).await;
    let api = service.api();
    let reader = api.admit(Some(READ), None).unwrap();
    let producer = api.admit(Some(WRITE), None).unwrap();
    let ops = api.admit(Some(ADMIN), None).unwrap();

    // Admin operations: refused to a reader and a producer, before anything is created.
    for caller in [&reader, &producer] {
        let refused = api.create_stream(caller, "default", "orders", Some(1), BTreeMap::new()).await;
        assert_eq!(refused.unwrap_err().kind(), ErrorKind::PermissionDenied, "{caller:?}");
    }
    let listed = api.list_streams(&ops, "default", None, None).await.unwrap();
    assert!(listed.items.iter().all(|s| s.name != "orders"), "a refused create created nothing");
    api.create_stream(&ops, "default", "orders", Some(1), BTreeMap::new()).await.unwrap();

    // Writes: refused to a reader, with nothing appended; allowed to a producer.
    let refused = api.produce(&reader, target("orders"), one_entry()).await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::PermissionDenied);
    assert_eq!(api.offsets(&reader, target("orders")).await.unwrap().next_offset, 0);
    api.produce(&producer, target("orders"), one_entry()).await.unwrap();
    assert_eq!(api.offsets(&reader, target("orders")).await.unwrap().next_offset, 1);
    let refused = api.trim(&reader, target("orders"), 0).await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::PermissionDenied);
    assert_eq!(api.offsets(&reader, target("orders")).await.unwrap().first_offset, 0);

    // Namespaces outside a token's grants are refused even for reading, as is the list of
    // every namespace (a grant on `*`).
    let refused = api.list_streams(&producer, "other", None, None).await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::PermissionDenied);
    let refused = api.list_namespaces(&reader, None, None).await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::PermissionDenied);
    let refused = api.drop_stream(&producer, "default", "orders").await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::PermissionDenied);
    api.get_stream(&reader, "default", "orders").await.expect("the refused drop dropped nothing");

    // No token, or a wrong one: unauthenticated; an anonymous caller is refused everything.
    assert_eq!(api.admit(None, None).unwrap_err().kind(), ErrorKind::Unauthenticated);
    let wrong = api.admit(Some("Bearer not-a-token-at-all-0000"), None);
    assert_eq!(wrong.unwrap_err().kind(), ErrorKind::Unauthenticated);
    let refused = api.get_stream(&Caller::anonymous(), "default", "orders").await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::Unauthenticated);
    service.shutdown().await;
}
