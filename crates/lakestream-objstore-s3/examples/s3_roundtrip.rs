//! Writes, reads (whole and by range), lists and deletes an object on an S3 server, configured
//! the way a service is: `S3Config::from_env()` (the usual `AWS_*` variables and
//! `LAKESTREAM_S3_*`).
//!
//! ```text
//! AWS_ENDPOINT_URL=http://127.0.0.1:9000 AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… \
//! LAKESTREAM_S3_BUCKET=lakestream LAKESTREAM_S3_FORCE_PATH_STYLE=true \
//!   cargo run -p lakestream-objstore-s3 --example s3_roundtrip
//! ```
//!
//! On AWS, set the bucket (and the region) and let the default credential chain find the
//! credentials. The object goes under `LAKESTREAM_S3_PREFIX` (if set) and is deleted at the end.
#![allow(clippy::disallowed_methods)] // an example: a fresh object name per run

use std::process::ExitCode;

use bytes::Bytes;
use futures::TryStreamExt;
use lakestream_objstore::{ByteRange, ObjectPath, ObjectPrefix, ObjectStore};
use lakestream_objstore_s3::{S3Config, S3Store};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("s3_roundtrip: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let config = S3Config::from_env()?;
    let store = S3Store::new(config)?;
    println!("store root: {}", store.root());

    let run_id = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos();
    let path = ObjectPath::new(format!("s3-roundtrip/{run_id}"))?;
    let payload = Bytes::from_static(b"a WAL object, written once");
    store.put(&path, payload.clone()).await?;
    println!("put {path} ({} bytes)", payload.len());
    match store.put(&path, Bytes::from_static(b"again")).await {
        Err(e) => println!("second put refused: {e}"),
        Ok(()) => println!(
            "second put accepted: this server does not enforce write-once ({:?})",
            store.write_once()
        ),
    }
    assert_eq!(store.get(&path).await?, payload, "whole read");
    let range = store.get_range(&path, ByteRange::Bounded(2..5)).await?;
    println!("bytes 2..5: {:?}", String::from_utf8_lossy(&range));
    let listed: Vec<_> = store.list(&ObjectPrefix::new("s3-roundtrip/")?, None).try_collect().await?;
    println!("{} object(s) under s3-roundtrip/", listed.len());
    store.delete(&path).await?;
    println!("deleted {path}");
    Ok(())
}
