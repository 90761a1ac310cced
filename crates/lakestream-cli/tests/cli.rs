//! The `lakestream` binary end to end: `dev` in a temporary directory, driven by the client
//! commands, then stopped with SIGINT (graceful shutdown).

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, Spawned, free_port, service_config, spawn_listening};

struct Dev {
    spawned: Spawned,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.spawned.child.kill();
        let _ = self.spawned.child.wait();
    }
}

/// `lakestream dev` on free HTTP and gRPC ports (never a default one: the suite must pass
/// beside a user's `lakestream dev`), no Kafka front end.
fn start_dev() -> Dev {
    start_dev_on(free_port(), free_port())
}

fn start_dev_on(http_port: u16, grpc_port: u16) -> Dev {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command
        .args(["dev", "--kafka-addr", "off", "--http-addr", &format!("127.0.0.1:{http_port}")])
        .args(["--grpc-addr", &format!("127.0.0.1:{grpc_port}")])
        .current_dir(dir.path())
        .stdout(Stdio::piped());
    let spawned = spawn_listening(command, http_port, "lakestream dev");
    Dev { spawned, url: format!("http://127.0.0.1:{http_port}"), _dir: dir }
}

/// A `lakestream dev` that cannot start (its gRPC port is taken, as when a user's `dev`
/// runs beside the suite) fails the test at once with the child's own error, not with a
/// timeout that says nothing.
#[test]
fn a_dev_that_cannot_start_fails_with_its_stderr() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let grpc = taken.local_addr().unwrap().port();
    let started = Instant::now();
    let failure = std::panic::catch_unwind(|| start_dev_on(free_port(), grpc)).err().expect("dev started");
    let message = failure
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| failure.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(message.contains("exited"), "{message}");
    assert!(
        message.contains(&format!("127.0.0.1:{grpc}")),
        "the child's stderr names the taken address: {message}"
    );
    assert!(started.elapsed() < Duration::from_secs(20), "it waited {:?}", started.elapsed());
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
    let pid = dev.spawned.child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = dev.spawned.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "lakestream dev did not stop within 30 s of SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    let mut printed = String::new();
    std::io::Read::read_to_string(&mut dev.spawned.child.stdout.take().unwrap(), &mut printed).unwrap();
    assert!(printed.contains("HTTP API:  http://127.0.0.1:"), "dev prints its URLs: {printed}");
}

/// `--log-format json`: stderr holds one JSON object per line, and a request's log lines
/// carry its span with the request id the client sent.
#[test]
fn json_logs_carry_the_request_id() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut command = Command::new(BIN);
    command
        .args(["dev", "--log-format", "json", "--grpc-addr", "off", "--kafka-addr", "off"])
        .args(["--http-addr", &format!("127.0.0.1:{port}")])
        .current_dir(dir.path())
        .stdout(Stdio::null());
    let mut spawned = spawn_listening(command, port, "lakestream dev");
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
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
    let _ = spawned.child.kill();
    let _ = spawned.child.wait();
    let stderr = spawned.stderr_text();
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
    let port = free_port();
    let extra = format!("[tracing]\notlp_endpoint = \"http://{collector_addr}/v1/traces\"\n");
    let config = service_config(dir.path(), port, &extra);
    let mut command = Command::new(BIN);
    command.args(["serve", "--config"]).arg(&config).stdout(Stdio::null());
    let Spawned { mut child, .. } = spawn_listening(command, port, "lakestream serve");
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
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
        .args(["dev", "--http-addr", &format!("127.0.0.1:{}", free_port()), "--grpc-addr", "off"])
        .args(["--kafka-addr", "off"])
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
