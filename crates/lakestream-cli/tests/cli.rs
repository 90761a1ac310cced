//! The `lakestream` binary end to end: `dev` in a temporary directory, driven by the client
//! commands, then stopped with SIGINT (graceful shutdown).

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_lakestream");

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
        .args(["dev", "--http-addr", &format!("127.0.0.1:{port}")])
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
    let mut child = Command::new(BIN)
        .args(args)
        .args(["--url", url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
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
