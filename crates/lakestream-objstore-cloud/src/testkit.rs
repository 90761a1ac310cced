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

/// How Azurite 3.37.0 treats `If-None-Match: *`: as fake-gcs-server, see
/// [`FAKE_GCS_CONDITIONAL_PUT`].
pub const AZURITE_CONDITIONAL_PUT: ConditionalPut = ConditionalPut::Sequential;

/// fake-gcs-server's bucket, `prefix` below it, anonymous requests.
pub fn gcs_config(prefix: &str) -> GcsConfig {
    GcsConfig {
        bucket: var("LAKESTREAM_TEST_GCS_BUCKET"),
        prefix: Some(prefix.to_owned()),
        endpoint: Some(var("LAKESTREAM_TEST_GCS_ENDPOINT")),
        anonymous: true,
        conditional_put: FAKE_GCS_CONDITIONAL_PUT,
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
        conditional_put: AZURITE_CONDITIONAL_PUT,
        max_attempts: 3,
        ..AzureConfig::default()
    }
}
