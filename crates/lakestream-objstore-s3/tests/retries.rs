//! Retries, timeouts and unknown outcomes, against a scripted loopback HTTP server that
//! answers each request as the test says (throttle, fail, never answer, succeed). These need
//! no S3 server.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, future};
use bytes::Bytes;
use lakestream_format::ErrorClass;
use lakestream_objstore::{ObjectPath, ObjectStore, ObjectStoreError};
use lakestream_objstore_s3::{ConditionalPut, S3Config, S3Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the scripted server does with one request.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// 503 SlowDown.
    SlowDown,
    /// 500 InternalError.
    InternalError,
    /// 412 PreconditionFailed.
    PreconditionFailed,
    /// 404 NoSuchBucket.
    NoSuchBucket,
    /// 200 with an empty body.
    Ok,
    /// Read the request, never answer.
    Hang,
}

struct ScriptedServer {
    endpoint: String,
    requests: Arc<AtomicUsize>,
}

/// Serves `script[i]` to the i-th request, and the last entry to every later one.
async fn scripted_server(script: Vec<Answer>) -> ScriptedServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else { return };
            tokio::spawn(serve_connection(socket, script.clone(), counter.clone()));
        }
    });
    ScriptedServer { endpoint, requests }
}

async fn serve_connection(mut socket: TcpStream, script: Vec<Answer>, counter: Arc<AtomicUsize>) {
    let mut buffer = Vec::new();
    loop {
        // Read one request: headers, then Content-Length bytes of body.
        let header_end = loop {
            if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            let mut chunk = [0u8; 8192];
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buffer[..header_end]).to_lowercase();
        let body_len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buffer.len() < header_end + body_len {
            let mut chunk = [0u8; 8192];
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        buffer.drain(..header_end + body_len);
        let index = counter.fetch_add(1, Ordering::SeqCst);
        let answer = script[index.min(script.len() - 1)];
        let response = match answer {
            Answer::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
            Answer::Ok => "HTTP/1.1 200 OK\r\netag: \"0\"\r\ncontent-length: 0\r\n\r\n".to_owned(),
            Answer::SlowDown => error_response(503, "Slow Down", "SlowDown"),
            Answer::InternalError => error_response(500, "Internal Server Error", "InternalError"),
            Answer::PreconditionFailed => error_response(412, "Precondition Failed", "PreconditionFailed"),
            Answer::NoSuchBucket => error_response(404, "Not Found", "NoSuchBucket"),
        };
        if socket.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn error_response(status: u16, reason: &str, code: &str) -> String {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>scripted</Message></Error>"
    );
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/xml\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn store(server: &ScriptedServer, max_attempts: u32) -> S3Store {
    S3Store::new(S3Config {
        bucket: "scripted".into(),
        endpoint: Some(server.endpoint.clone()),
        access_key_id: Some("key".into()),
        secret_access_key: Some("secret".into()),
        force_path_style: true,
        conditional_put: ConditionalPut::Atomic,
        max_attempts,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(10),
        retry_seed: Some(1),
        attempt_timeout: Duration::from_millis(500),
        ..S3Config::default()
    })
    .unwrap()
}

fn path() -> ObjectPath {
    ObjectPath::new("wal/1.wal").unwrap()
}

#[tokio::test]
async fn retries_slow_down_and_internal_errors_then_succeeds() {
    let server =
        scripted_server(vec![Answer::SlowDown, Answer::InternalError, Answer::SlowDown, Answer::Ok]).await;
    store(&server, 6).put(&path(), Bytes::from_static(b"x")).await.unwrap();
    assert_eq!(server.requests.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn gives_up_after_max_attempts_with_a_retryable_error() {
    let server = scripted_server(vec![Answer::SlowDown]).await;
    let err = store(&server, 3).get(&path()).await.unwrap_err();
    assert!(matches!(err, ObjectStoreError::Throttled { .. }), "{err}");
    assert_eq!(err.class(), ErrorClass::Retryable);
    assert_eq!(server.requests.load(Ordering::SeqCst), 3, "max_attempts counts every attempt");
}

#[tokio::test]
async fn a_put_that_times_out_after_sending_has_an_unknown_outcome() {
    let server = scripted_server(vec![Answer::Hang]).await;
    let err = store(&server, 1).put(&path(), Bytes::from_static(b"x")).await.unwrap_err();
    assert!(matches!(err, ObjectStoreError::TimedOutAfterSend { .. }), "{err}");
    assert_eq!(err.class(), ErrorClass::OutcomeUnknown);
}

#[tokio::test]
async fn a_read_that_times_out_is_retryable() {
    let server = scripted_server(vec![Answer::Hang]).await;
    let err = store(&server, 2).head(&path()).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Retryable, "{err}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 2);
}

/// After an attempt that may have written the object, "already exists" may be our own write:
/// the outcome is unknown, not a conflict.
#[tokio::test]
async fn precondition_failed_after_a_timed_out_attempt_is_an_unknown_outcome() {
    let server = scripted_server(vec![Answer::Hang, Answer::PreconditionFailed]).await;
    let err = store(&server, 3).put(&path(), Bytes::from_static(b"x")).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::OutcomeUnknown, "{err}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn precondition_failed_on_the_first_attempt_is_already_exists() {
    let server = scripted_server(vec![Answer::PreconditionFailed]).await;
    let err = store(&server, 3).put(&path(), Bytes::from_static(b"x")).await.unwrap_err();
    assert!(matches!(err, ObjectStoreError::AlreadyExists { .. }), "{err}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 1, "a conflict is not retried");
}

#[tokio::test]
async fn an_unreachable_endpoint_is_retryable_for_reads() {
    // Bind and drop: nothing listens on this port any more.
    let port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
    let store = S3Store::new(S3Config {
        bucket: "scripted".into(),
        endpoint: Some(format!("http://127.0.0.1:{port}")),
        force_path_style: true,
        anonymous: true,
        max_attempts: 2,
        initial_backoff: Duration::from_millis(1),
        ..S3Config::default()
    })
    .unwrap();
    let err = store.get(&path()).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Retryable, "{err}");
}

/// A missing bucket is a configuration error, not a missing object.
#[tokio::test]
async fn a_missing_bucket_is_not_a_missing_object() {
    let server = scripted_server(vec![Answer::NoSuchBucket]).await;
    let err = store(&server, 3).get(&path()).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Internal, "{err}");
    assert!(err.to_string().contains("NoSuchBucket"), "{err}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 1, "not retried");
}

/// Credentials that cannot be had: `not_loaded` (none anywhere) or a provider that fails
/// (an unreachable STS or metadata endpoint).
#[derive(Debug)]
struct NoCredentials {
    transient: bool,
    calls: Arc<AtomicUsize>,
}

impl ProvideCredentials for NoCredentials {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        self.calls.fetch_add(1, Ordering::SeqCst);
        future::ProvideCredentials::ready(Err(if self.transient {
            CredentialsError::provider_error("the metadata endpoint did not answer")
        } else {
            CredentialsError::not_loaded("no credentials in the chain")
        }))
    }
}

/// A request that found no credentials was never sent: a write that failed so is not an
/// unknown outcome, and is not sent unsigned either. Missing credentials fail at once; a
/// failing provider is retried like an unavailable server.
#[tokio::test]
async fn a_write_without_credentials_is_never_sent_and_not_an_unknown_outcome() {
    for transient in [false, true] {
        let server = scripted_server(vec![Answer::Ok]).await;
        let calls = Arc::new(AtomicUsize::new(0));
        let provider = NoCredentials { transient, calls: calls.clone() };
        let config = S3Config {
            bucket: "scripted".into(),
            endpoint: Some(server.endpoint.clone()),
            force_path_style: true,
            max_attempts: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(10),
            retry_seed: Some(1),
            ..S3Config::default()
        };
        let store = S3Store::with_sdk_config(config, |b| b.credentials_provider(provider)).unwrap();
        let err = store.put(&path(), Bytes::from_static(b"x")).await.unwrap_err();
        assert_ne!(err.class(), ErrorClass::OutcomeUnknown, "{err}");
        assert!(err.to_string().contains("no S3 credentials"), "{err}");
        assert_eq!(server.requests.load(Ordering::SeqCst), 0, "nothing reached the server");
        if transient {
            assert_eq!(err.class(), ErrorClass::Retryable, "{err}");
            assert_eq!(calls.load(Ordering::SeqCst), 3, "retried up to max_attempts");
        } else {
            assert_eq!(err.class(), ErrorClass::Internal, "{err}");
            assert_eq!(calls.load(Ordering::SeqCst), 1, "not retried");
        }
    }
}
