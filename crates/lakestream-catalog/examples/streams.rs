//! A stream's life in the catalog, on the embedded (redb) metadata store: a namespace, a
//! stream of two partitions, growth to three, the log IDs readers resolve, and the drop that
//! leaves a tombstone. Run it twice on the same file: the second run finds the namespace, and
//! the dropped name `orders` refused for good; it creates `orders-2`, `orders-3`… instead.
//!
//! ```text
//! cargo run -p lakestream-catalog --example streams -- /tmp/catalog.redb
//! ```

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;

use lakestream_catalog::{Catalog, CatalogConfig, CatalogError, Growth};
use lakestream_meta::EmbeddedStore;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: streams FILE (a redb file, created if missing)");
        return ExitCode::from(2);
    };
    match run(std::path::Path::new(&path)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("streams: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let store = Arc::new(EmbeddedStore::open(path).await?);
    let catalog = Catalog::new(store, CatalogConfig::default())?;
    match catalog.create_namespace("shop", BTreeMap::new()).await {
        Ok(_) => println!("namespace shop created"),
        Err(CatalogError::NamespaceExists { .. }) => println!("namespace shop exists (an earlier run)"),
        Err(e) => return Err(e.into()),
    }

    // A dropped identity can never be created again: take the first name never used.
    let mut name = "orders".to_owned();
    let mut suffix = 1;
    while catalog.is_dropped("shop", &name).await? || catalog.get_stream("shop", &name).await.is_ok() {
        suffix += 1;
        name = format!("orders-{suffix}");
    }
    let properties = BTreeMap::from([("owner".to_owned(), "team-a".to_owned())]);
    let stream = catalog.create_stream("shop", &name, 2, properties).await?;
    let logs =
        |logs: &[lakestream_format::LogId]| logs.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ");
    println!("stream shop/{name}: the logs of its partitions are {}", logs(&stream.logs));

    let grown = catalog.add_partitions("shop", &name, Growth::To(3)).await?;
    println!(
        "grown to {} partitions: logs {} (the first two kept theirs)",
        grown.partition_count(),
        logs(&grown.logs)
    );
    for log_id in &grown.logs {
        // What a reader or compactor does with a log ID: never changes anything.
        let info = catalog.open_log(*log_id).await?;
        println!(
            "  log {log_id} is partition {} of {}/{}",
            info.partition, info.log_ref.namespace, info.log_ref.stream
        );
    }

    let listed = catalog.list_streams("shop", None, 100).await?;
    println!("live streams in shop: {:?}", listed.items.iter().map(|s| s.name.as_str()).collect::<Vec<_>>());
    if name == "orders" {
        catalog.drop_stream("shop", "orders").await?;
        match catalog.create_stream("shop", "orders", 1, BTreeMap::new()).await {
            Err(e) => println!("dropped shop/orders; creating it again is refused: {e}"),
            Ok(_) => return Err("a dropped stream was created again".into()),
        }
    }
    Ok(())
}
