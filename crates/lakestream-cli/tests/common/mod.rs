//! Running the `lakestream` binary in tests: services as child processes on loopback, and
//! client commands isolated from the user's environment and profile file.
#![allow(dead_code)] // each test binary uses its own part

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_lakestream");

/// A free loopback port, below the ephemeral range where outgoing connections could take it
/// before the child binds it.
pub fn free_port() -> u16 {
    lakestream_meta_oxia::testkit::loopback_port()
}

/// A child process started by [`spawn_listening`], its standard error kept in a file so that
/// a failure can show it and a chatty process never blocks on a full pipe.
pub struct Spawned {
    pub child: Child,
    /// Where its standard error goes.
    pub stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl Spawned {
    /// Its standard error so far.
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Starts `command` with its standard error in a file, and waits until it listens on `port`.
/// If it exits first, or does not listen within 30 s, fails with what it printed there.
pub fn spawn_listening(mut command: Command, port: u16, what: &str) -> Spawned {
    let dir = tempfile::tempdir().unwrap();
    let stderr = dir.path().join("stderr.log");
    let file = std::fs::File::create(&stderr).unwrap();
    let mut child =
        command.stderr(Stdio::from(file)).spawn().unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let printed = || tail(&std::fs::read_to_string(&stderr).unwrap_or_default(), 40);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{what} exited ({status}) before listening on 127.0.0.1:{port}; its stderr:\n{}",
                printed()
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not listen on 127.0.0.1:{port} within 30 s; its stderr:\n{}", printed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Spawned { child, stderr, _dir: dir }
}

/// Waits until something listens on `port`.
pub fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port} within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A service process, killed when dropped.
pub struct Service {
    pub child: Child,
    pub port: u16,
    /// Where its standard error goes.
    pub stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl Service {
    /// `lakestream dev` with its data under `dir`, HTTP on `port`, no gRPC.
    pub fn dev(dir: &Path, port: u16) -> Service {
        let mut c = Command::new(BIN);
        c.args([
            "dev",
            "--grpc-addr",
            "off",
            "--kafka-addr",
            "off",
            "--http-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .current_dir(dir);
        Service::start(c, port, "lakestream dev")
    }

    /// `lakestream serve --config config`, listening on `port`.
    pub fn serve(config: &Path, port: u16) -> Service {
        let mut c = Command::new(BIN);
        c.args(["serve", "--config"]).arg(config);
        Service::start(c, port, "lakestream serve")
    }

    /// Starts `command` and waits until it listens on `port`; if it exits first, or does not
    /// listen in time, fails with what it printed.
    fn start(mut command: Command, port: u16, what: &str) -> Service {
        command.stdout(Stdio::null());
        let Spawned { child, stderr, _dir } = spawn_listening(command, port, what);
        Service { child, port, stderr, _dir }
    }

    /// Its plain-HTTP URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// kill -9.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A service configuration on the embedded store under `dir`, HTTP on `port`, plus `extra`.
pub fn service_config(dir: &Path, port: u16, extra: &str) -> PathBuf {
    let d = dir.display();
    let text = format!(
        "[http]\naddr = \"127.0.0.1:{port}\"\n\n[metadata]\nbackend = \"embedded\"\npath = \"{d}/metadata.redb\"\n\n\
         [storage.wal]\nbackend = \"local\"\ndir = \"{d}/objects\"\nroot = \"wal\"\n\n\
         [storage.compacted]\nbackend = \"local\"\ndir = \"{d}/objects\"\nroot = \"compacted\"\n\n{extra}"
    );
    let path = dir.join("service.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A client command, isolated: no profile file and none of the user's LAKESTREAM_* settings
/// unless `env` sets them.
pub fn client_command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("LAKESTREAM_") {
            c.env_remove(k);
        }
    }
    c.env("LAKESTREAM_CLI_CONFIG", "/nonexistent/lakestream-cli.toml");
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// Runs a client command with `stdin` and returns its output.
pub fn client(args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Output {
    let mut child = client_command(args, env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// Standard output and error as text.
pub fn texts(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}
