//! Physical baselines: PUT and GET throughput for 1, 4 and 16 MiB objects on the local
//! filesystem backend and on the S3 server given by `LAKESTREAM_TEST_S3_*`, in the same run,
//! with the S3/local ratio.
//!
//! ```text
//! source scripts/servers.sh && start_s3 $(mktemp -d)
//! cargo run --release -p lakestream-objstore-s3 --example objstore_bench [-- SECONDS_PER_CASE]
//! ```
//!
//! Each case writes fresh objects (write once) for about `SECONDS_PER_CASE` (default 0.5)
//! and then reads them back. Throughput is bytes moved over wall time, one request at a
//! time, so it measures latency-bound single-stream speed, not aggregate bandwidth.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lakestream_objstore::{LocalFsStore, ObjectPath, ObjectRoot, ObjectStore};
use lakestream_objstore_s3::{S3Store, testkit};

const MIB: usize = 1024 * 1024;

struct Rates {
    put_mb_s: f64,
    get_mb_s: f64,
}

async fn measure(store: &dyn ObjectStore, run: &str, size: usize, budget: Duration) -> Rates {
    let body: Bytes = (0..size).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into();
    let mut paths = Vec::new();
    let started = Instant::now();
    while started.elapsed() < budget || paths.len() < 2 {
        let path = ObjectPath::new(format!("{run}/{size}/{}", paths.len())).expect("path");
        store.put(&path, body.clone()).await.expect("put");
        paths.push(path);
    }
    let put_time = started.elapsed();
    let started = Instant::now();
    for path in &paths {
        let read = store.get(path).await.expect("get");
        assert_eq!(read.len(), size);
    }
    let get_time = started.elapsed();
    store.delete_many(&paths).await.expect("cleanup");
    let megabytes = (paths.len() * size) as f64 / 1e6;
    Rates { put_mb_s: megabytes / put_time.as_secs_f64(), get_mb_s: megabytes / get_time.as_secs_f64() }
}

#[tokio::main]
async fn main() {
    let seconds: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0.5);
    let budget = Duration::from_secs_f64(seconds);
    // The S3 server of the tests (`LAKESTREAM_TEST_S3_*`; instructions when unset).
    let s3 = S3Store::new(testkit::server_config()).expect("S3 config");
    let dir = std::env::temp_dir().join(format!("lakestream-objstore-bench-{}", std::process::id()));
    let local = LocalFsStore::new(&dir, ObjectRoot::parse("bench").expect("root")).expect("local store");
    let stores: [(&str, Arc<dyn ObjectStore>); 2] = [("local-fs", Arc::new(local)), ("s3", Arc::new(s3))];
    let run = format!("bench-{}", std::process::id());

    println!("{:>6} {:>9} {:>10} {:>10}", "size", "backend", "PUT MB/s", "GET MB/s");
    for size_mib in [1, 4, 16] {
        let mut rates = Vec::new();
        for (name, store) in &stores {
            let r = measure(store.as_ref(), &run, size_mib * MIB, budget).await;
            println!("{:>4}MiB {name:>9} {:>10.1} {:>10.1}", size_mib, r.put_mb_s, r.get_mb_s);
            rates.push(r);
        }
        println!(
            "{:>6} {:>9} {:>10.3} {:>10.3}",
            "",
            "s3/local",
            rates[1].put_mb_s / rates[0].put_mb_s,
            rates[1].get_mb_s / rates[0].get_mb_s
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
