//! Real Oxia servers for tests (feature `testkit`): the shared server that `scripts/test`
//! starts, and throw-away `oxia standalone` processes for tests that need a fresh store, a
//! server configured otherwise, or one to kill and restart.
//!
//! Nothing here fakes Oxia: a test that needs a server and finds none fails with instructions
//! (it never skips).
//!
//! | variable | set by `scripts/test` to |
//! |---|---|
//! | `LAKESTREAM_TEST_OXIA` | `host:port` of the shared `oxia standalone --shards 4` |
//! | `LAKESTREAM_TEST_OXIA_BIN` | the Oxia binary, for [`StandaloneOxia`] |

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{OxiaConfig, OxiaStore};

const HOW_TO_RUN: &str = "run `scripts/test`, which builds and starts Oxia 0.17.1, or start \
     `oxia standalone --shards 4` yourself (e.g. `docker compose up oxia`)";

/// The shared server's address, from `LAKESTREAM_TEST_OXIA`. Panics with instructions when it
/// is not set.
pub fn shared_address() -> String {
    match std::env::var("LAKESTREAM_TEST_OXIA") {
        Ok(address) if !address.trim().is_empty() => address,
        _ => panic!(
            "this test needs a real Oxia server: LAKESTREAM_TEST_OXIA=host:port is not set; {HOW_TO_RUN}"
        ),
    }
}

/// A store on the shared server (request timeout 10 s).
pub async fn shared_store() -> OxiaStore {
    let address = shared_address();
    let config =
        OxiaConfig { request_timeout: Duration::from_secs(10), ..OxiaConfig::new([address.clone()]) };
    OxiaStore::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect to the Oxia server at {address}: {e}"))
}

/// The Oxia binary, from `LAKESTREAM_TEST_OXIA_BIN`. Panics with instructions when it is not
/// set.
pub fn binary() -> PathBuf {
    match std::env::var("LAKESTREAM_TEST_OXIA_BIN") {
        Ok(path) if !path.trim().is_empty() => PathBuf::from(path),
        _ => {
            panic!("this test starts its own Oxia server: LAKESTREAM_TEST_OXIA_BIN is not set; {HOW_TO_RUN}")
        }
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port");
    listener.local_addr().expect("a local address").port()
}

/// An `oxia standalone` process of the test's own, on a free loopback port over a temporary
/// directory (no fsync), killed when dropped. It can be killed with SIGKILL and restarted on
/// the same port and directories.
#[derive(Debug)]
pub struct StandaloneOxia {
    child: Option<Child>,
    address: String,
    args: Vec<String>,
    dir: tempfile::TempDir,
}

impl StandaloneOxia {
    /// Starts a server with `shards` shards and the extra arguments `extra` (e.g.
    /// `["--key-sorting", "natural"]`), and waits until it accepts connections.
    pub async fn start(shards: u32, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory for Oxia");
        let address = format!("127.0.0.1:{}", free_port());
        let metrics = format!("127.0.0.1:{}", free_port());
        let mut args: Vec<String> = ["standalone", "-p", &address, "-m", &metrics, "-s", &shards.to_string()]
            .map(str::to_owned)
            .to_vec();
        for (flag, sub) in [("--data-dir", "db"), ("--wal-dir", "wal")] {
            args.push(flag.to_owned());
            args.push(dir.path().join(sub).display().to_string());
        }
        args.push("--wal-sync-data=false".to_owned());
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let mut server = Self { child: None, address, args, dir };
        server.spawn_and_wait().await;
        server
    }

    async fn spawn_and_wait(&mut self) {
        let binary = binary();
        let log = std::fs::File::create(self.dir.path().join("oxia.log")).expect("create the Oxia log");
        let child = Command::new(&binary)
            .args(&self.args)
            .stdout(Stdio::from(log.try_clone().expect("clone the log handle")))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        self.child = Some(child);
        for _ in 0..600 {
            if tokio::net::TcpStream::connect(&self.address).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("oxia {:?} did not listen on {} within 30 s; log:\n{}", self.args, self.address, self.log());
    }

    /// `host:port` of the server.
    pub fn address(&self) -> String {
        self.address.clone()
    }

    /// A store on this server (request timeout 10 s).
    pub async fn store(&self) -> OxiaStore {
        let config =
            OxiaConfig { request_timeout: Duration::from_secs(10), ..OxiaConfig::new([self.address()]) };
        OxiaStore::connect(config).await.unwrap_or_else(|e| panic!("connect to {}: {e}", self.address))
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server with SIGKILL (no shutdown) and reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directories.
    pub async fn restart(&mut self) {
        self.kill9();
        self.spawn_and_wait().await;
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("oxia.log")).unwrap_or_default()
    }
}

impl Drop for StandaloneOxia {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A TCP relay in front of a server: it forwards bytes both ways, and on request holds back
/// the server's answers, cuts every connection, or stops accepting. It understands nothing
/// of gRPC; it lets tests break the transport at chosen moments.
pub use relay::Relay;

mod relay {
    use std::sync::{Arc, Mutex, PoisonError};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::watch;
    use tokio::task::JoinHandle;

    /// The kill switches of the connections accepted so far, by accept order.
    type Connections = Arc<Mutex<Vec<watch::Sender<bool>>>>;

    /// See the re-export's documentation.
    #[derive(Debug)]
    pub struct Relay {
        address: String,
        hold: watch::Sender<bool>,
        upstream: watch::Sender<String>,
        connections: Connections,
        acceptor: JoinHandle<()>,
    }

    impl Relay {
        /// Starts relaying from a free loopback port to `upstream` (`host:port`).
        pub async fn start(upstream: &str) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the relay");
            let address = listener.local_addr().expect("relay address").to_string();
            let (hold, _) = watch::channel(false);
            let (upstream, upstream_rx) = watch::channel(upstream.to_owned());
            let connections = Connections::default();
            let (hold_rx, accepted) = (hold.subscribe(), Arc::clone(&connections));
            let acceptor = tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let target = upstream_rx.borrow().clone();
                    let Ok(server) = TcpStream::connect(&target).await else { continue };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let (kill, killed) = watch::channel(false);
                    accepted.lock().unwrap_or_else(PoisonError::into_inner).push(kill);
                    tokio::spawn(pump(client_read, server_write, None, killed.clone()));
                    tokio::spawn(pump(server_read, client_write, Some(hold_rx.clone()), killed));
                }
            });
            Self { address, hold, upstream, connections, acceptor }
        }

        /// `host:port` to dial instead of the server.
        pub fn address(&self) -> String {
            self.address.clone()
        }

        /// Sends new connections to `upstream` from now on (open ones are left alone).
        pub fn redirect(&self, upstream: &str) {
            self.upstream.send_replace(upstream.to_owned());
        }

        /// Holds back (or releases) everything the server sends.
        pub fn hold_answers(&self, hold: bool) {
            self.hold.send_replace(hold);
        }

        /// How many connections were accepted so far (cut or not).
        pub fn accepted(&self) -> usize {
            self.connections.lock().unwrap_or_else(PoisonError::into_inner).len()
        }

        /// Drops every open connection; new ones are still accepted.
        pub fn cut(&self) {
            self.cut_from(0);
        }

        /// Drops the open connections accepted `first`-th or later (0-based, in accept
        /// order); earlier ones and new ones are left alone.
        pub fn cut_from(&self, first: usize) {
            for kill in self.connections.lock().unwrap_or_else(PoisonError::into_inner).iter().skip(first) {
                kill.send_replace(true);
            }
        }

        /// Drops every connection and refuses new ones.
        pub fn shut_down(&self) {
            self.acceptor.abort();
            self.cut();
        }
    }

    impl Drop for Relay {
        fn drop(&mut self) {
            self.shut_down();
        }
    }

    /// Copies `from` to `to` until either side closes or the connection is killed. With
    /// `hold`, each chunk waits while the flag is set.
    async fn pump(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        mut hold: Option<watch::Receiver<bool>>,
        mut killed: watch::Receiver<bool>,
    ) {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = tokio::select! {
                read = from.read(&mut buffer) => read,
                _ = killed.wait_for(|k| *k) => return,
            };
            let n = match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if let Some(hold) = hold.as_mut() {
                tokio::select! {
                    released = hold.wait_for(|held| !*held) => if released.is_err() { return },
                    _ = killed.wait_for(|k| *k) => return,
                }
            }
            if to.write_all(&buffer[..n]).await.is_err() {
                return;
            }
        }
    }
}
