//! Client commands over the HTTP API: `stream create|list|drop`, `produce`, `consume`.

use std::io::{BufRead, Write};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// A small JSON client of one Lakestream HTTP endpoint.
pub struct Api {
    base: String,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
}

impl Api {
    /// A client of `base`, e.g. `http://127.0.0.1:8080`.
    pub fn new(base: &str) -> Result<Api, String> {
        if !base.starts_with("http://") {
            return Err(format!("--url {base:?}: only http:// URLs are supported"));
        }
        Ok(Api {
            base: base.trim_end_matches('/').to_string(),
            client: Client::builder(TokioExecutor::new()).build_http(),
        })
    }

    async fn call(&self, method: &str, path: &str, content_type: &str, body: Bytes) -> Result<Value, String> {
        let uri = format!("{}{path}", self.base);
        let request = http::Request::builder()
            .method(method)
            .uri(&uri)
            .header("content-type", content_type)
            .body(Full::new(body))
            .map_err(|e| format!("{uri}: {e}"))?;
        let response = self.client.request(request).await.map_err(|e| format!("{uri}: {e}"))?;
        let status = response.status();
        let bytes = response.into_body().collect().await.map_err(|e| format!("{uri}: {e}"))?.to_bytes();
        let value: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).map_err(|e| format!("{uri}: answer is not JSON: {e}"))?
        };
        if !status.is_success() {
            let message = value["error"]["message"].as_str().unwrap_or("(no message)");
            return Err(format!("{method} {uri}: {status}: {message}"));
        }
        Ok(value)
    }

    async fn json(&self, method: &str, path: &str, body: Value) -> Result<Value, String> {
        let bytes = if body.is_null() { Bytes::new() } else { Bytes::from(body.to_string()) };
        self.call(method, path, "application/json", bytes).await
    }
}

/// `stream create`.
pub async fn create_stream(api: &Api, ns: &str, name: &str, partitions: u32) -> Result<(), String> {
    let v = api
        .json(
            "POST",
            &format!("/v1/namespaces/{ns}/streams"),
            json!({"name": name, "partitions": partitions}),
        )
        .await?;
    println!("created {ns}/{name}: {} partition(s), log ids {}", v["partitions"], v["log_ids"]);
    Ok(())
}

/// `stream list`, every page.
pub async fn list_streams(api: &Api, ns: &str) -> Result<(), String> {
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            Some(a) => format!("/v1/namespaces/{ns}/streams?after={a}"),
            None => format!("/v1/namespaces/{ns}/streams"),
        };
        let v = api.json("GET", &path, Value::Null).await?;
        for s in v["streams"].as_array().into_iter().flatten() {
            println!("{}\t{} partition(s)", s["name"].as_str().unwrap_or("?"), s["partitions"]);
        }
        match v["next_page"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => return Ok(()),
        }
    }
}

/// `stream drop`.
pub async fn drop_stream(api: &Api, ns: &str, name: &str) -> Result<(), String> {
    api.json("DELETE", &format!("/v1/namespaces/{ns}/streams/{name}"), Value::Null).await?;
    println!("dropped {ns}/{name}");
    Ok(())
}

/// `produce`: each file is one entry; without files, each line of standard input is one entry.
pub async fn produce(
    api: &Api,
    ns: &str,
    stream: &str,
    partition: u32,
    record_count: u32,
    files: &[std::path::PathBuf],
) -> Result<(), String> {
    let payloads: Vec<Vec<u8>> = if files.is_empty() {
        std::io::stdin()
            .lock()
            .lines()
            .map(|l| l.map(String::into_bytes).map_err(|e| format!("stdin: {e}")))
            .collect::<Result<_, _>>()?
    } else {
        files
            .iter()
            .map(|f| std::fs::read(f).map_err(|e| format!("{}: {e}", f.display())))
            .collect::<Result<_, _>>()?
    };
    let path = format!("/v1/namespaces/{ns}/streams/{stream}/partitions/{partition}/entries");
    for chunk in payloads.chunks(500) {
        let entries: Vec<Value> = chunk
            .iter()
            .map(|p| json!({"payload_base64": BASE64.encode(p), "record_count": record_count}))
            .collect();
        let v = api.json("POST", &path, json!({ "entries": entries })).await?;
        for answer in v["entries"].as_array().into_iter().flatten() {
            match answer.get("error") {
                Some(e) => eprintln!("entry not appended: {}", e["message"].as_str().unwrap_or("?")),
                None => {
                    println!("appended at offset {} ({} record(s))", answer["offset"], answer["record_count"])
                }
            }
        }
    }
    Ok(())
}

/// `consume`: prints each entry's payload as one line (`--json` prints the entry as JSON);
/// `--follow` keeps waiting for new entries.
pub async fn consume(
    api: &Api,
    ns: &str,
    stream: &str,
    partition: u32,
    mut offset: u64,
    follow: bool,
    as_json: bool,
) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    loop {
        let wait = if follow { Duration::from_secs(10) } else { Duration::ZERO };
        let path = format!(
            "/v1/namespaces/{ns}/streams/{stream}/partitions/{partition}/entries?offset={offset}&max_wait_ms={}",
            wait.as_millis()
        );
        let v = api.json("GET", &path, Value::Null).await?;
        let entries = v["entries"].as_array().cloned().unwrap_or_default();
        for e in &entries {
            if as_json {
                let _ = writeln!(out, "{e}");
            } else {
                let payload = BASE64
                    .decode(e["payload_base64"].as_str().unwrap_or(""))
                    .map_err(|err| format!("payload: {err}"))?;
                let _ = writeln!(out, "{}", String::from_utf8_lossy(&payload));
            }
        }
        let _ = out.flush();
        offset = v["next_offset"].as_u64().unwrap_or(offset);
        if entries.is_empty() && !follow {
            return Ok(());
        }
    }
}
