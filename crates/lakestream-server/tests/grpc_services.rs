//! The standard gRPC services next to the Lakestream API, over TCP: health
//! (`grpc.health.v1`) and server reflection (`grpc.reflection.v1`), as grpc_health_probe and
//! grpcurl use them.

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

mod support;

#[tokio::test]
async fn health_and_reflection_are_served() {
    let s = support::start_with(|_| {}).await;
    let url = format!("http://{}", s.at.grpc.expect("gRPC is served"));

    let channel = tonic::transport::Endpoint::from_shared(url).unwrap().connect().await.unwrap();
    let mut health = HealthClient::new(channel.clone());
    for service in ["", "lakestream.v1.Lakestream"] {
        let answer = health.check(HealthCheckRequest { service: service.into() }).await.unwrap().into_inner();
        assert_eq!(answer.status, ServingStatus::Serving as i32, "{service:?}");
    }
    let unknown = health.check(HealthCheckRequest { service: "no.such.Service".into() }).await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);

    let mut reflection = ServerReflectionClient::new(channel);
    let ask = |request: MessageRequest| {
        futures::stream::iter([ServerReflectionRequest {
            host: String::new(),
            message_request: Some(request),
        }])
    };
    let mut answers = reflection
        .server_reflection_info(ask(MessageRequest::ListServices(String::new())))
        .await
        .unwrap()
        .into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) =
        answers.message().await.unwrap().unwrap().message_response
    else {
        panic!("not a service list")
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(names.contains(&"lakestream.v1.Lakestream".to_string()), "{names:?}");
    let mut answers = reflection
        .server_reflection_info(ask(MessageRequest::FileContainingSymbol("lakestream.v1.Lakestream".into())))
        .await
        .unwrap()
        .into_inner();
    match answers.message().await.unwrap().unwrap().message_response {
        Some(MessageResponse::FileDescriptorResponse(files)) => {
            assert!(!files.file_descriptor_proto.is_empty())
        }
        other => panic!("{other:?}"),
    }
    s.stop().await;
}
