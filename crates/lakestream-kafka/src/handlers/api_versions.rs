//! ApiVersions: the versions this front end serves (`crate::conn::SERVED`).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;

use super::Handler;
use crate::conn::SERVED;

/// The versions this front end serves, for ApiVersions.
fn api_keys() -> Vec<api_versions_response::ApiVersion> {
    SERVED
        .iter()
        .map(|&(key, min, max)| {
            api_versions_response::ApiVersion::default()
                .with_api_key(key as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect()
}

/// The version-0 answer to an ApiVersions request of a version not served: as Kafka's
/// broker answers, the error and ApiVersions' own range only (the client retries with it).
pub(crate) fn api_versions_unsupported() -> ApiVersionsResponse {
    let own = api_keys().into_iter().filter(|k| k.api_key == ApiKey::ApiVersions as i16).collect();
    ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(own)
}

impl Handler {
    pub(crate) async fn api_versions(
        &self,
        _request: ApiVersionsRequest,
        _version: i16,
    ) -> ApiVersionsResponse {
        ApiVersionsResponse::default().with_api_keys(api_keys())
    }
}
