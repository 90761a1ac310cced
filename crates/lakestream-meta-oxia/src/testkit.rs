//! Real Oxia servers for tests (feature `testkit`): the shared server that `scripts/test`
//! starts, throw-away `oxia standalone` processes for tests that need a fresh store, a
//! server configured otherwise, or one to kill and restart, and [`OxiaCluster`], the shape
//! production runs (a coordinator and replicating data servers) on loopback.
//!
//! Nothing here fakes Oxia: a test that needs a server and finds none fails with instructions
//! (it never skips).
//!
//! | variable | set by `scripts/test` to |
//! |---|---|
//! | `LAKESTREAM_TEST_OXIA` | `host:port` of the shared `oxia standalone --shards 4` |
//! | `LAKESTREAM_TEST_OXIA_BIN` | the Oxia binary, for [`StandaloneOxia`] |

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::{OxiaClient, OxiaConfig, OxiaStore, ShardId, ShardMap};

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
    /// A port taken between choosing and binding makes the process exit: it is started again
    /// on other ports (a few times).
    pub async fn start(shards: u32, extra: &[&str]) -> Self {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let dir = tempfile::tempdir().expect("a temporary directory for Oxia");
            let address = format!("127.0.0.1:{}", loopback_port());
            let metrics = format!("127.0.0.1:{}", loopback_port());
            let mut args: Vec<String> =
                ["standalone", "-p", &address, "-m", &metrics, "-s", &shards.to_string()]
                    .map(str::to_owned)
                    .to_vec();
            for (flag, sub) in [("--data-dir", "db"), ("--wal-dir", "wal")] {
                args.push(flag.to_owned());
                args.push(dir.path().join(sub).display().to_string());
            }
            args.push("--wal-sync-data=false".to_owned());
            args.extend(extra.iter().map(|s| (*s).to_owned()));
            let mut server = Self { child: None, address, args, dir };
            match server.spawn_and_wait().await {
                Ok(()) => return server,
                Err(exited) if attempts < 5 && server.log().contains("address already in use") => {
                    eprintln!("oxia {exited} (a port was taken); starting it on other ports");
                }
                Err(exited) => panic!("oxia {:?} {exited}; log:\n{}", server.args, server.log()),
            }
        }
    }

    /// Starts the process and waits until it listens; `Err` when it exited first.
    async fn spawn_and_wait(&mut self) -> Result<(), String> {
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
                return Ok(());
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.child = None;
                return Err(format!("exited ({status}) before listening on {}", self.address));
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
        if let Err(exited) = self.spawn_and_wait().await {
            panic!("oxia {:?} {exited} on restart; log:\n{}", self.args, self.log());
        }
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

/// A free loopback port below Linux's ephemeral range (32768–60999 by default) for a server
/// process of a test. A port handed out by the kernel (port 0) comes from that range, where every
/// outgoing connection also takes its local port; between probing it and the Oxia process
/// binding it, the test's own connections could take it, and an Oxia process that cannot
/// bind one of its ports exits. Ports are never handed out twice by one test process.
pub fn loopback_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..1000 {
        // Randomly seeded, so that concurrent test processes rarely probe the same ports.
        let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
        let port = 20_000 + (random % 12_000) as u16;
        if !handed_out.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.push(port);
            return port;
        }
    }
    panic!("no free loopback port in 20000..32000");
}

/// How long a cluster process gets to open its port, and the cluster to elect every leader.
const CLUSTER_START_TIMEOUT: Duration = Duration::from_secs(30);

/// One process of an [`OxiaCluster`]: its command line, the address that shows it is up, and
/// its log file (stdout and stderr).
#[derive(Debug)]
struct ClusterProcess {
    name: String,
    args: Vec<String>,
    listen: String,
    log: PathBuf,
    child: Option<Child>,
}

impl ClusterProcess {
    /// Starts the process, appending to its log (a restart keeps the earlier lines).
    fn spawn(&mut self) {
        let binary = binary();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap_or_else(|e| panic!("open {}: {e}", self.log.display()));
        let child = Command::new(&binary)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("clone the log handle")))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("start {} ({}): {e}", self.name, binary.display()));
        self.child = Some(child);
    }

    /// Waits until the process accepts connections on its listen address; panics with its
    /// log if it exits or does not listen in time.
    async fn wait_listening(&mut self) {
        let deadline = tokio::time::Instant::now() + CLUSTER_START_TIMEOUT;
        while tokio::time::Instant::now() < deadline {
            if tokio::net::TcpStream::connect(&self.listen).await.is_ok() {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "{} exited ({status}) before listening on {}; log:\n{}",
                    self.name,
                    self.listen,
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "{} did not listen on {} within {CLUSTER_START_TIMEOUT:?}; log:\n{}",
            self.name,
            self.listen,
            self.log()
        );
    }

    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A real Oxia cluster on loopback, the shape production runs: `oxia coordinator` and
/// `servers` `oxia server` data servers, namespace `default` with a replication factor and an
/// initial shard count, every port a free one on 127.0.0.1, every process with its own
/// directories under one temporary directory (no fsync) and its log there. Every process is
/// killed when the cluster is dropped; if that happens during a panic, or
/// `LAKESTREAM_KEEP_OXIA_CLUSTER` is set, the directory is kept and its path printed, for the
/// logs.
///
/// The coordinator keeps its metadata in files (`metadata/cluster.yaml`, the cluster
/// configuration, and `metadata/cluster-status.json`, which it writes); its own settings are
/// `coordinator.yaml`. A data server needs no configuration: the coordinator reaches it on its
/// internal address and assigns it shards.
///
/// Leaders are seen through an observer [`OxiaClient`] that follows the shard assignments.
#[derive(Debug)]
pub struct OxiaCluster {
    coordinator: ClusterProcess,
    servers: Vec<ClusterProcess>,
    /// The data servers' public addresses, by index.
    public: Vec<String>,
    observer: Option<OxiaClient>,
    // Last: removed after the processes are killed.
    dir: tempfile::TempDir,
}

impl OxiaCluster {
    /// Starts three data servers, replication factor 3, four shards, and waits until every
    /// shard has a leader.
    pub async fn start() -> Self {
        Self::start_with(3, 3, 4).await
    }

    /// Starts `servers` data servers and a coordinator for namespace `default` with
    /// `replication_factor` and `shards` initial shards, and waits until every shard has a
    /// leader.
    pub async fn start_with(servers: usize, replication_factor: u32, shards: u32) -> Self {
        assert!(servers >= 1 && (1..=servers).contains(&(replication_factor as usize)) && shards >= 1);
        let dir = tempfile::tempdir().expect("a temporary directory for the Oxia cluster");
        let loopback = || format!("127.0.0.1:{}", loopback_port());
        let mut cluster_yaml = format!(
            "namespaces:\n  - name: default\n    initialShardCount: {shards}\n    replicationFactor: {replication_factor}\nservers:\n"
        );
        let mut processes = Vec::with_capacity(servers);
        let mut public = Vec::with_capacity(servers);
        for index in 0..servers {
            let (public_addr, internal_addr, metrics_addr) = (loopback(), loopback(), loopback());
            cluster_yaml.push_str(&format!("  - public: {public_addr}\n    internal: {internal_addr}\n"));
            let server_dir = dir.path().join(format!("server-{index}"));
            let mut args: Vec<String> =
                ["server", "--log-json", "-p", &public_addr, "-i", &internal_addr, "-m", &metrics_addr]
                    .map(str::to_owned)
                    .to_vec();
            for (flag, sub) in [("--data-dir", "db"), ("--wal-dir", "wal")] {
                args.push(flag.to_owned());
                args.push(server_dir.join(sub).display().to_string());
            }
            args.push("--wal-sync-data=false".to_owned());
            processes.push(ClusterProcess {
                name: format!("oxia server {index}"),
                args,
                listen: public_addr.clone(),
                log: dir.path().join(format!("server-{index}.log")),
                child: None,
            });
            public.push(public_addr);
        }
        let metadata = dir.path().join("metadata");
        std::fs::create_dir_all(&metadata).expect("create the coordinator's metadata directory");
        std::fs::write(metadata.join("cluster.yaml"), cluster_yaml).expect("write cluster.yaml");
        let (coordinator_public, coordinator_internal, coordinator_metrics) =
            (loopback(), loopback(), loopback());
        let coordinator_yaml = format!(
            "server:\n  public:\n    bindAddress: {coordinator_public}\n  internal:\n    bindAddress: {coordinator_internal}\n\
             metadata:\n  providerName: file\n  file:\n    dir: {}\n\
             observability:\n  metric:\n    enabled: true\n    bindAddress: {coordinator_metrics}\n",
            metadata.display()
        );
        let coordinator_conf = dir.path().join("coordinator.yaml");
        std::fs::write(&coordinator_conf, coordinator_yaml).expect("write coordinator.yaml");
        let coordinator = ClusterProcess {
            name: "oxia coordinator".to_owned(),
            args: vec![
                "coordinator".to_owned(),
                "--log-json".to_owned(),
                "--sconfig".to_owned(),
                coordinator_conf.display().to_string(),
            ],
            listen: coordinator_internal,
            log: dir.path().join("coordinator.log"),
            child: None,
        };
        let mut cluster = Self { coordinator, servers: processes, public, observer: None, dir };
        // Data servers first: the coordinator elects leaders as soon as it reaches them.
        for server in &mut cluster.servers {
            server.spawn();
        }
        for server in &mut cluster.servers {
            server.wait_listening().await;
        }
        cluster.coordinator.spawn();
        cluster.coordinator.wait_listening().await;
        cluster.observer = Some(cluster.connect_observer().await);
        cluster.wait_for_leaders(CLUSTER_START_TIMEOUT).await;
        for index in 0..servers {
            cluster.wait_until_initialized(index, CLUSTER_START_TIMEOUT).await;
        }
        cluster
    }

    /// Waits until data server `index` answers `GetShardAssignments`, i.e. the coordinator
    /// has pushed it the assignments. Until then it refuses clients, also as a shard's
    /// leader ("not initialized"); the coordinator retries a push it could not make with a
    /// back-off starting at 10 s, so a server (re)started before it was reachable can wait
    /// that long. Returns how long it waited; panics with the logs after `timeout`.
    pub async fn wait_until_initialized(&self, index: usize, timeout: Duration) -> Duration {
        let started = tokio::time::Instant::now();
        loop {
            let config = OxiaConfig {
                request_timeout: Duration::from_millis(500),
                ..OxiaConfig::new([self.public[index].clone()])
            };
            if OxiaClient::connect(config).await.is_ok() {
                return started.elapsed();
            }
            if started.elapsed() >= timeout {
                panic!(
                    "data server {index} ({}) was not initialized within {timeout:?}\n{}",
                    self.public[index],
                    self.logs_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A client on every data server, retried until the servers hand out assignments (they
    /// answer "not initialized" until the coordinator has reached them).
    async fn connect_observer(&self) -> OxiaClient {
        let deadline = tokio::time::Instant::now() + CLUSTER_START_TIMEOUT;
        loop {
            let config = OxiaConfig { request_timeout: Duration::from_secs(2), ..self.config() };
            match OxiaClient::connect(config).await {
                Ok(client) => return client,
                Err(error) if tokio::time::Instant::now() >= deadline => {
                    panic!("no shard assignments from the Oxia cluster: {error}\n{}", self.logs_tail(40))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// The data servers' public addresses, by server index.
    pub fn addresses(&self) -> Vec<String> {
        self.public.clone()
    }

    /// A running data server's public address, to bootstrap a client.
    pub fn bootstrap_address(&self) -> String {
        (0..self.servers.len())
            .find(|&i| self.is_running(i))
            .map(|i| self.public[i].clone())
            .expect("a running data server")
    }

    /// Client settings for every data server (request timeout 10 s).
    pub fn config(&self) -> OxiaConfig {
        OxiaConfig { request_timeout: Duration::from_secs(10), ..OxiaConfig::new(self.addresses()) }
    }

    /// A store on the cluster, with [`OxiaCluster::config`].
    pub async fn store(&self) -> OxiaStore {
        OxiaStore::connect(self.config()).await.unwrap_or_else(|e| panic!("connect to the Oxia cluster: {e}"))
    }

    /// The index of the data server whose public address is `address`.
    pub fn server_index(&self, address: &str) -> Option<usize> {
        self.public.iter().position(|a| a == address)
    }

    /// Whether data server `index` runs (it was not killed, or was restarted).
    pub fn is_running(&self, index: usize) -> bool {
        self.servers[index].child.is_some()
    }

    /// The shard map the cluster currently announces, as the observer client last saw it.
    pub fn shard_map(&self) -> Arc<ShardMap> {
        self.observer.as_ref().and_then(OxiaClient::shard_map).expect("the observer has a shard map")
    }

    /// The index of the data server leading `shard`, as last announced (it may have died
    /// since; see [`OxiaCluster::wait_for_leaders`]).
    pub fn leader_of(&self, shard: ShardId) -> Option<usize> {
        self.shard_map().shard(shard).and_then(|s| self.server_index(&s.leader))
    }

    /// Waits until every shard is announced with a leader that is a running data server, and
    /// returns the leaders (shard → server index). Panics with the logs after `timeout`.
    pub async fn wait_for_leaders(&self, timeout: Duration) -> BTreeMap<ShardId, usize> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let map = self.shard_map();
            let leaders: BTreeMap<ShardId, Option<usize>> =
                map.shards().iter().map(|s| (s.id, self.server_index(&s.leader))).collect();
            if leaders.values().all(|leader| leader.is_some_and(|i| self.is_running(i))) {
                return leaders.into_iter().filter_map(|(shard, leader)| Some((shard, leader?))).collect();
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "not every shard has a running leader after {timeout:?}: {leaders:?}\n{}",
                    self.logs_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The ensemble (replica set) of every shard, as server indexes, from the status the
    /// coordinator keeps in `metadata/cluster-status.json` (YAML, despite the name). Panics
    /// with the file's text when it cannot be read so.
    pub fn ensembles(&self) -> BTreeMap<ShardId, Vec<usize>> {
        let path = self.dir.path().join("metadata").join("cluster-status.json");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let mut ensembles: BTreeMap<ShardId, Vec<usize>> = BTreeMap::new();
        let (mut shard, mut in_ensemble) = (None, false);
        for line in text.lines() {
            let indent = line.len() - line.trim_start().len();
            let item = line.trim().trim_start_matches("- ");
            // `namespaces.<ns>.shards.<id>:` at depth 3, the shard's fields at depth 4.
            if indent == 12 && item.ends_with(':') {
                shard = item.trim_end_matches(':').parse::<ShardId>().ok();
                in_ensemble = false;
            } else if indent == 16 {
                in_ensemble = item == "ensemble:";
            } else if in_ensemble && let (Some(shard), Some(address)) = (shard, item.strip_prefix("public:"))
            {
                let index = self.server_index(address.trim()).unwrap_or_else(|| {
                    panic!(
                        "{}: unknown server {address} in shard {shard}'s ensemble:\n{text}",
                        path.display()
                    )
                });
                ensembles.entry(shard).or_default().push(index);
            }
        }
        let shards = self.shard_map().shards().len();
        assert_eq!(ensembles.len(), shards, "{}: not every shard's ensemble found:\n{text}", path.display());
        ensembles
    }

    /// Kills data server `index` with SIGKILL (no shutdown) and reaps it.
    pub fn kill9_server(&mut self, index: usize) {
        self.servers[index].kill9();
    }

    /// Starts data server `index` again on its ports and directories, and waits until it
    /// listens. The coordinator brings it back into its shards' ensembles by itself.
    pub async fn restart_server(&mut self, index: usize) {
        self.servers[index].kill9();
        self.servers[index].spawn();
        self.servers[index].wait_listening().await;
    }

    /// The process id of data server `index`, while it runs.
    pub fn server_pid(&self, index: usize) -> Option<u32> {
        self.servers[index].child.as_ref().map(Child::id)
    }

    /// The cluster's temporary directory (configuration, data, logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The command lines the cluster runs, one per process, for reports.
    pub fn command_lines(&self) -> Vec<String> {
        std::iter::once(&self.coordinator)
            .chain(&self.servers)
            .map(|p| format!("oxia {}", p.args.join(" ")))
            .collect()
    }

    /// The last `lines` lines of every process's log, for failure messages.
    pub fn logs_tail(&self, lines: usize) -> String {
        std::iter::once(&self.coordinator)
            .chain(&self.servers)
            .map(|p| {
                let log = p.log();
                let tail: Vec<&str> = log.lines().rev().take(lines).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {} ({}) ---\n{}\n", p.name, p.log.display(), tail.join("\n"))
            })
            .collect()
    }
}

impl Drop for OxiaCluster {
    fn drop(&mut self) {
        // The observer first, so nothing reconnects to processes being killed.
        self.observer = None;
        self.coordinator.kill9();
        for server in &mut self.servers {
            server.kill9();
        }
        if std::thread::panicking() || std::env::var_os("LAKESTREAM_KEEP_OXIA_CLUSTER").is_some() {
            self.dir.disable_cleanup(true);
            eprintln!("the Oxia cluster's directory (logs, data) is kept at {}", self.dir.path().display());
        }
    }
}
