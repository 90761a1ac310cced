//! Shared helpers of the S3 tests: the server's settings (the crate's testkit), and an
//! interceptor that records every request as it goes on the wire.

#![allow(dead_code)] // each test file uses a different subset

use std::sync::{Arc, Mutex};

use aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_s3::error::BoxError;
/// The settings of the test server (`LAKESTREAM_TEST_S3_*`); panics with instructions when
/// they are unset: these tests are never skipped silently.
pub use lakestream_objstore_s3::testkit::server_config;

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
