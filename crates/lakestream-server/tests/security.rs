//! TLS on both APIs, per-client rate limits and per-namespace tokens on names that need
//! escaping, over a real stack on loopback ports.

use std::sync::Arc;

use lakestream_server::grpc::pb;
use lakestream_server::grpc::pb::lakestream_client::LakestreamClient;
use support::TestConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");

mod support;

use support::start_with;

fn with_tls(config: &mut TestConfig) {
    config.server.tls.cert_file = Some(format!("{FIXTURES}/cert.pem").into());
    config.server.tls.key_file = Some(format!("{FIXTURES}/key.pem").into());
}

/// One HTTP/1.1 exchange on `io`: status, headers (lower-cased names) and body.
async fn exchange(
    io: impl AsyncRead + AsyncWrite + Unpin,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    exchange_as(io, method, path, None, body, None).await
}

/// [`exchange`] with a content type (default: JSON for a body starting with `{`, else
/// octet-stream) and a bearer token.
async fn exchange_as(
    mut io: impl AsyncRead + AsyncWrite + Unpin,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
    token: Option<&str>,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let default = if body.starts_with(b"{") { "application/json" } else { "application/octet-stream" };
    let content_type = content_type.unwrap_or(default);
    let auth = token.map(|t| format!("authorization: Bearer {t}\r\n")).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n{auth}connection: close\r\n\r\n",
        body.len()
    );
    io.write_all(head.as_bytes()).await.unwrap();
    io.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    // A TLS peer may close without close_notify once the response is complete.
    let _ = io.read_to_end(&mut raw).await;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete response head");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, raw[split + 4..].to_vec())
}

fn tls_connector() -> tokio_rustls::TlsConnector {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(format!("{FIXTURES}/ca.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

async fn https(addr: std::net::SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tls_connector().connect(name, tcp).await.unwrap();
    let (status, _, body) = exchange(tls, method, path, body).await;
    (status, body)
}

async fn plain(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, Vec<(String, String)>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (status, headers, _) = exchange(tcp, method, path, body).await;
    (status, headers)
}

#[tokio::test]
async fn both_apis_serve_tls_with_the_configured_certificate() {
    let s = start_with(with_tls).await;
    // HTTP over TLS: create a stream, produce, fetch.
    let (status, body) = https(s.at.http, "GET", "/healthz", b"").await;
    assert_eq!((status, body.as_slice()), (200, b"ok".as_slice()));
    let create = br#"{"name":"secure"}"#;
    let tcp = tokio::net::TcpStream::connect(s.at.http).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tls_connector().connect(name, tcp).await.unwrap();
    let (status, _, _) = exchange(tls, "POST", "/v1/namespaces/default/streams", create).await;
    assert_eq!(status, 201);
    let (status, _) =
        https(s.at.http, "POST", "/v1/namespaces/default/streams/secure/partitions/0/entries", b"sealed")
            .await;
    assert_eq!(status, 200);
    // A plain-text request to the TLS port gets no HTTP answer.
    let mut tcp = tokio::net::TcpStream::connect(s.at.http).await.unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut raw = Vec::new();
    let _ = tcp.read_to_end(&mut raw).await;
    assert!(!raw.starts_with(b"HTTP/1.1 200"), "plain text must not be served on the TLS port");

    // gRPC over TLS (HTTP/2 chosen by ALPN): the same entry comes back.
    let pem = std::fs::read(format!("{FIXTURES}/ca.pem")).unwrap();
    let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)).domain_name("localhost");
    let channel = Channel::from_shared(format!("https://{}", s.at.grpc.unwrap()))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = LakestreamClient::new(channel);
    let fetched = client
        .fetch(pb::FetchRequest {
            namespace: "default".into(),
            stream: "secure".into(),
            partition: 0,
            offset: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fetched.entries.len(), 1);
    assert_eq!(fetched.entries[0].payload.as_ref(), b"sealed");
    s.stop().await;
}

#[tokio::test]
async fn bad_tls_settings_are_refused_at_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = TestConfig::dev(dir.path());
    config.server.tls.cert_file = Some(format!("{FIXTURES}/cert.pem").into());
    let err = config.server.validate().unwrap_err().to_string();
    assert!(err.contains("tls.key_file"), "{err}");
    config.server.tls.key_file = Some(dir.path().join("missing.pem"));
    let err = config.server.validate().unwrap_err().to_string();
    assert!(err.contains("tls.key_file") && err.contains("missing.pem"), "{err}");
    // A key that is not a key.
    config.server.tls.key_file = Some(format!("{FIXTURES}/cert.pem").into());
    let err = config.server.validate().unwrap_err().to_string();
    assert!(err.contains("tls.key_file"), "{err}");
}

#[tokio::test]
async fn a_client_over_its_rate_limit_gets_429_and_nothing_is_written() {
    let s = start_with(|c| {
        // One request per minute after a burst of three: the test never waits for a refill.
        c.service.limits.requests_per_second = 1.0 / 60.0;
        c.service.limits.burst = Some(3);
    })
    .await;
    let produce = "/v1/namespaces/default/streams/limited/partitions/0/entries";
    let (status, _) =
        plain(s.at.http, "POST", "/v1/namespaces/default/streams", br#"{"name":"limited"}"#).await;
    assert_eq!(status, 201);
    let (status, _) = plain(s.at.http, "POST", produce, b"first").await;
    assert_eq!(status, 200);
    let (status, _) = plain(s.at.http, "GET", "/v1/namespaces/default/streams/limited", b"").await;
    assert_eq!(status, 200);
    // The fourth request is over the limit: 429 with Retry-After, and the entry is not written.
    let (status, headers) = plain(s.at.http, "POST", produce, b"refused").await;
    assert_eq!(status, 429);
    assert!(headers.iter().any(|(k, _)| k == "retry-after"), "{headers:?}");
    // Health and metrics are not limited; the refusal is counted.
    let (status, _) = plain(s.at.http, "GET", "/healthz", b"").await;
    assert_eq!(status, 200);
    let tcp = tokio::net::TcpStream::connect(s.at.http).await.unwrap();
    let (_, _, metrics) = exchange(tcp, "GET", "/metrics", b"").await;
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(metrics.contains("lakestream_rate_limited_total 1"), "{metrics}");
    // gRPC shares the client's budget: RESOURCE_EXHAUSTED.
    let mut client = LakestreamClient::connect(format!("http://{}", s.at.grpc.unwrap())).await.unwrap();
    let err = client
        .get_offsets(pb::GetOffsetsRequest {
            namespace: "default".into(),
            stream: "limited".into(),
            partition: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err}");
    // Another client (another loopback source address) has its own budget, and sees that
    // only the first entry was written.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let tcp = socket.connect(s.at.http).await.unwrap();
    let (status, _, body) =
        exchange(tcp, "GET", "/v1/namespaces/default/streams/limited/partitions/0/offsets", b"").await;
    assert_eq!(status, 200);
    let offsets: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(offsets["next_offset"], 1, "{offsets}");
    s.stop().await;
}

/// Percent-encodes every byte outside RFC 3986's unreserved set, as a client must for a path
/// segment.
fn segment(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A granted namespace whose name, read as a still-encoded path segment, decodes to another
/// namespace (`pct%41` → `pctA`): the check must see the name the handler uses.
const GRANTED_PCT: &str = "pct%41";
/// The namespace `GRANTED_PCT` decodes to, which the token does not reach.
const VICTIM: &str = "pctA";
/// A granted namespace and a stream with a space, `"`, `\`, `%` and non-ASCII: every client
/// must escape them in a path.
const GRANTED_ODD: &str = "team a \"q\" \\ é %";
const STREAM: &str = "s \"x\" \\ ü %2F";
const TEAM_TOKEN: &str = "team-token-0123456789";
const OPS_TOKEN: &str = "ops-token-0123456789";
const VICTIM_SECRET: &[u8] = b"victim-secret-payload";

/// Tokens: `ops` (admin everywhere) and `team` (write on `GRANTED_PCT` and `GRANTED_ODD` only).
fn with_namespace_tokens(config: &mut TestConfig) {
    use lakestream_service::auth::{AuthConfig, Permission, TokenConfig};
    let token = |name: &str, secret: &str, grants: &[(&str, Permission)]| TokenConfig {
        name: name.into(),
        token: Some(secret.into()),
        token_env: None,
        namespaces: grants.iter().map(|(ns, p)| ((*ns).to_owned(), *p)).collect(),
    };
    config.service.auth = AuthConfig {
        tokens: vec![
            token("ops", OPS_TOKEN, &[("*", Permission::Admin)]),
            token("team", TEAM_TOKEN, &[(GRANTED_PCT, Permission::Write), (GRANTED_ODD, Permission::Write)]),
        ],
    };
}

/// As `ops`: creates the three namespaces with a stream `STREAM` each, and writes
/// `VICTIM_SECRET` into the victim's.
async fn set_up_namespaces(addr: std::net::SocketAddr) {
    for ns in [GRANTED_PCT, VICTIM, GRANTED_ODD] {
        let body = serde_json::json!({ "name": ns }).to_string();
        let (status, _, answer) = http_as(addr, "POST", "/v1/namespaces", body.as_bytes(), OPS_TOKEN).await;
        assert_eq!(status, 201, "create namespace {ns:?}: {}", String::from_utf8_lossy(&answer));
        let body = serde_json::json!({ "name": STREAM }).to_string();
        let path = format!("/v1/namespaces/{}/streams", segment(ns));
        let (status, _, answer) = http_as(addr, "POST", &path, body.as_bytes(), OPS_TOKEN).await;
        assert_eq!(status, 201, "create {ns:?}/{STREAM:?}: {}", String::from_utf8_lossy(&answer));
    }
    let (status, _, _) = http_as(addr, "POST", &entries(&segment(VICTIM)), VICTIM_SECRET, OPS_TOKEN).await;
    assert_eq!(status, 200);
}

async fn http_as(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    token: &str,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    exchange_as(tcp, method, path, None, body, Some(token)).await
}

/// The entries path of `STREAM`'s partition 0 in the namespace whose path segment is `ns_segment`.
fn entries(ns_segment: &str) -> String {
    format!("/v1/namespaces/{ns_segment}/streams/{}/partitions/0/entries", segment(STREAM))
}

#[tokio::test]
async fn http_tokens_are_checked_against_the_decoded_namespace_and_refusals_leak_nothing() {
    let s = start_with(with_namespace_tokens).await;
    let addr = s.at.http;
    set_up_namespaces(addr).await;
    let secret_b64 = "dmljdGltLXNlY3JldC1wYXlsb2Fk"; // VICTIM_SECRET in Base64
    assert!(
        String::from_utf8_lossy(&http_as(addr, "GET", &entries(VICTIM), b"", OPS_TOKEN).await.2)
            .contains(secret_b64)
    );

    // The granted names, escaped as they must be, work for every route kind.
    for ns in [GRANTED_PCT, GRANTED_ODD] {
        let produce = entries(&segment(ns));
        let (status, _, body) = http_as(addr, "POST", &produce, ns.as_bytes(), TEAM_TOKEN).await;
        assert_eq!(status, 200, "produce to {ns:?}: {}", String::from_utf8_lossy(&body));
        let (status, _, body) = http_as(addr, "GET", &produce, b"", TEAM_TOKEN).await;
        assert_eq!(status, 200, "fetch from {ns:?}: {}", String::from_utf8_lossy(&body));
        let fetched: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(fetched["entries"].as_array().map(Vec::len), Some(1), "{fetched}");
        let stream = format!("/v1/namespaces/{}/streams/{}", segment(ns), segment(STREAM));
        let (status, _, body) = http_as(addr, "GET", &stream, b"", TEAM_TOKEN).await;
        assert_eq!(status, 200, "describe {ns:?}: {}", String::from_utf8_lossy(&body));
        let described: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!((described["namespace"].as_str(), described["name"].as_str()), (Some(ns), Some(STREAM)));
        let event = serde_json::json!({"specversion": "1.0", "id": "1", "source": "/t", "type": "t"});
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (status, _, body) = exchange_as(
            tcp,
            "POST",
            &format!("{stream}/events?partition=0"),
            Some("application/cloudevents-batch+json"),
            format!("[{event}]").as_bytes(),
            Some(TEAM_TOKEN),
        )
        .await;
        assert_eq!(status, 200, "events to {ns:?}: {}", String::from_utf8_lossy(&body));
        let (status, _, body) =
            http_as(addr, "GET", &format!("{stream}/partitions/0/events"), b"", TEAM_TOKEN).await;
        assert_eq!(status, 200, "consume events from {ns:?}: {}", String::from_utf8_lossy(&body));
    }

    // `pct%41` written as is names `pctA` to the router: refused, on every route kind, with
    // nothing of the victim's in the answer.
    let victim_paths = [
        ("POST", entries("pct%41")),
        ("GET", entries("pct%41")),
        ("GET", format!("/v1/namespaces/pct%41/streams/{}", segment(STREAM))),
        ("GET", "/v1/namespaces/pct%41/streams".to_owned()),
        ("GET", format!("/v1/namespaces/pct%41/streams/{}/partitions/0/offsets", segment(STREAM))),
        ("POST", format!("/v1/namespaces/pct%41/streams/{}/partitions/0/trim", segment(STREAM))),
        ("GET", format!("/v1/namespaces/pct%41/streams/{}/partitions/0/events", segment(STREAM))),
        ("POST", format!("/v1/namespaces/pct%41/streams/{}/events", segment(STREAM))),
        ("GET", entries("%70ct%41")),
    ];
    for (method, path) in &victim_paths {
        let body: &[u8] = if path.ends_with("/trim") { br#"{"through":0}"# } else { b"intruder" };
        let (status, _, answer) = http_as(addr, method, path, body, TEAM_TOKEN).await;
        let text = String::from_utf8_lossy(&answer);
        assert_eq!(status, 403, "{method} {path}: {text}");
        assert!(!text.contains(secret_b64) && !text.contains("victim-secret"), "{method} {path}: {text}");
        let error: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(error["error"]["code"], "permission_denied", "{method} {path}: {text}");
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("namespace \"pctA\""), "names the namespace reached: {message}");
    }
    // A segment that does not decode to UTF-8 names no namespace: refused before any handler.
    let (status, _, _) = http_as(addr, "GET", "/v1/namespaces/%FF/streams", b"", TEAM_TOKEN).await;
    assert_eq!(status, 400);

    // The victim's partition holds only what ops wrote, untrimmed.
    let offsets = format!("/v1/namespaces/{VICTIM}/streams/{}/partitions/0/offsets", segment(STREAM));
    let (status, _, body) = http_as(addr, "GET", &offsets, b"", OPS_TOKEN).await;
    assert_eq!(status, 200);
    let offsets: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (offsets["next_offset"].as_u64(), offsets["trim_marker"].as_u64()),
        (Some(1), Some(0)),
        "{offsets}"
    );
    s.stop().await;
}

fn with_token<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    request
}

#[tokio::test]
async fn grpc_tokens_are_checked_against_the_namespace_field_with_any_characters() {
    let s = start_with(with_namespace_tokens).await;
    set_up_namespaces(s.at.http).await;
    let mut client = LakestreamClient::connect(format!("http://{}", s.at.grpc.unwrap())).await.unwrap();
    let produce = |ns: &str| pb::ProduceRequest {
        namespace: ns.into(),
        stream: STREAM.into(),
        partition: 0,
        entries: vec![pb::ProduceEntry { payload: b"grpc".to_vec().into(), record_count: None }],
        kafka_batches: false,
        ..Default::default()
    };
    let fetch = |ns: &str| pb::FetchRequest {
        namespace: ns.into(),
        stream: STREAM.into(),
        partition: 0,
        offset: 0,
        max_bytes: None,
        max_wait_ms: 0,
    };
    // gRPC carries names unescaped: the granted names work as written, `%` and all.
    for ns in [GRANTED_PCT, GRANTED_ODD] {
        client
            .produce(with_token(produce(ns), TEAM_TOKEN))
            .await
            .unwrap_or_else(|e| panic!("produce to {ns:?}: {e}"));
        let fetched = client.fetch(with_token(fetch(ns), TEAM_TOKEN)).await.unwrap().into_inner();
        assert_eq!(fetched.entries.len(), 1, "{ns:?}");
        assert_eq!(fetched.entries[0].payload.as_ref(), b"grpc");
    }
    // The other namespace is refused, leaking nothing.
    let err = client.produce(with_token(produce(VICTIM), TEAM_TOKEN)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
    let err = client.fetch(with_token(fetch(VICTIM), TEAM_TOKEN)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
    assert!(!err.message().contains("victim-secret"), "{err}");
    let victim = client.fetch(with_token(fetch(VICTIM), OPS_TOKEN)).await.unwrap().into_inner();
    assert_eq!(victim.entries.iter().map(|e| e.payload.as_ref()).collect::<Vec<_>>(), [VICTIM_SECRET]);
    s.stop().await;
}
