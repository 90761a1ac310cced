//! [`GcsConfig`] and [`AzureConfig`]: the settings of the two backends, with documented
//! defaults, object URLs (`gs://bucket/prefix`, `az://container/prefix`) and a `validate()`
//! that names the bad field. `Debug` never prints a secret.

use std::time::Duration;

use lakestream_objstore::{ObjectPath, ObjectRoot, ObjectStoreError, WriteOnce};
use serde::Deserialize;

/// The smallest part GCS's XML multipart API accepts for every part but the last (Azure
/// accepts any block size; one floor for both keeps the settings portable).
pub const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;
/// The largest part either service accepts in one request (Azure's block limit is 4000 MiB,
/// GCS's part limit 5 GiB).
pub const MAX_PART_SIZE: u64 = 4000 * 1024 * 1024;

/// How the service treats the conditional create (GCS `ifGenerationMatch=0`, Azure
/// `If-None-Match: *`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConditionalPut {
    /// The service refuses to overwrite, atomically: of concurrent creates exactly one wins.
    /// Both real services document this.
    Atomic,
    /// The service refuses to overwrite an object that existed before the request, but
    /// concurrent creates may all succeed (an emulator that checks, then writes).
    Sequential,
    /// Send no condition: `put` overwrites (for emulators that reject the condition).
    Disabled,
}

impl ConditionalPut {
    /// The write-once promise the store makes with this setting.
    pub fn write_once(self) -> WriteOnce {
        match self {
            ConditionalPut::Atomic => WriteOnce::Atomic,
            ConditionalPut::Sequential => WriteOnce::Sequential,
            ConditionalPut::Disabled => WriteOnce::Unenforced,
        }
    }
}

/// Timeouts, retries and multipart settings shared by both backends, with the same meaning
/// and defaults as the S3 backend's fields of the same names.
///
/// [`GcsConfig`] and [`AzureConfig`] repeat these as top-level fields rather than holding
/// this struct: serde's `flatten` cannot be combined with `deny_unknown_fields`, and a
/// misspelt key must stay an error that names it. [`TransferSettings::default`] is the one
/// source of their defaults, and a test checks that the S3 backend's fields of the same
/// names take the same keys and defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct TransferSettings {
    /// Time to establish a connection.
    pub connect_timeout: Duration,
    /// Time for one attempt of one request.
    pub attempt_timeout: Duration,
    /// Attempts per request, including the first.
    pub max_attempts: u32,
    /// First retry's backoff bound (doubling per retry).
    pub initial_backoff: Duration,
    /// Largest backoff bound.
    pub max_backoff: Duration,
    /// Objects larger than this are written with a multipart upload.
    pub multipart_threshold: u64,
    /// Part size of multipart uploads.
    pub multipart_part_size: u64,
    /// Parts uploaded at once.
    pub multipart_concurrency: usize,
    /// The write-once promise.
    pub conditional_put: ConditionalPut,
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ObjectStoreError {
    ObjectStoreError::InvalidConfig { field, reason: reason.into() }
}

/// What `Debug` prints instead of a secret.
const REDACTED: &str = "<redacted>";

impl Default for TransferSettings {
    /// The defaults of both backends, the S3 backend's too.
    fn default() -> Self {
        TransferSettings {
            connect_timeout: Duration::from_secs(5),
            attempt_timeout: Duration::from_secs(60),
            max_attempts: 6,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            multipart_threshold: 64 * 1024 * 1024,
            multipart_part_size: 16 * 1024 * 1024,
            multipart_concurrency: 4,
            conditional_put: ConditionalPut::Atomic,
        }
    }
}

impl TransferSettings {
    fn validate(&self) -> Result<(), ObjectStoreError> {
        if self.max_attempts == 0 {
            return Err(invalid("max_attempts", "must be at least 1 (1 disables retries)"));
        }
        if self.attempt_timeout.is_zero() {
            return Err(invalid("attempt_timeout", "must be more than zero"));
        }
        if self.connect_timeout.is_zero() {
            return Err(invalid("connect_timeout", "must be more than zero"));
        }
        if self.initial_backoff > self.max_backoff {
            return Err(invalid(
                "initial_backoff",
                format!("{:?} is more than max_backoff {:?}", self.initial_backoff, self.max_backoff),
            ));
        }
        if !(MIN_PART_SIZE..=MAX_PART_SIZE).contains(&self.multipart_part_size) {
            return Err(invalid(
                "multipart_part_size",
                format!("{} is outside {MIN_PART_SIZE}..={MAX_PART_SIZE} bytes", self.multipart_part_size),
            ));
        }
        if self.multipart_threshold < self.multipart_part_size {
            return Err(invalid(
                "multipart_threshold",
                format!(
                    "{} is below multipart_part_size {}: an upload would have a single part",
                    self.multipart_threshold, self.multipart_part_size
                ),
            ));
        }
        if self.multipart_concurrency == 0 {
            return Err(invalid("multipart_concurrency", "must be at least 1"));
        }
        Ok(())
    }
}

/// Splits an object URL `scheme://name/prefix` into the name and the prefix, checking the
/// scheme; `field` names the key in errors.
fn parse_object_url(
    field: &'static str,
    url: &str,
    schemes: &[&str],
) -> Result<(String, Option<String>), ObjectStoreError> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| {
        invalid(field, format!("{url:?} is not an object URL like {}://name/prefix", schemes[0]))
    })?;
    if !schemes.contains(&scheme) {
        return Err(invalid(
            field,
            format!("{url:?}: the scheme must be one of {schemes:?}, not {scheme:?}"),
        ));
    }
    let rest = rest.trim_end_matches('/');
    let (name, prefix) = match rest.split_once('/') {
        Some((name, prefix)) => (name, Some(prefix.to_owned())),
        None => (rest, None),
    };
    if name.is_empty() {
        return Err(invalid(field, format!("{url:?} names no bucket or container")));
    }
    Ok((name.to_owned(), prefix))
}

/// The root of `name` and `prefix`, the prefix checked as an object path.
fn root_of(
    name: &str,
    prefix: Option<&str>,
    prefix_field: &'static str,
) -> Result<ObjectRoot, ObjectStoreError> {
    let prefix = match prefix.filter(|p| !p.is_empty()) {
        Some(p) => Some(ObjectPath::new(p).map_err(|e| invalid(prefix_field, e.to_string()))?),
        None => None,
    };
    ObjectRoot::new(name, prefix)
}

/// Settings of the Google Cloud Storage backend. Durations deserialize from text such as
/// `"30s"`. `Debug` shows every field but the service-account key.
///
/// Credentials, first match wins: `service_account_key` (the JSON text),
/// `service_account_path` (a JSON key file), `anonymous` (unsigned requests, for emulators
/// and public buckets); otherwise Google's application default credentials: the file named
/// by `GOOGLE_APPLICATION_CREDENTIALS` or gcloud's well-known file, and then the metadata
/// server (GKE workload identity, GCE service accounts).
#[derive(Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GcsConfig {
    /// `gs://bucket/prefix`, instead of `bucket` and `prefix`. Default: none.
    pub url: Option<String>,
    /// The bucket. Default: empty (set it or `url`).
    pub bucket: String,
    /// Key prefix of the root within the bucket, without leading or trailing `/`.
    pub prefix: Option<String>,
    /// Base URL of the JSON API, e.g. `http://127.0.0.1:4443` for fake-gcs-server. Default:
    /// none (`https://storage.googleapis.com`).
    pub endpoint: Option<String>,
    /// Path of a service-account JSON key file. Default: none.
    pub service_account_path: Option<String>,
    /// A service-account JSON key, as text (a secret). Default: none.
    pub service_account_key: Option<String>,
    /// Send unsigned requests and look up no credentials. Default `false`.
    pub anonymous: bool,
    /// How the service treats `ifGenerationMatch=0`. Default [`ConditionalPut::Atomic`].
    pub conditional_put: ConditionalPut,
    /// Time to establish a connection. Default 5 s.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Time for one attempt of one request. Default 60 s.
    #[serde(with = "humantime_serde")]
    pub attempt_timeout: Duration,
    /// Attempts per request, including the first. Default 6.
    pub max_attempts: u32,
    /// Upper bound of the first retry's backoff, doubling per retry. Default 100 ms.
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    /// Largest backoff bound. Default 5 s.
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    /// Objects larger than this many bytes use a multipart upload. Default 64 MiB.
    pub multipart_threshold: u64,
    /// Part size of multipart uploads, 5 MiB to 4000 MiB. Default 16 MiB.
    pub multipart_part_size: u64,
    /// Parts uploaded at once. Default 4.
    pub multipart_concurrency: usize,
}

impl Default for GcsConfig {
    fn default() -> Self {
        let transfer = TransferSettings::default();
        GcsConfig {
            url: None,
            bucket: String::new(),
            prefix: None,
            endpoint: None,
            service_account_path: None,
            service_account_key: None,
            anonymous: false,
            conditional_put: transfer.conditional_put,
            connect_timeout: transfer.connect_timeout,
            attempt_timeout: transfer.attempt_timeout,
            max_attempts: transfer.max_attempts,
            initial_backoff: transfer.initial_backoff,
            max_backoff: transfer.max_backoff,
            multipart_threshold: transfer.multipart_threshold,
            multipart_part_size: transfer.multipart_part_size,
            multipart_concurrency: transfer.multipart_concurrency,
        }
    }
}

impl std::fmt::Debug for GcsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcsConfig")
            .field("url", &self.url)
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("service_account_path", &self.service_account_path)
            .field("service_account_key", &self.service_account_key.as_ref().map(|_| REDACTED))
            .field("anonymous", &self.anonymous)
            .field("transfer", &self.transfer())
            .finish()
    }
}

impl GcsConfig {
    /// The shared transfer settings.
    pub fn transfer(&self) -> TransferSettings {
        TransferSettings {
            connect_timeout: self.connect_timeout,
            attempt_timeout: self.attempt_timeout,
            max_attempts: self.max_attempts,
            initial_backoff: self.initial_backoff,
            max_backoff: self.max_backoff,
            multipart_threshold: self.multipart_threshold,
            multipart_part_size: self.multipart_part_size,
            multipart_concurrency: self.multipart_concurrency,
            conditional_put: self.conditional_put,
        }
    }

    /// Checks every field and returns the root (bucket and prefix, from `url` or from
    /// `bucket` and `prefix`). Errors name the field.
    pub fn validate(&self) -> Result<ObjectRoot, ObjectStoreError> {
        self.transfer().validate()?;
        if self.service_account_key.is_some() && self.service_account_path.is_some() {
            return Err(invalid("service_account_key", "set either it or service_account_path, not both"));
        }
        if self.anonymous && (self.service_account_key.is_some() || self.service_account_path.is_some()) {
            return Err(invalid("anonymous", "is set together with a service account"));
        }
        if let Some(endpoint) = &self.endpoint
            && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        {
            return Err(invalid("endpoint", format!("{endpoint:?} is not an http:// or https:// URL")));
        }
        match &self.url {
            Some(url) => {
                if !self.bucket.is_empty() || self.prefix.is_some() {
                    return Err(invalid(
                        "url",
                        "is set together with bucket or prefix; set one or the other",
                    ));
                }
                let (bucket, prefix) = parse_object_url("url", url, &["gs", "gcs"])?;
                root_of(&bucket, prefix.as_deref(), "url")
            }
            None if self.bucket.is_empty() => {
                Err(invalid("bucket", "is not set (set bucket, or url = \"gs://bucket/prefix\")"))
            }
            None => root_of(&self.bucket, self.prefix.as_deref(), "prefix").map_err(|e| match e {
                ObjectStoreError::InvalidPath { path, reason } => {
                    invalid("bucket", format!("{path:?}: {reason}"))
                }
                other => other,
            }),
        }
    }
}

/// Settings of the Azure Blob Storage backend. Durations deserialize from text such as
/// `"30s"`. `Debug` shows every field but the access key and the connection string.
///
/// Credentials, first match wins: `access_key` (shared key), `connection_string`
/// (`AccountName`, `AccountKey` or `SharedAccessSignature`, `BlobEndpoint`), `anonymous`;
/// otherwise the environment (`AZURE_STORAGE_CONNECTION_STRING`, then object_store's
/// `AZURE_STORAGE_*` / `AZURE_*` variables: access key, SAS, client secret, workload
/// identity through `AZURE_FEDERATED_TOKEN_FILE`), and last the managed identity of the VM
/// or pod (the instance metadata service).
#[derive(Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AzureConfig {
    /// `az://container/prefix`, instead of `container` and `prefix`. Default: none.
    pub url: Option<String>,
    /// The storage account. Default: none (from the connection string or the environment).
    pub account: Option<String>,
    /// The container. Default: empty (set it or `url`).
    pub container: String,
    /// Key prefix of the root within the container, without leading or trailing `/`.
    pub prefix: Option<String>,
    /// Account URL, e.g. `http://127.0.0.1:10000/devstoreaccount1` for Azurite. Default:
    /// none (`https://{account}.blob.core.windows.net`).
    pub endpoint: Option<String>,
    /// The account's shared key (a secret). Default: none.
    pub access_key: Option<String>,
    /// A storage connection string (a secret). Default: none.
    pub connection_string: Option<String>,
    /// Send unsigned requests (a public container). Default `false`.
    pub anonymous: bool,
    /// How the service treats `If-None-Match: *`. Default [`ConditionalPut::Atomic`].
    pub conditional_put: ConditionalPut,
    /// Time to establish a connection. Default 5 s.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Time for one attempt of one request. Default 60 s.
    #[serde(with = "humantime_serde")]
    pub attempt_timeout: Duration,
    /// Attempts per request, including the first. Default 6.
    pub max_attempts: u32,
    /// Upper bound of the first retry's backoff, doubling per retry. Default 100 ms.
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    /// Largest backoff bound. Default 5 s.
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    /// Objects larger than this many bytes use a multipart (block list) upload. Default 64 MiB.
    pub multipart_threshold: u64,
    /// Block size of multipart uploads, 5 MiB to 4000 MiB. Default 16 MiB.
    pub multipart_part_size: u64,
    /// Blocks uploaded at once. Default 4.
    pub multipart_concurrency: usize,
}

impl Default for AzureConfig {
    fn default() -> Self {
        let transfer = TransferSettings::default();
        AzureConfig {
            url: None,
            account: None,
            container: String::new(),
            prefix: None,
            endpoint: None,
            access_key: None,
            connection_string: None,
            anonymous: false,
            conditional_put: transfer.conditional_put,
            connect_timeout: transfer.connect_timeout,
            attempt_timeout: transfer.attempt_timeout,
            max_attempts: transfer.max_attempts,
            initial_backoff: transfer.initial_backoff,
            max_backoff: transfer.max_backoff,
            multipart_threshold: transfer.multipart_threshold,
            multipart_part_size: transfer.multipart_part_size,
            multipart_concurrency: transfer.multipart_concurrency,
        }
    }
}

impl std::fmt::Debug for AzureConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureConfig")
            .field("url", &self.url)
            .field("account", &self.account)
            .field("container", &self.container)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("access_key", &self.access_key.as_ref().map(|_| REDACTED))
            .field("connection_string", &self.connection_string.as_ref().map(|_| REDACTED))
            .field("anonymous", &self.anonymous)
            .field("transfer", &self.transfer())
            .finish()
    }
}

/// The parts of a storage connection string the backend uses.
#[derive(Clone, PartialEq, Default)]
pub struct ConnectionString {
    /// `AccountName`.
    pub account: Option<String>,
    /// `AccountKey` (a secret).
    pub account_key: Option<String>,
    /// `SharedAccessSignature` (a secret).
    pub sas: Option<String>,
    /// `BlobEndpoint`.
    pub blob_endpoint: Option<String>,
}

impl std::fmt::Debug for ConnectionString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionString")
            .field("account", &self.account)
            .field("account_key", &self.account_key.as_ref().map(|_| REDACTED))
            .field("sas", &self.sas.as_ref().map(|_| REDACTED))
            .field("blob_endpoint", &self.blob_endpoint)
            .finish()
    }
}

impl ConnectionString {
    /// Parses `Key=Value;Key=Value` (values may hold `=`, as base64 keys do). Unknown keys
    /// are ignored; errors never quote the text, which holds secrets.
    pub fn parse(field: &'static str, text: &str) -> Result<ConnectionString, ObjectStoreError> {
        let mut parsed = ConnectionString::default();
        for pair in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| invalid(field, "an entry has no '=' (expected Key=Value;Key=Value)"))?;
            let value = Some(value.to_owned());
            match key {
                "AccountName" => parsed.account = value,
                "AccountKey" => parsed.account_key = value,
                "SharedAccessSignature" => parsed.sas = value,
                "BlobEndpoint" => parsed.blob_endpoint = value,
                _ => {}
            }
        }
        if parsed.account.is_none() && parsed.blob_endpoint.is_none() {
            return Err(invalid(field, "has neither AccountName nor BlobEndpoint"));
        }
        Ok(parsed)
    }
}

impl AzureConfig {
    /// The shared transfer settings.
    pub fn transfer(&self) -> TransferSettings {
        TransferSettings {
            connect_timeout: self.connect_timeout,
            attempt_timeout: self.attempt_timeout,
            max_attempts: self.max_attempts,
            initial_backoff: self.initial_backoff,
            max_backoff: self.max_backoff,
            multipart_threshold: self.multipart_threshold,
            multipart_part_size: self.multipart_part_size,
            multipart_concurrency: self.multipart_concurrency,
            conditional_put: self.conditional_put,
        }
    }

    /// Checks every field and returns the root (container and prefix, from `url` or from
    /// `container` and `prefix`). Errors name the field.
    pub fn validate(&self) -> Result<ObjectRoot, ObjectStoreError> {
        self.transfer().validate()?;
        if self.access_key.is_some() && self.connection_string.is_some() {
            return Err(invalid("access_key", "set either it or connection_string, not both"));
        }
        if self.anonymous && (self.access_key.is_some() || self.connection_string.is_some()) {
            return Err(invalid("anonymous", "is set together with access_key or connection_string"));
        }
        if let Some(text) = &self.connection_string {
            ConnectionString::parse("connection_string", text)?;
        }
        if self.access_key.is_some() && self.account.is_none() {
            return Err(invalid(
                "account",
                "is not set, but access_key is (a shared key belongs to an account)",
            ));
        }
        if let Some(endpoint) = &self.endpoint
            && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        {
            return Err(invalid("endpoint", format!("{endpoint:?} is not an http:// or https:// URL")));
        }
        match &self.url {
            Some(url) => {
                if !self.container.is_empty() || self.prefix.is_some() {
                    return Err(invalid(
                        "url",
                        "is set together with container or prefix; set one or the other",
                    ));
                }
                let (container, prefix) = parse_object_url("url", url, &["az", "azure"])?;
                root_of(&container, prefix.as_deref(), "url")
            }
            None if self.container.is_empty() => {
                Err(invalid("container", "is not set (set container, or url = \"az://container/prefix\")"))
            }
            None => root_of(&self.container, self.prefix.as_deref(), "prefix").map_err(|e| match e {
                ObjectStoreError::InvalidPath { path, reason } => {
                    invalid("container", format!("{path:?}: {reason}"))
                }
                other => other,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(result: Result<ObjectRoot, ObjectStoreError>) -> &'static str {
        match result {
            Err(ObjectStoreError::InvalidConfig { field, .. }) => field,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn object_urls_give_the_root() {
        let gcs = GcsConfig { url: Some("gs://bucket/a/b".into()), ..GcsConfig::default() };
        let root = gcs.validate().expect("valid");
        assert_eq!((root.bucket(), root.prefix().map(|p| p.as_str())), ("bucket", Some("a/b")));
        let az = AzureConfig { url: Some("az://container".into()), ..AzureConfig::default() };
        let root = az.validate().expect("valid");
        assert_eq!((root.bucket(), root.prefix()), ("container", None));
        let bucket = GcsConfig { bucket: "bkt".into(), prefix: Some("wal".into()), ..GcsConfig::default() };
        assert_eq!(
            bucket.validate().expect("valid").to_string(),
            ObjectRoot::parse("bkt/wal").unwrap().to_string()
        );
    }

    #[test]
    fn bad_settings_name_the_field() {
        assert_eq!(field_of(GcsConfig::default().validate()), "bucket");
        assert_eq!(field_of(AzureConfig::default().validate()), "container");
        let wrong_scheme = GcsConfig { url: Some("s3://b/p".into()), ..GcsConfig::default() };
        assert_eq!(field_of(wrong_scheme.validate()), "url");
        let no_scheme = AzureConfig { url: Some("container/p".into()), ..AzureConfig::default() };
        assert_eq!(field_of(no_scheme.validate()), "url");
        let both = GcsConfig { url: Some("gs://b".into()), bucket: "b".into(), ..GcsConfig::default() };
        assert_eq!(field_of(both.validate()), "url");
        let bad_prefix =
            GcsConfig { bucket: "bkt".into(), prefix: Some("a//b".into()), ..GcsConfig::default() };
        assert_eq!(field_of(bad_prefix.validate()), "prefix");
        let tiny_parts =
            AzureConfig { container: "ctr".into(), multipart_part_size: 1024, ..AzureConfig::default() };
        assert_eq!(field_of(tiny_parts.validate()), "multipart_part_size");
        let no_attempts = GcsConfig { bucket: "bkt".into(), max_attempts: 0, ..GcsConfig::default() };
        assert_eq!(field_of(no_attempts.validate()), "max_attempts");
        let key_without_account =
            AzureConfig { container: "ctr".into(), access_key: Some("k".into()), ..AzureConfig::default() };
        assert_eq!(field_of(key_without_account.validate()), "account");
        let bad_connection = AzureConfig {
            container: "ctr".into(),
            connection_string: Some("garbage".into()),
            ..AzureConfig::default()
        };
        assert_eq!(field_of(bad_connection.validate()), "connection_string");
    }

    #[test]
    fn debug_redacts_secrets() {
        let gcs = GcsConfig {
            service_account_key: Some("{\"private_key\":\"hunter2\"}".into()),
            ..GcsConfig::default()
        };
        let az = AzureConfig {
            access_key: Some("hunter2".into()),
            connection_string: Some("AccountName=a;AccountKey=hunter2".into()),
            ..AzureConfig::default()
        };
        let parsed =
            ConnectionString::parse("connection_string", "AccountName=a;AccountKey=hunter2==").unwrap();
        for text in [format!("{gcs:?}"), format!("{az:?}"), format!("{parsed:?}")] {
            assert!(!text.contains("hunter2"), "{text}");
            assert!(text.contains(REDACTED), "{text}");
        }
        assert_eq!(parsed.account_key.as_deref(), Some("hunter2=="), "values keep their '='");
    }

    /// Every shared key with a value other than its default, as a user would write it.
    const TRANSFER_TOML: &str = r#"
conditional_put = "sequential"
connect_timeout = "7s"
attempt_timeout = "70s"
max_attempts = 9
initial_backoff = "150ms"
max_backoff = "9s"
multipart_threshold = 134217728
multipart_part_size = 8388608
multipart_concurrency = 3
"#;

    fn s3_transfer(s3: &lakestream_objstore_s3::S3Config) -> TransferSettings {
        use lakestream_objstore_s3::ConditionalPut as S3Put;
        TransferSettings {
            connect_timeout: s3.connect_timeout,
            attempt_timeout: s3.attempt_timeout,
            max_attempts: s3.max_attempts,
            initial_backoff: s3.initial_backoff,
            max_backoff: s3.max_backoff,
            multipart_threshold: s3.multipart_threshold,
            multipart_part_size: s3.multipart_part_size,
            multipart_concurrency: s3.multipart_concurrency,
            conditional_put: match s3.conditional_put {
                S3Put::Atomic => ConditionalPut::Atomic,
                S3Put::Sequential => ConditionalPut::Sequential,
                S3Put::Disabled => ConditionalPut::Disabled,
            },
        }
    }

    /// The three configurations repeat the transfer fields (see [`TransferSettings`]): they
    /// must keep one set of keys, meanings of values and defaults.
    #[test]
    fn transfer_fields_match_across_gcs_azure_and_s3() {
        let defaults = TransferSettings::default();
        assert_eq!(GcsConfig::default().transfer(), defaults);
        assert_eq!(AzureConfig::default().transfer(), defaults);
        assert_eq!(s3_transfer(&lakestream_objstore_s3::S3Config::default()), defaults, "S3's defaults");

        let gcs: GcsConfig = toml::from_str(TRANSFER_TOML).expect("GCS takes every shared key");
        let azure: AzureConfig = toml::from_str(TRANSFER_TOML).expect("Azure takes every shared key");
        let s3: lakestream_objstore_s3::S3Config =
            toml::from_str(TRANSFER_TOML).expect("S3 takes every shared key");
        let set = gcs.transfer();
        assert_ne!(set, defaults, "the test sets every field");
        assert_eq!(set.max_attempts, 9);
        assert_eq!(set.initial_backoff, Duration::from_millis(150));
        assert_eq!(set.conditional_put, ConditionalPut::Sequential);
        assert_eq!(azure.transfer(), set);
        assert_eq!(s3_transfer(&s3), set);
    }

    #[test]
    fn a_misspelt_key_is_refused_by_name() {
        let gcs = toml::from_str::<GcsConfig>("bucket = \"b\"\nmax_atempts = 3\n").unwrap_err();
        assert!(gcs.to_string().contains("max_atempts"), "{gcs}");
        let azure = toml::from_str::<AzureConfig>("container = \"c\"\nmultipart_treshold = 1\n").unwrap_err();
        assert!(azure.to_string().contains("multipart_treshold"), "{azure}");
    }

    #[test]
    fn connection_string_errors_do_not_quote_it() {
        let err = ConnectionString::parse("connection_string", "AccountKey=hunter2").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}
