//! Settings of the emulators `scripts/test` starts (feature `testkit`), for tests in this
//! and other crates. Each panics with instructions when its variables are missing: a test
//! that needs an emulator fails loudly rather than skipping.

use crate::config::{AzureConfig, ConditionalPut, GcsConfig};

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: this test needs the storage emulators. Run it through scripts/test, \
             or start them with `source scripts/servers.sh; install_azurite; install_fake_gcs; \
             start_azurite DIR; start_fake_gcs DIR` and export the LAKESTREAM_TEST_AZURE_* and \
             LAKESTREAM_TEST_GCS_* variables they print"
        )
    })
}

/// How fake-gcs-server 1.56.1 treats `ifGenerationMatch=0`: it refuses to overwrite an
/// existing object, but checks and writes without a lock, so concurrent creates are not
/// proven atomic against it (the real service documents them as atomic).
pub const FAKE_GCS_CONDITIONAL_PUT: ConditionalPut = ConditionalPut::Sequential;

/// How Azurite 3.37.0 treats `If-None-Match: *`: atomically. Its Put Blob looks the name up,
/// checks the condition and inserts in one synchronous step of its in-memory metadata store
/// (`LokiBlobMetadataStore::createBlob`, no `await` in between, on Node's single thread), so
/// the concurrent-create check runs against it. That proves our handling, not the service.
pub const AZURITE_CONDITIONAL_PUT: ConditionalPut = ConditionalPut::Atomic;

/// The emulator's promise, or the one `LAKESTREAM_TEST_{service}_CONDITIONAL_PUT`
/// (`atomic`, `sequential`, `disabled`) declares (to probe an emulator, or for a real
/// service). Panics on another value.
fn conditional_put(service: &str, emulator: ConditionalPut) -> ConditionalPut {
    let name = format!("LAKESTREAM_TEST_{service}_CONDITIONAL_PUT");
    match std::env::var(&name).as_deref() {
        Err(_) => emulator,
        Ok("atomic") => ConditionalPut::Atomic,
        Ok("sequential") => ConditionalPut::Sequential,
        Ok("disabled") => ConditionalPut::Disabled,
        Ok(other) => panic!("{name}={other:?}: expected atomic, sequential or disabled"),
    }
}

/// fake-gcs-server's bucket, `prefix` below it, anonymous requests.
pub fn gcs_config(prefix: &str) -> GcsConfig {
    GcsConfig {
        bucket: var("LAKESTREAM_TEST_GCS_BUCKET"),
        prefix: Some(prefix.to_owned()),
        endpoint: Some(var("LAKESTREAM_TEST_GCS_ENDPOINT")),
        anonymous: true,
        conditional_put: conditional_put("GCS", FAKE_GCS_CONDITIONAL_PUT),
        max_attempts: 3,
        ..GcsConfig::default()
    }
}

/// Azurite's container, `prefix` below it, the development account's shared key.
pub fn azure_config(prefix: &str) -> AzureConfig {
    AzureConfig {
        container: var("LAKESTREAM_TEST_AZURE_CONTAINER"),
        prefix: Some(prefix.to_owned()),
        account: Some(var("LAKESTREAM_TEST_AZURE_ACCOUNT")),
        endpoint: Some(var("LAKESTREAM_TEST_AZURE_ENDPOINT")),
        access_key: Some(var("LAKESTREAM_TEST_AZURE_ACCESS_KEY")),
        conditional_put: conditional_put("AZURE", AZURITE_CONDITIONAL_PUT),
        max_attempts: 3,
        ..AzureConfig::default()
    }
}

/// Writes an object into fake-gcs-server through its JSON upload API (`POST
/// /upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}`, plain HTTP/1.1): the
/// emulator does not accept object_store's XML-API uploads, so tests and the benchmark seed
/// GCS objects this way. `name` is the full object name in the bucket.
pub async fn fake_gcs_upload(endpoint: &str, bucket: &str, name: &str, bytes: &[u8]) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = endpoint.strip_prefix("http://").ok_or("the GCS test endpoint is not http://")?;
    let mut stream = tokio::net::TcpStream::connect(authority).await.map_err(|e| e.to_string())?;
    let encoded: String = name
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let head = format!(
        "POST /upload/storage/v1/b/{bucket}/o?uploadType=media&name={encoded} HTTP/1.1\r\nHost: {authority}\r\n\
         Content-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        bytes.len()
    );
    stream.write_all(head.as_bytes()).await.map_err(|e| e.to_string())?;
    stream.write_all(bytes).await.map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&response);
    if text.starts_with("HTTP/1.1 200") { Ok(()) } else { Err(text.chars().take(300).collect()) }
}
