//! The S3 server of the tests (feature `testkit`): its settings, from the variables that
//! `scripts/test` sets when it starts s3s-fs (so does `start_s3` of `scripts/servers.sh`).
//!
//! Nothing here fakes S3: a test that needs the server and finds none fails with instructions
//! (it never skips).
//!
//! | variable | set by `scripts/test` to |
//! |---|---|
//! | `LAKESTREAM_TEST_S3_ENDPOINT` | the server's `http://127.0.0.1:port` |
//! | `LAKESTREAM_TEST_S3_BUCKET` | its bucket |
//! | `LAKESTREAM_TEST_S3_ACCESS_KEY`, `LAKESTREAM_TEST_S3_SECRET_KEY` | its static keys |
//! | `LAKESTREAM_TEST_S3_REGION` | `us-east-1` |
//! | `LAKESTREAM_TEST_S3_CONDITIONAL_PUT` | unset (optional: `atomic` or `disabled`, for another server) |

use crate::{ConditionalPut, S3Config, S3Store};

const HOW_TO_RUN: &str = "this needs a running S3 server: run `scripts/test`, or start s3s-fs with \
     `source scripts/servers.sh && start_s3 $(mktemp -d)` in the repository root and run cargo in that shell";

/// The seed of the retries' jitter: a failing run replays its pauses.
const RETRY_SEED: u64 = 7;

fn var(name: &str) -> String {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => value,
        _ => panic!("{name} is not set: {HOW_TO_RUN}"),
    }
}

/// How the server treats `If-None-Match`: `LAKESTREAM_TEST_S3_CONDITIONAL_PUT` (`atomic`,
/// `disabled`), by default `Sequential` — s3s-fs 0.14.1 checks the condition before writing,
/// not atomically.
pub fn conditional_put() -> ConditionalPut {
    match std::env::var("LAKESTREAM_TEST_S3_CONDITIONAL_PUT").as_deref() {
        Ok("atomic") => ConditionalPut::Atomic,
        Ok("disabled") => ConditionalPut::Disabled,
        Ok("sequential") | Err(_) => ConditionalPut::Sequential,
        Ok(other) => {
            panic!("LAKESTREAM_TEST_S3_CONDITIONAL_PUT={other:?}: expected atomic, sequential or disabled")
        }
    }
}

/// The test server's settings, at the root of its bucket; other settings are the defaults
/// (the retries' jitter seeded). Panics with instructions when the variables are not set.
pub fn server_config() -> S3Config {
    S3Config {
        bucket: var("LAKESTREAM_TEST_S3_BUCKET"),
        endpoint: Some(var("LAKESTREAM_TEST_S3_ENDPOINT")),
        region: var("LAKESTREAM_TEST_S3_REGION"),
        access_key_id: Some(var("LAKESTREAM_TEST_S3_ACCESS_KEY")),
        secret_access_key: Some(var("LAKESTREAM_TEST_S3_SECRET_KEY")),
        force_path_style: true,
        conditional_put: conditional_put(),
        retry_seed: Some(RETRY_SEED),
        ..S3Config::default()
    }
}

/// [`server_config`] with its root under `prefix` (a test's own, so runs do not meet).
pub fn server_config_under(prefix: impl Into<String>) -> S3Config {
    S3Config { prefix: Some(prefix.into()), ..server_config() }
}

/// A store on the test server, rooted under `prefix`.
pub fn server_store(prefix: impl Into<String>) -> S3Store {
    let config = server_config_under(prefix);
    S3Store::new(config).unwrap_or_else(|e| panic!("the test S3 server's settings: {e}"))
}
