//! The object-storage operations on the local-filesystem backend, the embedded default:
//! write once, read whole and by range, head, list, a piecewise upload, delete.
//!
//! ```text
//! cargo run -p lakestream-objstore --example local_store -- /tmp/objects
//! ```
//!
//! Objects go to `DIR/lakestream/example/…` (the bucket `lakestream`, the key prefix
//! `example`), the layout s3s-fs serves, so an S3 server over the same directory sees them.
//! The example deletes what it wrote.

use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use lakestream_objstore::{ByteRange, LocalFsStore, ObjectPath, ObjectPrefix, ObjectRoot, ObjectStore};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: local_store DIR");
        return ExitCode::from(2);
    };
    match run(std::path::Path::new(&dir)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("local_store: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFsStore::new(dir, ObjectRoot::parse("lakestream/example")?)?);
    println!("write-once promise of this backend: {:?}", store.write_once());

    let small = ObjectPath::new("objects/small")?;
    store.put(&small, Bytes::from_static(b"hello, object storage")).await?;
    match store.put(&small, Bytes::from_static(b"again")).await {
        Err(e) => println!("second put of {small} refused: {e}"),
        Ok(()) => return Err("a second put of the same path succeeded".into()),
    }
    let tail = store.get_range(&small, ByteRange::Suffix(7)).await?;
    println!("last 7 bytes: {:?}", String::from_utf8_lossy(&tail));

    // A large object written piece by piece: visible only once complete.
    let large = ObjectPath::new("objects/large")?;
    let mut upload = store.start_upload(&large).await?;
    for piece in 0..4u8 {
        upload.write(Bytes::from(vec![piece; 1 << 20])).await?;
    }
    upload.complete().await?;
    println!("{large}: {} bytes", store.head(&large).await?.size);

    let listed: Vec<_> = store.list(&ObjectPrefix::new("objects/")?, None).try_collect().await?;
    for meta in &listed {
        println!("listed {} ({} bytes)", meta.path, meta.size);
    }
    store.delete_many(&[small, large]).await?;
    println!(
        "deleted both; {} object(s) left",
        store.list(&ObjectPrefix::all(), None).try_collect::<Vec<_>>().await?.len()
    );
    Ok(())
}
