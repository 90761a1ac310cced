//! The Google Cloud Storage backend: [`CloudStore::gcs`].

use std::sync::Arc;

use lakestream_objstore::{ObjectResult, ObjectStoreError};
use object_store::StaticCredentialProvider;
use object_store::gcp::{GcpCredential, GoogleCloudStorageBuilder};

use crate::config::GcsConfig;
use crate::store::{CloudStore, Service, client_settings};

impl CloudStore {
    /// A store on Google Cloud Storage. Validates the settings (errors name the field) and
    /// builds the client; credentials are looked up on first use, as [`GcsConfig`] lists.
    pub fn gcs(config: GcsConfig) -> ObjectResult<CloudStore> {
        let root = config.validate()?;
        let transfer = config.transfer();
        let (options, retry) = client_settings(&transfer, config.endpoint.as_deref());
        let mut builder = GoogleCloudStorageBuilder::new()
            .with_bucket_name(root.bucket())
            .with_client_options(options)
            .with_retry(retry);
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_base_url(endpoint.trim_end_matches('/'));
        }
        if let Some(key) = &config.service_account_key {
            builder = builder.with_service_account_key(key.clone());
        } else if let Some(path) = &config.service_account_path {
            builder = builder.with_service_account_path(path.clone());
        } else if let Ok(path) = std::env::var("GOOGLE_APPLICATION_CREDENTIALS") {
            builder = builder.with_application_credentials(path);
        }
        if config.anonymous {
            // object_store 0.14.2 skips signing for reads only; its uploads still ask the
            // credential provider, so give them an empty token rather than the metadata server.
            let empty = GcpCredential { bearer: String::new() };
            builder = builder
                .with_skip_signature(true)
                .with_credentials(Arc::new(StaticCredentialProvider::new(empty)));
        }
        // The builder's messages name files and settings, never key material.
        let client = builder.build().map_err(|e| ObjectStoreError::InvalidConfig {
            field: "service_account_key",
            reason: format!("cannot set up Google Cloud Storage credentials: {e}"),
        })?;
        Ok(CloudStore::new(Service::Gcs, Arc::new(client), root, transfer))
    }
}
