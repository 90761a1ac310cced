//! Production hardening of both listeners and of readiness: `/readyz` checks the metadata
//! store and both object stores and fails from the moment a drain starts; slow and idle
//! clients are cut off; the connection cap refuses with a clear error while the open
//! connections keep being served; HTTP/2 advertises its stream limit; TLS handshakes time out.

mod support;

use std::future::Future as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lakestream_objstore_s3::S3Config;
use lakestream_service::config::ObjectStoreConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");

/// Sends one HTTP/1.1 request on `io` and reads the response (`Content-Length` bodies only,
/// which is what these endpoints answer). Returns the status and the body.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(io: &mut S, path: &str) -> (u16, String) {
    let request = format!("GET {path} HTTP/1.1\r\nhost: lakestream\r\n\r\n");
    io.write_all(request.as_bytes()).await.unwrap();
    let mut buffer = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), io.read(&mut chunk)).await.unwrap().unwrap();
        assert!(n > 0, "the connection closed before a whole response: {}", String::from_utf8_lossy(&buffer));
        buffer.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buffer).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = text[..end].to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .unwrap_or(0);
            if buffer.len() >= end + 4 + length {
                let status = text[9..12].parse().unwrap();
                return (status, text[end + 4..end + 4 + length].to_string());
            }
        }
    }
}

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    exchange(&mut tcp, path).await
}

/// Reads until the server closes the connection; returns how long that took.
async fn time_until_closed(tcp: &mut TcpStream, limit: Duration) -> Duration {
    let started = Instant::now();
    let mut chunk = [0u8; 1024];
    loop {
        match tokio::time::timeout(limit, tcp.read(&mut chunk)).await {
            Err(_) => panic!("the server kept the connection open for {limit:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => {}
        }
    }
}

fn metric(text: &str, series: &str) -> f64 {
    support::series_value(text, series)
        .unwrap_or_else(|| panic!("{series} not in /metrics:\n{text}"))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn readyz_checks_the_metadata_store_and_both_object_stores() {
    let s = support::start_with(|_| {}).await;
    let (status, body) = get(s.at.http, "/readyz").await;
    assert_eq!((status, body.as_str()), (200, "ready"));
    let (_, metrics) = get(s.at.http, "/metrics").await;
    assert_eq!(metric(&metrics, "lakestream_ready"), 1.0);
    s.stop().await;

    // The compacted root on an S3 endpoint where nothing listens: the process starts (the
    // store is not contacted at start), and readiness names the store that does not answer.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let s = support::start_with(|c| {
        c.service.storage.compacted = ObjectStoreConfig::S3(Box::new(S3Config {
            bucket: "lakestream".into(),
            endpoint: Some(format!("http://127.0.0.1:{port}")),
            force_path_style: true,
            anonymous: true,
            max_attempts: 1,
            ..S3Config::default()
        }));
    })
    .await;
    let (status, body) = get(s.at.http, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("not_ready") && body.contains("storage.compacted"), "{body}");
    assert_eq!(get(s.at.http, "/healthz").await.0, 200, "liveness does not depend on the stores");
    let (_, metrics) = get(s.at.http, "/metrics").await;
    assert_eq!(metric(&metrics, "lakestream_ready"), 0.0);
    assert!(metric(&metrics, "lakestream_readiness_failures_total") >= 1.0);
    s.stop().await;
}

#[tokio::test]
async fn readyz_answers_503_from_the_moment_a_drain_starts_while_requests_are_still_served() {
    let s = support::start_with(|c| c.server.listener.drain_delay = Duration::from_secs(2)).await;
    let http = s.at.http;
    assert_eq!(get(http, "/readyz").await.0, 200);
    // A connection opened before the drain, to show it keeps being served during it.
    let mut kept = TcpStream::connect(http).await.unwrap();
    assert_eq!(exchange(&mut kept, "/healthz").await.0, 200);
    let stopping = tokio::spawn(s.stop());
    // The drain starts when the shutdown signal arrives: well within the drain delay.
    let started = Instant::now();
    let (status, body) = loop {
        let (status, body) = get(http, "/readyz").await;
        if status != 200 || started.elapsed() > Duration::from_secs(1) {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("draining"), "{body}");
    // Still serving during the drain delay: new connections and kept ones.
    assert_eq!(get(http, "/healthz").await.0, 200);
    assert_eq!(exchange(&mut kept, "/v1/namespaces").await.0, 200);
    drop(kept);
    tokio::time::timeout(Duration::from_secs(10), stopping).await.expect("stopped after the drain").unwrap();
    assert!(TcpStream::connect(http).await.is_err(), "the listener is closed after the drain");
}

#[tokio::test]
async fn a_slowloris_client_is_cut_off_and_other_clients_are_served_meanwhile() {
    let s = support::start_with(|c| {
        c.server.listener.header_read_timeout = Duration::from_millis(500);
        c.server.listener.idle_timeout = Duration::from_secs(30);
    })
    .await;
    let http = s.at.http;
    let mut slow = TcpStream::connect(http).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: lakestream\r\n").await.unwrap();
    let trickle = tokio::spawn(async move {
        // One header byte every 50 ms, never finishing the head.
        let started = Instant::now();
        for byte in b"x-slow: ".iter().cycle() {
            if slow.write_all(&[*byte]).await.is_err() || started.elapsed() > Duration::from_secs(10) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        (started.elapsed(), time_until_closed(&mut slow, Duration::from_secs(10)).await)
    });
    // Meanwhile other clients are served.
    for _ in 0..5 {
        assert_eq!(get(http, "/healthz").await.0, 200);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (trickled, _) = trickle.await.unwrap();
    assert!(
        trickled < Duration::from_secs(3),
        "the server accepted header bytes for {trickled:?} (header_read_timeout 500 ms)"
    );
    s.stop().await;
}

#[tokio::test]
async fn connections_without_a_request_in_flight_are_closed_after_the_idle_timeout() {
    let s = support::start_with(|c| c.server.listener.idle_timeout = Duration::from_millis(400)).await;
    // Over either listener, a connection that never sends a byte (here the protocol is not
    // even known yet) and one idle after a request are both closed.
    for addr in [s.at.http, s.at.grpc.unwrap()] {
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let took = time_until_closed(&mut silent, Duration::from_secs(5)).await;
        assert!(took >= Duration::from_millis(300), "closed after {took:?}, before the idle timeout");
    }
    let mut used = TcpStream::connect(s.at.http).await.unwrap();
    assert_eq!(exchange(&mut used, "/healthz").await.0, 200);
    time_until_closed(&mut used, Duration::from_secs(5)).await;
    // A request in flight is not idle: a fetch waiting 1 s (longer than the idle timeout).
    let mut waiting = TcpStream::connect(s.at.http).await.unwrap();
    let create = "{\"name\":\"idle\",\"partitions\":1}";
    let request = format!(
        "POST /v1/namespaces/default/streams HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{create}",
        create.len()
    );
    waiting.write_all(request.as_bytes()).await.unwrap();
    let mut chunk = [0u8; 4096];
    let n = waiting.read(&mut chunk).await.unwrap();
    assert!(String::from_utf8_lossy(&chunk[..n]).starts_with("HTTP/1.1 201"));
    let started = Instant::now();
    let (status, body) = exchange(
        &mut waiting,
        "/v1/namespaces/default/streams/idle/partitions/0/entries?offset=0&max_wait_ms=1000",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(started.elapsed() >= Duration::from_millis(900), "the fetch waited its whole max_wait");
    let (_, metrics) = get(s.at.http, "/metrics").await;
    assert!(metric(&metrics, "lakestream_connections_idle_closed_total{listener=\"http\"}") >= 2.0);
    assert!(metric(&metrics, "lakestream_connections_idle_closed_total{listener=\"grpc\"}") >= 1.0);
    s.stop().await;
}

#[tokio::test]
async fn the_connection_cap_refuses_with_a_clear_error_and_open_connections_keep_being_served() {
    let s = support::start_with(|c| c.server.listener.max_connections = 2).await;
    let http = s.at.http;
    let mut first = TcpStream::connect(http).await.unwrap();
    let mut second = TcpStream::connect(http).await.unwrap();
    assert_eq!(exchange(&mut first, "/healthz").await.0, 200);
    assert_eq!(exchange(&mut second, "/healthz").await.0, 200);

    let mut third = TcpStream::connect(http).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), third.read_to_string(&mut answer)).await.unwrap().unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("retry-after: 1"), "{answer}");
    assert!(
        answer.contains("too_many_connections") && answer.contains("listener.max_connections"),
        "{answer}"
    );

    // The open connections are still served.
    assert_eq!(exchange(&mut first, "/healthz").await.0, 200);
    let (status, metrics) = exchange(&mut second, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(metric(&metrics, "lakestream_connections_refused_total{listener=\"http\"}"), 1.0);
    assert_eq!(metric(&metrics, "lakestream_connections_open{listener=\"http\"}"), 2.0);

    // A closed connection frees its place.
    drop(first);
    let started = Instant::now();
    loop {
        let mut next = TcpStream::connect(http).await.unwrap();
        let mut head = [0u8; 12];
        next.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        next.read_exact(&mut head).await.unwrap();
        if &head[9..12] == b"200" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no place freed: {}",
            String::from_utf8_lossy(&head)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(second);
    s.stop().await;
}

#[tokio::test]
async fn http2_advertises_the_configured_stream_limit() {
    let s = support::start_with(|c| c.server.listener.http2_max_concurrent_streams = 7).await;
    for addr in [s.at.grpc.unwrap(), s.at.http] {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (_send, mut connection) = h2::client::handshake(tcp).await.unwrap();
        // The server's SETTINGS arrive once the connection is driven.
        let limit = tokio::time::timeout(
            Duration::from_secs(5),
            std::future::poll_fn(|cx| {
                let _ = std::pin::Pin::new(&mut connection).poll(cx);
                match connection.max_concurrent_send_streams() {
                    7 => std::task::Poll::Ready(7),
                    _ => {
                        cx.waker().wake_by_ref();
                        std::task::Poll::Pending
                    }
                }
            }),
        )
        .await
        .unwrap_or_else(|_| panic!("{addr}: SETTINGS_MAX_CONCURRENT_STREAMS 7 never arrived"));
        assert_eq!(limit, 7);
    }
    s.stop().await;
}

#[tokio::test]
async fn a_tls_handshake_that_does_not_finish_is_cut_off() {
    let s = support::start_with(|c| {
        c.server.tls.cert_file = Some(format!("{FIXTURES}/cert.pem").into());
        c.server.tls.key_file = Some(format!("{FIXTURES}/key.pem").into());
        c.server.listener.tls_handshake_timeout = Duration::from_millis(300);
        c.server.listener.idle_timeout = Duration::from_secs(30);
    })
    .await;
    let mut stalled = TcpStream::connect(s.at.http).await.unwrap();
    let took = time_until_closed(&mut stalled, Duration::from_secs(5)).await;
    assert!(took < Duration::from_secs(3), "closed after {took:?}");
    s.stop().await;
}
