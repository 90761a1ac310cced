//! An idempotent producer retrying through `kill -9` of the server: `lakestream dev` runs as a
//! child process on a data directory, is killed (SIGKILL, no shutdown) while requests are in
//! flight, and restarts on the same directory and port. The producer retries every request
//! that got no answer, or a 5xx, with the same sequence; at the end the partition holds every
//! entry exactly once, in order.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

mod common;

use common::BIN;
/// How many times the server is killed.
const KILLS: u64 = 12;
const PARTITION: &str = "/v1/namespaces/default/streams/crashy/partitions/0";

fn start(data: &Path, port: u16) -> common::Spawned {
    let mut command = Command::new(BIN);
    command
        .args([
            "dev",
            "--grpc-addr",
            "off",
            "--kafka-addr",
            "off",
            "--http-addr",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data)
        .stdout(Stdio::null());
    common::spawn_listening(command, port, "lakestream dev")
}

/// One HTTP/1.1 request; `Err` when the connection failed or broke (the server was killed).
fn call(port: u16, method: &str, path: &str, body: &Value) -> std::io::Result<(u16, Value)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    let body = if body.is_null() { String::new() } else { body.to_string() };
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let broken = || std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "incomplete response");
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(broken)?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status: u16 = head
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(broken)?;
    let value = serde_json::from_slice(&raw[split + 4..]).map_err(|_| broken())?;
    Ok((status, value))
}

#[test]
fn an_idempotent_producer_retrying_through_kill_9_stores_every_entry_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let data: PathBuf = dir.path().join("data");
    let port = common::free_port();
    let server = Arc::new(Mutex::new(start(&data, port)));
    let (status, body) =
        call(port, "POST", "/v1/namespaces/default/streams", &json!({ "name": "crashy" })).unwrap();
    assert_eq!(status, 201, "{body}");

    // The killer: SIGKILL the server KILLS times while the producer runs, restarting it each time.
    let done_killing = Arc::new(AtomicBool::new(false));
    let killer = {
        let (server, done, data) = (server.clone(), done_killing.clone(), data.clone());
        std::thread::spawn(move || {
            for round in 0..KILLS {
                // Kill times spread over a request's life (about 5 to 40 ms here).
                std::thread::sleep(Duration::from_millis(150 + (round * 37) % 60));
                let mut spawned = server.lock().unwrap();
                spawned.child.kill().unwrap(); // SIGKILL
                spawned.child.wait().unwrap();
                *spawned = start(&data, port);
            }
            done.store(true, Ordering::SeqCst);
        })
    };

    // The producer: requests of 1 to 3 entries "e-{i}", each retried until it is answered.
    let (mut next_entry, mut sequence, mut request, mut retries) = (0u64, 0u64, 0u64, 0u64);
    let mut expected_offset = 0u64;
    while !done_killing.load(Ordering::SeqCst) || next_entry < 150 {
        let n = 1 + request % 3;
        let entries: Vec<Value> = (next_entry..next_entry + n)
            .map(|i| json!({ "payload_base64": BASE64.encode(format!("e-{i}")) }))
            .collect();
        let body = json!({ "entries": entries, "producer_id": "crash-test", "producer_sequence": sequence });
        let deadline = Instant::now() + Duration::from_secs(60);
        let answer = loop {
            assert!(Instant::now() < deadline, "request {request} got no answer within 60 s");
            match call(port, "POST", &format!("{PARTITION}/entries"), &body) {
                Ok((200, answer)) => break answer,
                Ok((status, answer)) if status >= 500 => {
                    retries += 1;
                    eprintln!("request {request}: {status} {answer}; retrying");
                }
                Ok((status, answer)) => panic!("request {request} refused: {status} {answer}"),
                Err(_) => retries += 1, // The server is down: retry once it is back.
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let offsets: Vec<u64> =
            answer["entries"].as_array().unwrap().iter().map(|e| e["offset"].as_u64().unwrap()).collect();
        let want: Vec<u64> = (expected_offset..expected_offset + n).collect();
        assert_eq!(offsets, want, "request {request}: {answer}");
        expected_offset += n;
        next_entry += n;
        sequence += n;
        request += 1;
    }
    killer.join().unwrap();
    assert!(retries > 0, "the kills should have interrupted some requests");

    // Every entry exactly once, in order.
    let mut stored = Vec::new();
    let mut offset = 0;
    while offset < next_entry {
        let (status, batch) =
            call(port, "GET", &format!("{PARTITION}/entries?offset={offset}"), &Value::Null).unwrap();
        assert_eq!(status, 200, "{batch}");
        for e in batch["entries"].as_array().unwrap() {
            let payload = BASE64.decode(e["payload_base64"].as_str().unwrap()).unwrap();
            stored.push(String::from_utf8(payload).unwrap());
        }
        offset = batch["next_offset"].as_u64().unwrap();
    }
    let want: Vec<String> = (0..next_entry).map(|i| format!("e-{i}")).collect();
    assert_eq!(stored, want);
    let (_, offsets) = call(port, "GET", &format!("{PARTITION}/offsets"), &Value::Null).unwrap();
    assert_eq!(offsets["next_offset"], next_entry, "nothing beyond the acknowledged entries");
    eprintln!("{request} requests, {next_entry} entries, {retries} retries through {KILLS} kills");
    let mut spawned = server.lock().unwrap();
    let _ = spawned.child.kill();
    let _ = spawned.child.wait();
}
