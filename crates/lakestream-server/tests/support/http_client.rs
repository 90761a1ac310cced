//! A minimal HTTP/1.1 client over TCP for the suites, so they need no other HTTP client: one
//! request per connection (`connection: close`), header values sent as raw bytes (tests send
//! unencoded UTF-8 and malformed escapes on purpose), chunked bodies decoded.

use http::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A response as the client received it.
pub struct Answer {
    pub status: StatusCode,
    /// Lower-cased names, values as sent.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl Answer {
    /// The first value of header `name` (lower case), if present.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }

    /// The body as JSON; panics, showing the body, when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// The body as JSON, `Null` when empty, or a JSON string when it is not JSON (axum answers
    /// some rejections in plain text; the assertion that follows then shows it).
    pub fn json_or_text(&self) -> Value {
        if self.body.is_empty() {
            return Value::Null;
        }
        serde_json::from_slice(&self.body).unwrap_or_else(|_| Value::String(self.text()))
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends one request to `base` (`http://host:port` or `host:port`) and reads the whole answer.
pub async fn call(base: &str, method: &str, path: &str, headers: &[(&str, &[u8])], body: &[u8]) -> Answer {
    let host = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {host}\r\ncontent-length: {}\r\n", body.len())
        .into_bytes();
    for (name, value) in headers {
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"connection: close\r\n\r\n");
    stream.write_all(&head).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete response");
    let mut lines = raw[..split].split(|b| *b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let status_line = String::from_utf8_lossy(lines.next().unwrap()).into_owned();
    let status: u16 = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, Vec<u8>)> = lines
        .filter_map(|l| {
            let colon = l.iter().position(|b| *b == b':')?;
            let name = String::from_utf8_lossy(&l[..colon]).trim().to_ascii_lowercase();
            Some((name, l[colon + 1..].trim_ascii().to_vec()))
        })
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers.iter().any(|(k, v)| k == "transfer-encoding" && v == b"chunked") {
        body = dechunk(&body);
    }
    Answer { status: StatusCode::from_u16(status).unwrap(), headers, body }
}

/// A JSON request (no body when `body` is `Null`); the answer as [`Answer::json_or_text`].
pub async fn json_call(base: &str, method: &str, path: &str, body: Value) -> (StatusCode, Value) {
    let body = if body.is_null() { Vec::new() } else { body.to_string().into_bytes() };
    let answer = call(base, method, path, &[("content-type", b"application/json")], &body).await;
    (answer.status, answer.json_or_text())
}

/// A GET that must answer 200; its body as text.
pub async fn get_ok(base: &str, path: &str) -> String {
    let answer = call(base, "GET", path, &[], b"").await;
    assert_eq!(answer.status, StatusCode::OK, "GET {path}: {}", answer.text());
    answer.text()
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = b.windows(2).position(|w| w == b"\r\n").expect("a chunk size line");
        let size = usize::from_str_radix(std::str::from_utf8(&b[..line_end]).unwrap().trim(), 16).unwrap();
        b = &b[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}
