//! The client commands against a real `lakestream` service process: streaming produce,
//! binary input, where consume starts and stops, exit codes, the administrative commands,
//! a server with TLS and tokens reached through a profile, and `--follow` riding through a
//! server restart.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{Service, client, client_command, free_port, service_config, texts};

const TLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../lakestream-server/tests/fixtures/tls");

fn ok(args: &[&str], stdin: &[u8], url: &str) -> String {
    let mut all = args.to_vec();
    all.extend(["--url", url]);
    let out = client(&all, stdin, &[]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{args:?}: {}\n{stderr}", out.status);
    stdout
}

fn fails(args: &[&str], stdin: &[u8], url: &str) -> (i32, String) {
    let mut all = args.to_vec();
    all.extend(["--url", url]);
    let out = client(&all, stdin, &[]);
    (out.status.code().unwrap_or(-1), texts(&out).1)
}

#[test]
fn produce_sends_each_line_as_it_is_read_not_at_the_end_of_input() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Service::dev(dir.path(), free_port());
    let url = dev.url();
    ok(&["stream", "create", "tail"], b"", &url);
    let mut producer = client_command(&["produce", "tail", "--url", &url], &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = producer.stdin.take().unwrap();
    stdin.write_all(b"first\n").unwrap();
    stdin.flush().unwrap();
    // The input stays open: the entry must arrive anyway.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = ok(&["consume", "tail"], b"", &url);
        if got == "first\n" {
            break;
        }
        assert!(Instant::now() < deadline, "the first line was not sent while input stayed open: {got:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    stdin.write_all(b"second\n").unwrap();
    drop(stdin);
    let out = producer.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", texts(&out).1);
    assert_eq!(ok(&["consume", "tail"], b"", &url), "first\nsecond\n");
}

#[test]
fn binary_entries_round_trip_through_length_prefixed_frames() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Service::dev(dir.path(), free_port());
    let url = dev.url();
    ok(&["stream", "create", "bin"], b"", &url);
    let payloads: [&[u8]; 3] = [b"\x00\x01\n\xff\xfe", b"plain", &[0xc3, 0x28, b'\r', b'\n']];
    let mut input = Vec::new();
    for p in payloads {
        input.extend_from_slice(&(p.len() as u32).to_be_bytes());
        input.extend_from_slice(p);
    }
    ok(&["produce", "bin", "--length-prefixed", "-q"], &input, &url);
    let json = ok(&["consume", "bin", "--format", "json"], b"", &url);
    let got: Vec<Vec<u8>> = json
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            base64::engine::general_purpose::STANDARD.decode(v["payload_base64"].as_str().unwrap()).unwrap()
        })
        .collect();
    assert_eq!(got, payloads.map(<[u8]>::to_vec));
    // Raw output writes the bytes as they are, each followed by the delimiter.
    let out = client(&["consume", "bin", "-D", "\\0", "--url", &url], b"", &[]);
    let mut expected = Vec::new();
    for p in payloads {
        expected.extend_from_slice(p);
        expected.push(0);
    }
    assert_eq!(out.stdout, expected);
    // A custom delimiter cuts standard input.
    ok(&["stream", "create", "records"], b"", &url);
    ok(&["produce", "records", "-D", "|"], b"a|b\nc|", &url);
    assert_eq!(ok(&["consume", "records"], b"", &url), "a\nb\nc\n");
}

#[test]
fn consume_starts_at_an_offset_the_end_or_a_time_and_stops_after_n() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Service::dev(dir.path(), free_port());
    let url = dev.url();
    ok(&["stream", "create", "s"], b"", &url);
    ok(&["produce", "s"], b"a\nb\n", &url);
    std::thread::sleep(Duration::from_millis(30));
    ok(&["produce", "s"], b"c\nd\ne\n", &url);
    assert_eq!(ok(&["consume", "s", "-n", "2"], b"", &url), "a\nb\n");
    assert_eq!(ok(&["consume", "s", "--offset", "3"], b"", &url), "d\ne\n");
    assert_eq!(ok(&["consume", "s", "--from-end"], b"", &url), "");
    // The time of "c" (as the service stamped it) starts at "c".
    let json = ok(&["consume", "s", "--offset", "2", "-n", "1", "--format", "json"], b"", &url);
    let c: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    let t = c["timestamp_ms"].as_i64().unwrap().to_string();
    let b_time = {
        let j = ok(&["consume", "s", "--offset", "1", "-n", "1", "--format", "json"], b"", &url);
        serde_json::from_str::<serde_json::Value>(j.trim()).unwrap()["timestamp_ms"].as_i64().unwrap()
    };
    assert!(b_time < c["timestamp_ms"].as_i64().unwrap(), "two produce calls 30 ms apart share a time");
    assert_eq!(ok(&["consume", "s", "--from-time", &t], b"", &url), "c\nd\ne\n");
    assert_eq!(ok(&["consume", "s", "--from-time", "0"], b"", &url), "a\nb\nc\nd\ne\n");
    assert_eq!(ok(&["consume", "s", "--from-time", "4102444800000"], b"", &url), "");
    // A group starts at its committed offset and commits what it printed.
    assert_eq!(ok(&["consume", "s", "--group", "g1", "-n", "2"], b"", &url), "a\nb\n");
    assert_eq!(ok(&["consume", "s", "--group", "g1", "-n", "1"], b"", &url), "c\n");
    assert_eq!(ok(&["consume", "s", "-g", "g1"], b"", &url), "d\ne\n");
    assert_eq!(ok(&["consume", "s", "-g", "g1"], b"", &url), "", "nothing left for the group");
    assert_eq!(ok(&["groups", "list"], b"", &url), "g1\n");
    let lag = ok(&["groups", "offsets", "g1", "s"], b"", &url);
    let cols: Vec<&str> = lag.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(cols, ["0", "5", "5", "0"], "{lag}");
    let table = ok(&["consume", "s", "--format", "table", "-n", "1"], b"", &url);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("OFFSET") && lines[1].starts_with("0 ") && lines[1].ends_with(" a"),
        "{table}"
    );
}

#[test]
fn failures_exit_with_their_documented_status_naming_what_failed() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Service::dev(dir.path(), free_port());
    let url = dev.url();
    // 5: not found.
    let (code, err) = fails(&["consume", "missing"], b"", &url);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("404"), "{err}");
    // Produce names every entry that was not appended.
    let (code, err) = fails(&["produce", "missing"], b"one\ntwo\n", &url);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("not appended: line 1") && err.contains("not appended: line 2"), "{err}");
    // 2: usage and configuration.
    assert_eq!(fails(&["consume", "s"], b"", "ftp://x").0, 2);
    assert_eq!(fails(&["produce", "s", "-D", "\\q"], b"", &url).0, 2);
    let mut truncated = 9u32.to_be_bytes().to_vec();
    truncated.extend_from_slice(b"abc");
    ok(&["stream", "create", "s"], b"", &url);
    let (code, err) = fails(&["produce", "s", "--length-prefixed"], &truncated, &url);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("announces 9"), "{err}");
    // 1: nothing listens there.
    let (code, err) = fails(&["stream", "list"], b"", &format!("http://127.0.0.1:{}", free_port()));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("Connection refused") || err.contains("connect"), "{err}");
}

#[test]
fn namespace_describe_offsets_and_trim_commands() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Service::dev(dir.path(), free_port());
    let url = dev.url();
    ok(&["namespace", "create", "team a"], b"", &url);
    assert!(ok(&["namespace", "list"], b"", &url).lines().any(|l| l == "team a"));
    ok(&["stream", "create", "orders", "-N", "team a", "--partitions", "2"], b"", &url);
    ok(&["produce", "orders", "-N", "team a", "-p", "1"], b"x\ny\nz\n", &url);
    let described = ok(&["describe", "orders", "-N", "team a"], b"", &url);
    assert!(described.contains("partitions  2"), "{described}");
    let row = described.lines().find(|l| l.starts_with("1 ")).expect("partition 1's row");
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!((cols[2], cols[3]), ("0", "3"), "{described}");
    let trimmed = ok(&["trim", "orders", "-N", "team a", "-p", "1", "--through", "0"], b"", &url);
    assert!(trimmed.contains("trim marker 0"), "{trimmed}");
    let offsets = ok(&["offsets", "orders", "-N", "team a", "-p", "1"], b"", &url);
    let cols: Vec<&str> = offsets.lines().nth(1).unwrap().split_whitespace().collect();
    // A soft trim moves the marker; the first offset moves when the compactor hard-trims.
    assert_eq!(cols, ["1", "0", "3", "0"], "{offsets}");
    assert_eq!(ok(&["offsets", "orders", "-N", "team a"], b"", &url).lines().count(), 3);
    let updated =
        ok(&["stream", "update", "orders", "-N", "team a", "--set", "retention_ms=60000"], b"", &url);
    assert!(updated.contains("\"retention_ms\":\"60000\""), "{updated}");
    assert!(
        ok(&["describe", "orders", "-N", "team a"], b"", &url).contains("property    retention_ms = 60000")
    );
    let (code, err) =
        fails(&["stream", "update", "orders", "-N", "team a", "--set", "retention_bytes=lots"], b"", &url);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("properties.retention_bytes"), "{err}");
    ok(&["stream", "update", "orders", "-N", "team a", "--unset", "retention_ms"], b"", &url);
    let (code, err) = fails(&["namespace", "delete", "team a"], b"", &url);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("409") && err.contains("not empty"), "{err}");
    ok(&["stream", "drop", "orders", "-N", "team a"], b"", &url);
    ok(&["namespace", "delete", "team a"], b"", &url);
    assert!(!ok(&["namespace", "list"], b"", &url).lines().any(|l| l == "team a"));
}

#[test]
fn a_server_with_tls_and_tokens_is_reached_with_flags_or_a_profile() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let extra = format!(
        "[tls]\ncert_file = \"{TLS}/cert.pem\"\nkey_file = \"{TLS}/key.pem\"\n\n\
         [[auth.tokens]]\nname = \"ci\"\ntoken = \"s3cret-token-0123456789\"\nnamespaces = {{ \"*\" = \"admin\" }}\n"
    );
    let config = service_config(dir.path(), port, &extra);
    let _service = Service::serve(&config, port);
    let url = format!("https://127.0.0.1:{port}");
    let ca = format!("{TLS}/ca.pem");
    let out = client(
        &["stream", "create", "s", "--url", &url, "--ca-file", &ca, "--token", "s3cret-token-0123456789"],
        b"",
        &[],
    );
    assert!(out.status.success(), "{}", texts(&out).1);
    // The token from the environment.
    let env = [("LAKESTREAM_TOKEN", "s3cret-token-0123456789"), ("LAKESTREAM_CA_FILE", ca.as_str())];
    let out = client(&["produce", "s", "--url", &url], b"over tls\n", &env);
    assert!(out.status.success(), "{}", texts(&out).1);
    // 4: no token, or a wrong one.
    let out = client(&["stream", "list", "--url", &url, "--ca-file", &ca], b"", &[]);
    assert_eq!(out.status.code(), Some(4), "{}", texts(&out).1);
    let out = client(&["stream", "list", "--url", &url, "--ca-file", &ca, "--token", "wrong"], b"", &[]);
    assert_eq!(out.status.code(), Some(4), "{}", texts(&out).1);
    // A server certificate nobody vouches for is refused.
    let out = client(&["stream", "list", "--url", &url, "--token", "s3cret-token-0123456789"], b"", &[]);
    let (_, err) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    // A profile supplies all three, the token through token_env.
    std::fs::copy(&ca, dir.path().join("ca.pem")).unwrap();
    let profile = dir.path().join("cli.toml");
    std::fs::write(
        &profile,
        format!("default_profile = \"secure\"\n[profiles.secure]\nurl = \"{url}\"\ntoken_env = \"SECURE_TOKEN\"\nca_file = \"ca.pem\"\n"),
    )
    .unwrap();
    let profile = profile.display().to_string();
    let env = [("LAKESTREAM_CLI_CONFIG", profile.as_str()), ("SECURE_TOKEN", "s3cret-token-0123456789")];
    let out = client(&["consume", "s"], b"", &env);
    assert!(out.status.success(), "{}", texts(&out).1);
    assert_eq!(texts(&out).0, "over tls\n");
    let env = [("LAKESTREAM_CLI_CONFIG", profile.as_str())];
    let out = client(&["consume", "s"], b"", &env);
    assert_eq!(out.status.code(), Some(2));
    assert!(texts(&out).1.contains("SECURE_TOKEN"), "{}", texts(&out).1);
}

#[test]
fn follow_resumes_after_the_server_is_killed_and_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut dev = Service::dev(dir.path(), port);
    let url = dev.url();
    ok(&["stream", "create", "f"], b"", &url);
    ok(&["produce", "f"], b"before\n", &url);
    let mut consumer = client_command(&["consume", "f", "--follow", "--url", &url], &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = consumer.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    assert_eq!(rx.recv_timeout(Duration::from_secs(20)).unwrap(), "before");
    dev.kill();
    std::thread::sleep(Duration::from_millis(300));
    let _dev = Service::dev(dir.path(), port);
    ok(&["produce", "f"], b"after\n", &url);
    let got = rx.recv_timeout(Duration::from_secs(30));
    let _ = consumer.kill();
    let _ = consumer.wait();
    assert_eq!(got.unwrap(), "after", "--follow did not resume after the restart");
}
