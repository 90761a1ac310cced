//! Writes, reads (whole and by range), lists and deletes an object in a GCS bucket or an Azure
//! Blob container named by URL, with each cloud's default credential chain.
//!
//! ```text
//! cargo run -p lakestream-objstore-cloud --example cloud_roundtrip -- gs://bucket/prefix
//! cargo run -p lakestream-objstore-cloud --example cloud_roundtrip -- az://container/prefix
//! ```
//!
//! GCS: `GOOGLE_APPLICATION_CREDENTIALS`, gcloud's application default credentials or the
//! metadata server. Azure: `AZURE_STORAGE_CONNECTION_STRING` (Azurite's works), the
//! `AZURE_STORAGE_*` variables, or a managed identity; `AZURE_STORAGE_ACCOUNT_NAME` names the
//! account when nothing else does. The object is deleted at the end.
#![allow(clippy::disallowed_methods)] // an example: a fresh object name per run

use std::process::ExitCode;

use bytes::Bytes;
use futures::TryStreamExt;
use lakestream_objstore::{ByteRange, ObjectPath, ObjectPrefix, ObjectStore};
use lakestream_objstore_cloud::{AzureConfig, CloudStore, GcsConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: cloud_roundtrip gs://BUCKET[/PREFIX] | az://CONTAINER[/PREFIX]");
        return ExitCode::from(2);
    };
    match run(&url).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("cloud_roundtrip: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let store = if url.starts_with("gs://") {
        CloudStore::gcs(GcsConfig { url: Some(url.to_owned()), ..GcsConfig::default() })?
    } else {
        CloudStore::azure(AzureConfig {
            url: Some(url.to_owned()),
            account: std::env::var("AZURE_STORAGE_ACCOUNT_NAME").ok(),
            ..AzureConfig::default()
        })?
    };
    println!("{:?} store at {}", store.service(), store.root());

    let run_id = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos();
    let path = ObjectPath::new(format!("cloud-roundtrip/{run_id}"))?;
    let payload = Bytes::from_static(b"a compacted file, written once");
    store.put(&path, payload.clone()).await?;
    println!("put {path} ({} bytes)", payload.len());
    match store.put(&path, Bytes::from_static(b"again")).await {
        Err(e) => println!("second put refused: {e}"),
        Ok(()) => println!("second put accepted: no write-once here ({:?})", store.write_once()),
    }
    if store.get(&path).await? != payload {
        return Err("the object read back differs from the one written".into());
    }
    let range = store.get_range(&path, ByteRange::Suffix(12)).await?;
    println!("last 12 bytes: {:?}", String::from_utf8_lossy(&range));
    let listed: Vec<_> = store.list(&ObjectPrefix::new("cloud-roundtrip/")?, None).try_collect().await?;
    println!("{} object(s) under cloud-roundtrip/", listed.len());
    store.delete(&path).await?;
    println!("deleted {path}");
    Ok(())
}
