//! The `lakestream` binary end to end: `dev` in a temporary directory, driven by the client
//! commands, then stopped with SIGINT (graceful shutdown).

mod common;

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, service_config};

struct Dev {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_dev() -> Dev {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(BIN)
        .args(["dev", "--kafka-addr", "off", "--http-addr", &format!("127.0.0.1:{port}")])
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "lakestream dev did not listen within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    Dev { child, url, _dir: dir }
}

fn lakestream(url: &str, args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut all = args.to_vec();
    all.extend(["--url", url]);
    let out = common::client(&all, stdin.as_bytes(), &[]);
    let (stdout, stderr) = common::texts(&out);
    (out.status.success(), stdout, stderr)
}

#[test]
fn dev_serves_the_client_commands_and_shuts_down_gracefully() {
    let mut dev = start_dev();
    let url = dev.url.clone();
    let (ok, out, err) = lakestream(&url, &["stream", "create", "events", "--partitions", "2"], "");
    assert!(ok, "{err}");
    assert!(out.contains("created default/events: 2 partition(s)"), "{out}");
    let (ok, out, _) = lakestream(&url, &["stream", "list"], "");
    assert!(ok && out.contains("events\t2 partition(s)"), "{out}");

    let (ok, out, err) = lakestream(&url, &["produce", "events", "-p", "1"], "first line\nsecond line\n");
    assert!(ok, "{err}");
    assert_eq!(out.matches("appended at offset").count(), 2, "{out}");
    let (ok, out, err) = lakestream(&url, &["consume", "events", "-p", "1"], "");
    assert!(ok, "{err}");
    assert_eq!(out, "first line\nsecond line\n");

    // Errors name the problem and exit non-zero.
    let (ok, _, err) = lakestream(&url, &["consume", "missing"], "");
    assert!(!ok && err.contains("404"), "{err}");

    // SIGINT: graceful shutdown, exit 0.
    let pid = dev.child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = dev.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "lakestream dev did not stop within 30 s of SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    let mut printed = String::new();
    std::io::Read::read_to_string(&mut dev.child.stdout.take().unwrap(), &mut printed).unwrap();
    assert!(printed.contains("HTTP API:  http://127.0.0.1:"), "dev prints its URLs: {printed}");
}

/// `--log-format json`: stderr holds one JSON object per line, and a request's log lines
/// carry its span with the request id the client sent.
#[test]
fn json_logs_carry_the_request_id() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = Command::new(BIN)
        .args([
            "dev",
            "--log-format",
            "json",
            "--grpc-addr",
            "off",
            "--kafka-addr",
            "off",
            "--http-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut stream = loop {
        if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            break s;
        }
        assert!(Instant::now() < deadline, "lakestream dev did not listen within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    // A failed request is logged ("request failed", with its status) inside its span.
    write!(
        stream,
        "GET /v1/namespaces/default/streams/none HTTP/1.1\r\nhost: x\r\nx-request-id: trace-json-1\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    std::thread::sleep(Duration::from_millis(200));
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}\n{stderr}")))
        .collect();
    let failed = lines
        .iter()
        .find(|l| l["fields"]["message"] == "request failed")
        .unwrap_or_else(|| panic!("no `request failed` line in\n{stderr}"));
    assert_eq!(failed["span"]["id"], "trace-json-1", "{failed}");
    assert_eq!(failed["span"]["name"], "request", "{failed}");
    assert_eq!(failed["fields"]["status"], "404 Not Found", "{failed}");
}

/// Without the `otlp` feature, asking for trace export is refused at start, naming the
/// setting and the feature.
#[cfg(not(feature = "otlp"))]
#[test]
fn otlp_export_without_the_feature_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        service_config(dir.path(), 1, "[tracing]\notlp_endpoint = \"http://127.0.0.1:1/v1/traces\"\n");
    let out = Command::new(BIN).args(["serve", "--config"]).arg(&config).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tracing.otlp_endpoint") && stderr.contains("`otlp`"), "{stderr}");
}

/// With the `otlp` feature and `[tracing] otlp_endpoint`, a request's span reaches the
/// collector (OTLP/HTTP, protobuf) with its request id, at the latest when the service stops.
#[cfg(feature = "otlp")]
#[test]
fn request_spans_are_exported_over_otlp() {
    use std::io::{BufRead, BufReader, Read};
    // A collector that answers every POST 200 and keeps the bodies.
    let collector = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let collector_addr = collector.local_addr().unwrap();
    let (bodies_tx, bodies_rx) = std::sync::mpsc::channel::<(String, Vec<u8>)>();
    std::thread::spawn(move || {
        for conn in collector.incoming() {
            let Ok(conn) = conn else { return };
            let tx = bodies_tx.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut conn = conn;
                loop {
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut length = 0;
                    loop {
                        let mut line = String::new();
                        reader.read_line(&mut line).unwrap();
                        if line == "\r\n" {
                            break;
                        }
                        if let Some((k, v)) = line.split_once(':')
                            && k.eq_ignore_ascii_case("content-length")
                        {
                            length = v.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    let _ = tx.send((request_line, body));
                    conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").unwrap();
                }
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let extra = format!("[tracing]\notlp_endpoint = \"http://{collector_addr}/v1/traces\"\n");
    let config = service_config(dir.path(), port, &extra);
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut stream = loop {
        if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            break s;
        }
        assert!(Instant::now() < deadline, "lakestream serve did not listen within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    write!(
        stream,
        "GET /v1/namespaces/default/streams/none HTTP/1.1\r\nhost: x\r\nx-request-id: trace-otlp-1\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    // SIGINT: graceful shutdown flushes the span batches.
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let mut exported = Vec::new();
    while let Ok((request_line, body)) = bodies_rx.recv_timeout(Duration::from_secs(2)) {
        assert!(request_line.starts_with("POST /v1/traces "), "{request_line}");
        exported.extend(body);
    }
    let has = |needle: &[u8]| exported.windows(needle.len()).any(|w| w == needle);
    assert!(has(b"trace-otlp-1"), "the request's span with its id was not exported");
    assert!(has(b"lakestream"), "the service name");
}

/// `lakestream dev` takes the general environment rule like `serve` does: a bad value stops
/// the start naming its variable and key.
#[test]
fn dev_applies_the_environment_rule() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["dev", "--http-addr", "127.0.0.1:1", "--grpc-addr", "off", "--kafka-addr", "off"])
        .env("LAKESTREAM_WRITER__FLUSH_WINDOW", "soon")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("LAKESTREAM_WRITER__FLUSH_WINDOW") && stderr.contains("writer.flush_window"),
        "{stderr}"
    );
}
