//! Raw PUT and GET throughput of our stores on the S3 server (s3s-fs), Azurite and
//! fake-gcs-server, in the same run, as ratios to S3. The emulators are not the services:
//! the figures compare our client path and the local servers, not the clouds.
//!
//! ```text
//! source scripts/servers.sh && install_azurite && install_fake_gcs
//! D=$(mktemp -d) && start_s3 $D && start_azurite $D && start_fake_gcs $D
//! cargo run -p lakestream-objstore-cloud --example cloud_bench [-- SECONDS_PER_CASE]
//! ```
//!
//! Each case writes fresh objects for about `SECONDS_PER_CASE` (default 0.5), one request at a
//! time, then reads them back. GCS PUT is not measured: fake-gcs-server does not accept
//! object_store's XML-API uploads, so its objects are seeded through the emulator's JSON API
//! and only GET goes through `CloudStore`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lakestream_objstore::{ObjectPath, ObjectStore};
use lakestream_objstore_cloud::{CloudStore, testkit};
use lakestream_objstore_s3::S3Store;

const MIB: usize = 1024 * 1024;

/// MB/s of PUT (None when not measured) and GET.
struct Rates {
    put_mb_s: Option<f64>,
    get_mb_s: f64,
}

/// How objects get written: through the store, or seeded around it into fake-gcs-server.
enum Writer<'a> {
    Store,
    FakeGcs { endpoint: &'a str, bucket: &'a str, root_prefix: &'a str },
}

async fn measure(
    store: &dyn ObjectStore,
    writer: &Writer<'_>,
    run: &str,
    size: usize,
    budget: Duration,
) -> Rates {
    let body: Bytes = (0..size).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into();
    let mut paths = Vec::new();
    let started = Instant::now();
    while started.elapsed() < budget || paths.len() < 2 {
        let path = ObjectPath::new(format!("{run}/{size}/{}", paths.len())).expect("path");
        match writer {
            Writer::Store => store.put(&path, body.clone()).await.expect("put"),
            Writer::FakeGcs { endpoint, bucket, root_prefix } => {
                testkit::fake_gcs_upload(endpoint, bucket, &format!("{root_prefix}/{path}"), &body)
                    .await
                    .expect("seed")
            }
        }
        paths.push(path);
    }
    let put_time = started.elapsed();
    let started = Instant::now();
    for path in &paths {
        assert_eq!(store.get(path).await.expect("get").len(), size);
    }
    let get_time = started.elapsed();
    store.delete_many(&paths).await.expect("cleanup");
    let megabytes = (paths.len() * size) as f64 / 1e6;
    Rates {
        put_mb_s: matches!(writer, Writer::Store).then(|| megabytes / put_time.as_secs_f64()),
        get_mb_s: megabytes / get_time.as_secs_f64(),
    }
}

#[tokio::main]
async fn main() {
    let seconds: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0.5);
    let budget = Duration::from_secs_f64(seconds);
    let run = format!("cloud-bench-{}", std::process::id());
    let s3 = S3Store::new(lakestream_objstore_s3::testkit::server_config()).expect("S3 config");
    let azure = CloudStore::azure(testkit::azure_config(&run)).expect("azure");
    let gcs_config = testkit::gcs_config(&run);
    let (gcs_endpoint, gcs_bucket) =
        (gcs_config.endpoint.clone().expect("endpoint"), gcs_config.bucket.clone());
    let gcs = CloudStore::gcs(gcs_config).expect("gcs");
    let gcs_writer = Writer::FakeGcs { endpoint: &gcs_endpoint, bucket: &gcs_bucket, root_prefix: &run };
    let stores: [(&str, Arc<dyn ObjectStore>, &Writer); 3] = [
        ("s3s-fs", Arc::new(s3), &Writer::Store),
        ("azurite", Arc::new(azure), &Writer::Store),
        ("fake-gcs", Arc::new(gcs), &gcs_writer),
    ];
    if cfg!(debug_assertions) {
        println!("(debug build: compare the ratios, not the absolute figures)");
    }
    println!(
        "{:>6} {:>9} {:>10} {:>10} {:>12} {:>12}",
        "size", "backend", "PUT MB/s", "GET MB/s", "PUT / s3", "GET / s3"
    );
    for size_mib in [1, 4, 16] {
        let mut s3_rates: Option<Rates> = None;
        for (name, store, writer) in &stores {
            let r = measure(store.as_ref(), writer, &run, size_mib * MIB, budget).await;
            let base = s3_rates.as_ref().unwrap_or(&r);
            let show = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
            let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => format!("{:.2}", a / b),
                _ => "-".to_owned(),
            };
            println!(
                "{:>4}MiB {name:>9} {:>10} {:>10.1} {:>12} {:>12}",
                size_mib,
                show(r.put_mb_s),
                r.get_mb_s,
                ratio(r.put_mb_s, base.put_mb_s),
                ratio(Some(r.get_mb_s), Some(base.get_mb_s)),
            );
            if s3_rates.is_none() {
                s3_rates = Some(r);
            }
        }
    }
}
