//! A client of the v1 HTTP API that reports what a producer can know about each append:
//! acknowledged at an offset, failed (nothing was written), or outcome unknown (it may have
//! been written). The classification is conservative: when the answer does not prove that
//! nothing was written, the outcome is unknown.

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

use crate::{Error, Result};

/// What a producer knows about one append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged: durable at this offset.
    Acked {
        /// The entry's offset.
        offset: u64,
        /// The timestamp the writer gave it.
        timestamp_ms: i64,
    },
    /// Nothing was written (the request never reached a writer, or it refused the entry).
    Failed(String),
    /// It may or may not have been written (a lost response, a 504, a crash mid-request).
    Unknown(String),
}

/// One entry read back.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Entry {
    /// Its offset.
    pub offset: u64,
    /// Its record count.
    pub record_count: u32,
    /// Its timestamp.
    pub timestamp_ms: i64,
    /// The payload, decoded.
    #[serde(rename = "payload_base64", deserialize_with = "base64_bytes")]
    pub payload: Bytes,
}

fn base64_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Bytes, D::Error> {
    let text = String::deserialize(d)?;
    BASE64.decode(text.as_bytes()).map(Bytes::from).map_err(serde::de::Error::custom)
}

/// A fetch's answer.
#[derive(Debug, Clone, Deserialize)]
pub struct Batch {
    /// The entries, in offset order.
    pub entries: Vec<Entry>,
    /// Where the next fetch starts.
    pub next_offset: u64,
    /// The trim marker the read applied.
    #[serde(default)]
    pub trim_marker: u64,
}

/// What a trim was answered.
pub type TrimAnswer = crate::history::TrimResult;

/// A partition's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Offsets {
    /// The first readable offset.
    pub first_offset: u64,
    /// The offset the next append gets.
    pub next_offset: u64,
}

/// A transport failure, split by whether the request may have reached the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// The connection was never made: the server saw nothing.
    NotSent(String),
    /// The request may have been delivered (reset, timeout, a crash mid-request).
    MaybeSent(String),
}

/// An HTTP answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: Bytes,
}

/// A client of one service's base URL.
#[derive(Debug, Clone)]
pub struct Api {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl Api {
    /// A client of `base` (`http://host:port`) whose requests give up after `timeout`.
    pub fn new(base: &str, timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(64)
            .build(connector);
        Api { base: base.trim_end_matches('/').to_string(), client, timeout }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// One request.
    pub async fn call(
        &self,
        method: http::Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> std::result::Result<Answer, Transport> {
        let mut request = http::Request::builder().method(method).uri(format!("{}{path}", self.base));
        if let Some(ct) = content_type {
            request = request.header(http::header::CONTENT_TYPE, ct);
        }
        let request =
            request.body(Full::new(body)).map_err(|e| Transport::NotSent(format!("bad request: {e}")))?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| {
                if e.is_connect() {
                    Transport::NotSent(format!("connect: {e}"))
                } else {
                    Transport::MaybeSent(format!("{e}: {:?}", std::error::Error::source(&e)))
                }
            })?;
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| Transport::MaybeSent(format!("reading the response: {e}")))?
                .to_bytes();
            Ok(Answer { status, body })
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or_else(|_| Err(Transport::MaybeSent(format!("no answer within {:?}", self.timeout))))
    }

    async fn json(
        &self,
        method: http::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<Answer> {
        let (ct, bytes) = match body {
            Some(v) => (Some("application/json"), Bytes::from(v.to_string())),
            None => (None, Bytes::new()),
        };
        self.call(method.clone(), path, ct, bytes)
            .await
            .map_err(|e| Error::new(format!("{method} {}{path}: {e:?}", self.base)))
    }

    /// Creates a stream with `partitions` partitions (an existing one is fine); returns its
    /// log ids.
    pub async fn create_stream(&self, ns: &str, name: &str, partitions: u32) -> Result<Vec<u64>> {
        let body = serde_json::json!({ "name": name, "partitions": partitions });
        let a = self.json(http::Method::POST, &format!("/v1/namespaces/{ns}/streams"), Some(body)).await?;
        if a.status != 201 && a.status != 409 {
            return Err(Error::new(format!("creating {ns}/{name}: {} {}", a.status, text(&a.body))));
        }
        self.stream_logs(ns, name).await
    }

    /// A stream's log ids, one per partition.
    pub async fn stream_logs(&self, ns: &str, name: &str) -> Result<Vec<u64>> {
        let a = self.json(http::Method::GET, &format!("/v1/namespaces/{ns}/streams/{name}"), None).await?;
        #[derive(Deserialize)]
        struct StreamJson {
            log_ids: Vec<u64>,
        }
        expect_json::<StreamJson>(&a, 200, "get stream").map(|s| s.log_ids)
    }

    /// Appends `entries` (payload, record count) in one request and classifies each outcome.
    /// The result has one outcome per entry, in order.
    pub async fn produce(
        &self,
        ns: &str,
        stream: &str,
        partition: u32,
        entries: &[(Bytes, u32)],
    ) -> Vec<Outcome> {
        let body = serde_json::json!({
            "entries": entries.iter().map(|(p, n)| serde_json::json!({
                "payload_base64": BASE64.encode(p),
                "record_count": n,
            })).collect::<Vec<_>>()
        });
        let path = format!("/v1/namespaces/{ns}/streams/{stream}/partitions/{partition}/entries");
        let answer = self
            .call(http::Method::POST, &path, Some("application/json"), Bytes::from(body.to_string()))
            .await;
        classify(answer, entries.len())
    }

    /// Fetches from `offset`.
    pub async fn fetch(
        &self,
        ns: &str,
        stream: &str,
        partition: u32,
        offset: u64,
        max_bytes: usize,
    ) -> Result<Batch> {
        self.fetch_wait(ns, stream, partition, offset, max_bytes, Duration::ZERO).await
    }

    /// Fetches from `offset`, waiting up to `max_wait` for entries when there are none yet.
    pub async fn fetch_wait(
        &self,
        ns: &str,
        stream: &str,
        partition: u32,
        offset: u64,
        max_bytes: usize,
        max_wait: Duration,
    ) -> Result<Batch> {
        let path = format!(
            "/v1/namespaces/{ns}/streams/{stream}/partitions/{partition}/entries?offset={offset}&max_bytes={max_bytes}&max_wait_ms={}",
            max_wait.as_millis()
        );
        let a = self.json(http::Method::GET, &path, None).await?;
        expect_json(&a, 200, "fetch")
    }

    /// Soft-trims a partition through `through` (inclusive); the marker stored, or what is
    /// known about a failure: refused (4xx: nothing written) or unknown (a 5xx or a broken
    /// exchange: the marker may have moved).
    pub async fn trim(&self, ns: &str, stream: &str, partition: u32, through: u64) -> TrimAnswer {
        let path = format!("/v1/namespaces/{ns}/streams/{stream}/partitions/{partition}/trim");
        let body = serde_json::json!({ "through": through }).to_string();
        match self.call(http::Method::POST, &path, Some("application/json"), Bytes::from(body)).await {
            Err(Transport::NotSent(e)) => TrimAnswer::Failed(e),
            Err(Transport::MaybeSent(e)) => TrimAnswer::Unknown(e),
            Ok(a) if a.status == 200 => {
                #[derive(Deserialize)]
                struct Trimmed {
                    trim_marker: u64,
                }
                match serde_json::from_slice::<Trimmed>(&a.body) {
                    Ok(t) => TrimAnswer::Stored(t.trim_marker),
                    Err(e) => TrimAnswer::Unknown(format!("unreadable answer {:?}: {e}", text(&a.body))),
                }
            }
            Ok(a) if (400..500).contains(&a.status) => {
                TrimAnswer::Failed(format!("{}: {}", a.status, text(&a.body)))
            }
            Ok(a) => TrimAnswer::Unknown(format!("{}: {}", a.status, text(&a.body))),
        }
    }

    /// A partition's first and next offsets.
    pub async fn offsets(&self, ns: &str, stream: &str, partition: u32) -> Result<Offsets> {
        let path = format!("/v1/namespaces/{ns}/streams/{stream}/partitions/{partition}/offsets");
        let a = self.json(http::Method::GET, &path, None).await?;
        expect_json(&a, 200, "offsets")
    }

    /// Every entry of a partition from its first offset to its next offset, retrying failed
    /// requests (a service restarting, a dropped connection) until `patience` has passed.
    pub async fn read_all(
        &self,
        ns: &str,
        stream: &str,
        partition: u32,
        patience: Duration,
    ) -> Result<Vec<Entry>> {
        let deadline = Instant::now() + patience;
        let offsets = retry(deadline, || self.offsets(ns, stream, partition)).await?;
        let mut entries = Vec::new();
        let mut next = offsets.first_offset;
        while next < offsets.next_offset {
            // Small fetches: over a WAL of many small objects a large one may take longer than
            // a request's timeout.
            let batch = retry(deadline, || self.fetch(ns, stream, partition, next, 256 << 10)).await?;
            if batch.entries.is_empty() {
                if Instant::now() > deadline {
                    return Err(Error::new(format!(
                        "{ns}/{stream}/{partition}: no entry at offset {next} though the next offset is {}",
                        offsets.next_offset
                    )));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            next = batch.next_offset;
            entries.extend(batch.entries);
        }
        Ok(entries)
    }

    /// `GET /metrics` as text.
    pub async fn metrics(&self) -> Result<String> {
        let a = self.json(http::Method::GET, "/metrics", None).await?;
        if a.status != 200 {
            return Err(Error::new(format!("GET /metrics: {}", a.status)));
        }
        Ok(text(&a.body))
    }
}

/// Repeats `op` until it succeeds or `deadline` passes (then its last error).
pub async fn retry<T, F, Fut>(deadline: Instant, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

fn text(b: &Bytes) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn expect_json<T: for<'de> Deserialize<'de>>(a: &Answer, status: u16, what: &str) -> Result<T> {
    if a.status != status {
        return Err(Error::new(format!("{what}: status {} ({})", a.status, text(&a.body))));
    }
    serde_json::from_slice(&a.body)
        .map_err(|e| Error::new(format!("{what}: unexpected body {:?}: {e}", text(&a.body))))
}

/// The outcome of each of `n` entries sent in one produce request.
pub fn classify(answer: std::result::Result<Answer, Transport>, n: usize) -> Vec<Outcome> {
    let all = |o: Outcome| vec![o; n];
    let answer = match answer {
        Err(Transport::NotSent(e)) => return all(Outcome::Failed(e)),
        Err(Transport::MaybeSent(e)) => return all(Outcome::Unknown(e)),
        Ok(a) => a,
    };
    let body = text(&answer.body);
    match answer.status {
        200 => {}
        // Refused before anything was appended: validation, unknown stream, fenced.
        400..=499 => return all(Outcome::Failed(format!("{}: {body}", answer.status))),
        // A single entry's own 503 (retryable, backpressure) means it was not written. A
        // batch's error status is its first entry's; the others may differ, so they are
        // unknown.
        503 if n == 1 => return all(Outcome::Failed(format!("503: {body}"))),
        s => return all(Outcome::Unknown(format!("{s}: {body}"))),
    }
    #[derive(Deserialize)]
    struct Produced {
        entries: Vec<serde_json::Value>,
    }
    let parsed: Produced = match serde_json::from_str(&body) {
        Ok(p) => p,
        Err(e) => return all(Outcome::Unknown(format!("unreadable answer {body:?}: {e}"))),
    };
    if parsed.entries.len() != n {
        return all(Outcome::Unknown(format!("{} results for {n} entries: {body}", parsed.entries.len())));
    }
    parsed
        .entries
        .iter()
        .map(|e| {
            if let (Some(offset), Some(ts)) =
                (e.get("offset").and_then(|v| v.as_u64()), e.get("timestamp_ms").and_then(|v| v.as_i64()))
            {
                return Outcome::Acked { offset, timestamp_ms: ts };
            }
            let class = e.pointer("/error/class").and_then(|v| v.as_str()).unwrap_or("");
            // Only the classes that promise nothing was written count as failures.
            match class {
                "InvalidInput" | "NotFound" | "Conflict" | "Retryable" => Outcome::Failed(e.to_string()),
                _ => Outcome::Unknown(e.to_string()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> std::result::Result<Answer, Transport> {
        Ok(Answer { status, body: Bytes::from(body.to_string()) })
    }

    #[test]
    fn outcomes_are_classified_conservatively() {
        let ok = answer(
            200,
            r#"{"entries":[{"offset":4,"record_count":1,"timestamp_ms":9},
                {"error":{"class":"OutcomeUnknown","message":"m"}},{"error":{"class":"Retryable","message":"m"}}]}"#,
        );
        let got = classify(ok, 3);
        assert_eq!(got[0], Outcome::Acked { offset: 4, timestamp_ms: 9 });
        assert!(matches!(got[1], Outcome::Unknown(_)));
        assert!(matches!(got[2], Outcome::Failed(_)));
        assert!(matches!(classify(answer(503, "busy"), 1)[0], Outcome::Failed(_)));
        assert!(matches!(classify(answer(503, "busy"), 2)[1], Outcome::Unknown(_)));
        assert!(matches!(classify(answer(504, "?"), 1)[0], Outcome::Unknown(_)));
        assert!(matches!(classify(answer(409, "fenced"), 2)[1], Outcome::Failed(_)));
        assert!(matches!(classify(Err(Transport::NotSent("refused".into())), 1)[0], Outcome::Failed(_)));
        assert!(matches!(classify(Err(Transport::MaybeSent("reset".into())), 1)[0], Outcome::Unknown(_)));
        assert!(matches!(classify(answer(200, r#"{"entries":[]}"#), 1)[0], Outcome::Unknown(_)));
    }
}
