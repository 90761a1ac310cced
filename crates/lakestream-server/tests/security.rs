//! TLS on both APIs and per-client rate limits, over a real stack on loopback ports.

use std::sync::Arc;

use lakestream_server::ServerConfig;
use lakestream_server::grpc::pb;
use lakestream_server::grpc::pb::lakestream_client::LakestreamClient;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");

mod support;

use support::start_with;

fn with_tls(config: &mut ServerConfig) {
    config.tls.cert_file = Some(format!("{FIXTURES}/cert.pem").into());
    config.tls.key_file = Some(format!("{FIXTURES}/key.pem").into());
}

/// One HTTP/1.1 exchange on `io`: status, headers (lower-cased names) and body.
async fn exchange(
    mut io: impl AsyncRead + AsyncWrite + Unpin,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let content_type = if body.starts_with(b"{") { "application/json" } else { "application/octet-stream" };
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
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
    let mut config = ServerConfig::dev(dir.path(), "127.0.0.1:0".parse().unwrap());
    config.tls.cert_file = Some(format!("{FIXTURES}/cert.pem").into());
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("tls.key_file"), "{err}");
    config.tls.key_file = Some(dir.path().join("missing.pem"));
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("tls.key_file") && err.contains("missing.pem"), "{err}");
    // A key that is not a key.
    config.tls.key_file = Some(format!("{FIXTURES}/cert.pem").into());
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("tls.key_file"), "{err}");
}

#[tokio::test]
async fn a_client_over_its_rate_limit_gets_429_and_nothing_is_written() {
    let s = start_with(|c| {
        // One request per minute after a burst of three: the test never waits for a refill.
        c.limits.requests_per_second = 1.0 / 60.0;
        c.limits.burst = Some(3);
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
