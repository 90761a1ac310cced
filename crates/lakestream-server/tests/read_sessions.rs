//! Read sessions that stay open and push entries as they are appended: Server-Sent Events over
//! HTTP (resuming from `Last-Event-ID`) and gRPC server streaming, on a dev stack and on a stack
//! with a real Oxia server of its own (`LAKESTREAM_TEST_OXIA_BIN`, which `scripts/test` sets;
//! that test fails without it).

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use lakestream_server::grpc::pb;
use lakestream_server::grpc::pb::lakestream_client::LakestreamClient;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod support;

use support::Running;

async fn start(oxia: Option<&lakestream_meta_oxia::testkit::StandaloneOxia>) -> Running {
    let address = oxia.map(|o| o.address());
    support::start_with(move |config| {
        if let Some(address) = address {
            config.service.metadata = lakestream_service::config::MetadataConfig::oxia(vec![address.clone()]);
        }
    })
    .await
}

async fn post(base: &str, path: &str, body: Value) -> (u16, Value) {
    let host = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let body = body.to_string();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let status = String::from_utf8_lossy(&raw[..split]).split(' ').nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_slice(&raw[split + 4..]).unwrap_or(Value::Null))
}

async fn produce(base: &str, stream: &str, payloads: &[&str]) {
    let entries: Vec<Value> =
        payloads.iter().map(|p| json!({ "payload_base64": BASE64.encode(p) })).collect();
    let path = format!("/v1/namespaces/default/streams/{stream}/partitions/0/entries");
    let (status, body) = post(base, &path, json!({ "entries": entries })).await;
    assert_eq!(status, 200, "{body}");
}

/// An SSE response read as it arrives: the head, then events out of the chunked body.
struct Sse {
    stream: tokio::net::TcpStream,
    /// Bytes received and not yet de-chunked.
    raw: Vec<u8>,
    /// The de-chunked body not yet parsed into events.
    body: String,
    status: u16,
}

/// One event: its `event`, `id` and `data` fields.
#[derive(Debug)]
struct Event {
    event: String,
    id: Option<String>,
    data: String,
}

impl Sse {
    async fn open(base: &str, path: &str, last_event_id: Option<&str>) -> Sse {
        let host = base.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
        let resume = last_event_id.map(|id| format!("last-event-id: {id}\r\n")).unwrap_or_default();
        let head =
            format!("GET {path} HTTP/1.1\r\nhost: {host}\r\naccept: text/event-stream\r\n{resume}\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut sse = Sse { stream, raw: Vec::new(), body: String::new(), status: 0 };
        let split = loop {
            if let Some(split) = sse.raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break split;
            }
            sse.read_more().await;
        };
        let head = String::from_utf8_lossy(&sse.raw[..split]).to_string();
        sse.status = head.split(' ').nth(1).unwrap().parse().unwrap();
        sse.raw.drain(..split + 4);
        sse
    }

    async fn read_more(&mut self) {
        let mut buf = [0u8; 8192];
        let n = tokio::time::timeout(Duration::from_secs(20), self.stream.read(&mut buf))
            .await
            .expect("no data within 20 s")
            .unwrap();
        assert!(n > 0, "the server closed the session");
        self.raw.extend_from_slice(&buf[..n]);
    }

    /// Moves every complete chunk from `raw` to `body`.
    fn dechunk(&mut self) {
        loop {
            let Some(line_end) = self.raw.windows(2).position(|w| w == b"\r\n") else { return };
            let size = usize::from_str_radix(std::str::from_utf8(&self.raw[..line_end]).unwrap().trim(), 16)
                .unwrap();
            if self.raw.len() < line_end + 2 + size + 2 {
                return;
            }
            let chunk = self.raw[line_end + 2..line_end + 2 + size].to_vec();
            self.body.push_str(std::str::from_utf8(&chunk).unwrap());
            self.raw.drain(..line_end + 2 + size + 2);
        }
    }

    /// The next event that is not a keep-alive comment.
    async fn next(&mut self) -> Event {
        loop {
            self.dechunk();
            while let Some(end) = self.body.find("\n\n") {
                let block: String = self.body.drain(..end + 2).collect();
                let mut event = Event { event: "message".into(), id: None, data: String::new() };
                let mut fields = 0;
                for line in block.lines() {
                    if let Some((name, value)) = line.split_once(':') {
                        let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
                        fields += 1;
                        match name {
                            "event" => event.event = value,
                            "id" => event.id = Some(value),
                            "data" => event.data = value,
                            _ => fields -= 1, // a comment (empty name)
                        }
                    }
                }
                if fields > 0 {
                    return event;
                }
            }
            self.read_more().await;
        }
    }

    /// The next event, which must be an entry: its offset, payload and id.
    async fn entry(&mut self) -> (u64, String, String) {
        let event = self.next().await;
        assert_eq!(event.event, "entry", "{event:?}");
        let data: Value = serde_json::from_str(&event.data).unwrap();
        let payload = BASE64.decode(data["payload_base64"].as_str().unwrap()).unwrap();
        (data["offset"].as_u64().unwrap(), String::from_utf8(payload).unwrap(), event.id.unwrap())
    }
}

async fn sse_sessions(s: &Running) {
    let (status, body) =
        post(&s.base, "/v1/namespaces/default/streams", json!({ "name": "live", "partitions": 1 })).await;
    assert_eq!(status, 201, "{body}");
    produce(&s.base, "live", &["a0", "a1"]).await;
    let path = "/v1/namespaces/default/streams/live/partitions/0/entries?offset=0";
    let mut session = Sse::open(&s.base, path, None).await;
    assert_eq!(session.status, 200);
    assert_eq!(session.entry().await, (0, "a0".into(), "1".into()));
    assert_eq!(session.entry().await, (1, "a1".into(), "2".into()));
    // Entries appended while the session is open are pushed to it.
    produce(&s.base, "live", &["b0", "b1"]).await;
    assert_eq!(session.entry().await, (2, "b0".into(), "3".into()));
    assert_eq!(session.entry().await, (3, "b1".into(), "4".into()));
    drop(session);

    // Reconnecting with Last-Event-ID resumes right after the last entry seen.
    let mut resumed = Sse::open(&s.base, path, Some("3")).await;
    assert_eq!(resumed.entry().await, (3, "b1".into(), "4".into()));
    produce(&s.base, "live", &["c0"]).await;
    assert_eq!(resumed.entry().await, (4, "c0".into(), "5".into()));
    drop(resumed);

    // Refused before any event: a malformed Last-Event-ID, an unknown stream.
    let bad = Sse::open(&s.base, path, Some("later")).await;
    assert_eq!(bad.status, 400);
    let unknown = Sse::open(&s.base, "/v1/namespaces/default/streams/none/partitions/0/entries", None).await;
    assert_eq!(unknown.status, 404);
}

async fn grpc_sessions(s: &Running) {
    use futures::StreamExt as _;
    let mut c = LakestreamClient::connect(format!("http://{}", s.at.grpc.unwrap())).await.unwrap();
    let request = |offset: u64| pb::ReadSessionRequest {
        namespace: "default".into(),
        stream: "live".into(),
        partition: 0,
        offset,
        max_bytes: Some(1), // One entry per batch: batches are bounded in bytes.
    };
    let mut session = c.read_session(request(3)).await.unwrap().into_inner();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let batch = session.next().await.unwrap().unwrap();
        assert_eq!(batch.entries.len(), 1, "max_bytes bounds each batch");
        seen.push((batch.entries[0].offset, batch.entries[0].payload.clone(), batch.next_offset));
    }
    assert_eq!(seen, [(3, "b1".into(), 4), (4, "c0".into(), 5)]);
    produce(&s.base, "live", &["d0"]).await;
    let pushed =
        tokio::time::timeout(Duration::from_secs(20), session.next()).await.unwrap().unwrap().unwrap();
    assert_eq!((pushed.entries[0].offset, &pushed.entries[0].payload[..]), (5, &b"d0"[..]));
    drop(session);
    // Resuming from a batch's next_offset.
    let mut resumed = c.read_session(request(pushed.next_offset)).await.unwrap().into_inner();
    produce(&s.base, "live", &["e0"]).await;
    let next = tokio::time::timeout(Duration::from_secs(20), resumed.next()).await.unwrap().unwrap().unwrap();
    assert_eq!((next.entries[0].offset, &next.entries[0].payload[..]), (6, &b"e0"[..]));
    // An unknown stream is refused when the session opens.
    let mut unknown = request(0);
    unknown.stream = "none".into();
    assert_eq!(c.read_session(unknown).await.unwrap_err().code(), tonic::Code::NotFound);
}

/// A fetch answered in raw frames: binary payloads come back byte for byte, without Base64.
async fn raw_fetch(s: &Running) {
    let (status, body) =
        post(&s.base, "/v1/namespaces/default/streams", json!({ "name": "rawbin", "partitions": 1 })).await;
    assert_eq!(status, 201, "{body}");
    let binary: Vec<u8> = vec![0xff, 0x00, 0x80, b'\n', 0xfe];
    let entries = json!({ "entries": [
        { "payload_base64": BASE64.encode(&binary), "record_count": 3 },
        { "payload_base64": BASE64.encode(b"x") },
    ] });
    let (status, body) =
        post(&s.base, "/v1/namespaces/default/streams/rawbin/partitions/0/entries", entries).await;
    assert_eq!(status, 200, "{body}");
    let host = s.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let head = format!(
        "GET /v1/namespaces/default/streams/rawbin/partitions/0/entries?offset=0 HTTP/1.1\r\nhost: {host}\r\n\
         accept: application/vnd.lakestream.entries\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-type: application/vnd.lakestream.entries"), "{head}");
    assert!(head.contains("lakestream-next-offset: 4"), "{head}");
    let mut body = &raw[split + 4..];
    let mut frames = Vec::new();
    while !body.is_empty() {
        let offset = u64::from_be_bytes(body[..8].try_into().unwrap());
        let records = u32::from_be_bytes(body[8..12].try_into().unwrap());
        let len = u32::from_be_bytes(body[20..24].try_into().unwrap()) as usize;
        frames.push((offset, records, body[24..24 + len].to_vec()));
        body = &body[24 + len..];
    }
    assert_eq!(frames, [(0, 3, binary), (3, 1, b"x".to_vec())]);
}

#[tokio::test]
async fn read_sessions_push_entries_on_the_dev_stack() {
    let s = start(None).await;
    raw_fetch(&s).await;
    sse_sessions(&s).await;
    grpc_sessions(&s).await;
    s.stop().await;
}

#[tokio::test]
async fn read_sessions_push_entries_on_oxia() {
    let oxia = lakestream_meta_oxia::testkit::StandaloneOxia::start(4, &[]).await;
    let s = start(Some(&oxia)).await;
    sse_sessions(&s).await;
    grpc_sessions(&s).await;
    s.stop().await;
}
