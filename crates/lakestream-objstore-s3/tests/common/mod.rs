//! Shared helpers of the S3 tests: the server's settings from the environment, and an
//! interceptor that records every request as it goes on the wire.

#![allow(dead_code)] // each test file uses a different subset

use std::sync::{Arc, Mutex};

use aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_s3::error::BoxError;
use lakestream_objstore_s3::{ConditionalPut, S3Config};

const HOW_TO_START: &str = "the S3 tests need a running s3s-fs server: run `scripts/test`, or start one with \
     `source scripts/servers.sh && start_s3 $(mktemp -d)` in the repository root and run cargo test in that shell";

/// The settings of the test server, from `LAKESTREAM_TEST_S3_*`. Panics with instructions
/// when they are unset: these tests are never skipped silently.
pub fn server_config() -> S3Config {
    let var =
        |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set; {HOW_TO_START}"));
    S3Config {
        bucket: var("LAKESTREAM_TEST_S3_BUCKET"),
        endpoint: Some(var("LAKESTREAM_TEST_S3_ENDPOINT")),
        region: var("LAKESTREAM_TEST_S3_REGION"),
        access_key_id: Some(var("LAKESTREAM_TEST_S3_ACCESS_KEY")),
        secret_access_key: Some(var("LAKESTREAM_TEST_S3_SECRET_KEY")),
        force_path_style: true,
        // s3s-fs 0.14.1 checks If-None-Match before writing, not atomically. Another server
        // can be declared atomic with LAKESTREAM_TEST_S3_CONDITIONAL_PUT=atomic.
        conditional_put: match std::env::var("LAKESTREAM_TEST_S3_CONDITIONAL_PUT").as_deref() {
            Ok("atomic") => ConditionalPut::Atomic,
            Ok("disabled") => ConditionalPut::Disabled,
            _ => ConditionalPut::Sequential,
        },
        retry_seed: Some(7),
        ..S3Config::default()
    }
}

/// A request as sent: method, URI and the headers the tests look at.
#[derive(Debug, Clone)]
pub struct SentRequest {
    pub method: String,
    pub uri: String,
    pub checksum_crc32c: Option<String>,
    pub checksum_mode: Option<String>,
    pub if_none_match: Option<String>,
    pub content_length: Option<String>,
}

/// Records every request after signing, just before it is handed to the HTTP client.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    pub sent: Arc<Mutex<Vec<SentRequest>>>,
}

impl Capture {
    pub fn requests(&self) -> Vec<SentRequest> {
        self.sent.lock().unwrap().clone()
    }
}

impl Intercept for Capture {
    fn name(&self) -> &'static str {
        "Capture"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request();
        let header = |name: &str| request.headers().get(name).map(str::to_owned);
        self.sent.lock().unwrap().push(SentRequest {
            method: request.method().to_owned(),
            uri: request.uri().to_owned(),
            checksum_crc32c: header("x-amz-checksum-crc32c"),
            checksum_mode: header("x-amz-checksum-mode"),
            if_none_match: header("if-none-match"),
            content_length: header("content-length"),
        });
        Ok(())
    }
}
