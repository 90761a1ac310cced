//! The Azure Blob Storage backend: [`CloudStore::azure`].

use std::sync::Arc;

use lakestream_objstore::{ObjectResult, ObjectStoreError};
use object_store::azure::MicrosoftAzureBuilder;

use crate::config::{AzureConfig, ConnectionString};
use crate::store::{CloudStore, Service, client_settings};

/// The standard variable holding a storage connection string.
const CONNECTION_STRING_VAR: &str = "AZURE_STORAGE_CONNECTION_STRING";

impl CloudStore {
    /// A store on Azure Blob Storage. Validates the settings (errors name the field) and
    /// builds the client; credentials are looked up as [`AzureConfig`] lists.
    pub fn azure(config: AzureConfig) -> ObjectResult<CloudStore> {
        let root = config.validate()?;
        let transfer = config.transfer();
        // The standard chain: object_store reads the AZURE_* variables (keys, SAS, client
        // secret, workload identity) and falls back to the managed identity.
        let mut builder = MicrosoftAzureBuilder::from_env().with_container_name(root.bucket());
        let from_env = match (&config.connection_string, &config.access_key, config.anonymous) {
            (None, None, false) => std::env::var(CONNECTION_STRING_VAR).ok().filter(|s| !s.is_empty()),
            _ => None,
        };
        let connection = match (&config.connection_string, &from_env) {
            (Some(text), _) => Some(ConnectionString::parse("connection_string", text)?),
            (None, Some(text)) => {
                Some(ConnectionString::parse("connection_string", text).map_err(|e| match e {
                    ObjectStoreError::InvalidConfig { reason, .. } => ObjectStoreError::InvalidConfig {
                        field: "connection_string",
                        reason: format!("{CONNECTION_STRING_VAR}: {reason}"),
                    },
                    other => other,
                })?)
            }
            (None, None) => None,
        };
        let mut endpoint = config.endpoint.clone();
        if let Some(connection) = &connection {
            if let Some(account) = &connection.account {
                builder = builder.with_account(account.clone());
            }
            if let Some(key) = &connection.account_key {
                builder = builder.with_access_key(key.clone());
            }
            if let Some(sas) = &connection.sas {
                builder = builder.with_config(object_store::azure::AzureConfigKey::SasKey, sas.clone());
            }
            if endpoint.is_none() {
                endpoint = connection.blob_endpoint.clone();
            }
        }
        if let Some(account) = &config.account {
            builder = builder.with_account(account.clone());
        }
        if let Some(key) = &config.access_key {
            builder = builder.with_access_key(key.clone());
        }
        if config.anonymous {
            builder = builder.with_skip_signature(true);
        }
        if let Some(endpoint) = &endpoint {
            builder = builder.with_endpoint(endpoint.trim_end_matches('/').to_owned());
        }
        let (options, retry) = client_settings(&transfer, endpoint.as_deref());
        builder = builder.with_client_options(options).with_retry(retry);
        // The builder's messages name settings, never key material.
        let client = builder.build().map_err(|e| ObjectStoreError::InvalidConfig {
            field: "account",
            reason: format!("cannot set up Azure Blob Storage: {e}"),
        })?;
        Ok(CloudStore::new(Service::Azure, Arc::new(client), root, transfer))
    }
}
