//! [`S3Config`]: the settings of the S3 backend, with documented defaults and a
//! `validate()` that names the bad field.

use std::time::Duration;

use lakestream_objstore::{ObjectPath, ObjectRoot, ObjectStoreError, WriteOnce};
use serde::Deserialize;

/// S3's smallest part size for every part of a multipart upload but the last.
pub const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;
/// S3's largest part size.
pub const MAX_PART_SIZE: u64 = 5 * 1024 * 1024 * 1024;
/// S3's largest number of parts in one multipart upload.
pub const MAX_PARTS: u64 = 10_000;
/// S3's largest DeleteObjects batch and ListObjectsV2 page.
pub const MAX_BATCH: usize = 1000;

/// How the server treats `If-None-Match: *` on PutObject and CompleteMultipartUpload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConditionalPut {
    /// The server refuses to overwrite, atomically: of concurrent creates exactly one wins
    /// (AWS S3 since August 2024, and servers that follow it).
    Atomic,
    /// The server checks whether the object exists before writing but not atomically, so
    /// concurrent creates may all succeed (s3s-fs 0.14.1).
    Sequential,
    /// Do not send `If-None-Match` (for servers that reject it); `put` overwrites.
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

/// Settings of the S3 backend. Every field has a default ([`S3Config::default`]); the
/// bucket has to be set. Durations deserialize from human-readable text such as `"30s"`.
/// `Debug` shows every field but the secret key and the session token.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct S3Config {
    /// The bucket. Default: empty (must be set).
    pub bucket: String,
    /// Key prefix of the root within the bucket, without leading or trailing `/`.
    /// Default: none (the bucket's top level).
    pub prefix: Option<String>,
    /// Endpoint URL, e.g. `http://127.0.0.1:9000` for a local server. Default: none (AWS,
    /// from the region).
    pub endpoint: Option<String>,
    /// Region. Default `us-east-1`.
    pub region: String,
    /// Access key id of static credentials. Default: none, and then the credentials come
    /// from the AWS default chain ([`crate::credentials`]: the environment, the shared
    /// profile files, web identity / IRSA, ECS and EC2 instance metadata), unless
    /// `anonymous` is set.
    pub access_key_id: Option<String>,
    /// Secret access key; set together with `access_key_id`. Default: none.
    pub secret_access_key: Option<String>,
    /// Session token of temporary credentials. Default: none.
    pub session_token: Option<String>,
    /// Send unsigned requests and look up no credentials (a public bucket, or a server
    /// without authentication). Default `false`; refused together with `access_key_id`.
    pub anonymous: bool,
    /// Address the bucket in the path (`endpoint/bucket/key`) rather than the host name.
    /// Most self-hosted servers need it. Default `false`.
    pub force_path_style: bool,
    /// How the server treats `If-None-Match: *`. Default [`ConditionalPut::Atomic`].
    pub conditional_put: ConditionalPut,
    /// Time to establish a connection. Default 5 s.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Time for one attempt of one request, from sending to the last byte of the response.
    /// Bounds a stuck request; must allow the largest part at the slowest expected
    /// bandwidth. Default 60 s.
    #[serde(with = "humantime_serde")]
    pub attempt_timeout: Duration,
    /// Attempts per request, including the first (1 disables retries). Default 6.
    pub max_attempts: u32,
    /// Upper bound of the first retry's backoff; it doubles per retry up to
    /// `max_backoff`, and each sleep is drawn uniformly below the bound ("full jitter").
    /// Default 100 ms.
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    /// Largest backoff bound. Default 5 s.
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    /// Seed of the backoff jitter. Default: none (seeded from the OS, so that processes do
    /// not retry in lockstep); tests set it to replay.
    pub retry_seed: Option<u64>,
    /// Objects larger than this many bytes are written with a multipart upload. Default
    /// 64 MiB.
    pub multipart_threshold: u64,
    /// Part size of multipart uploads, 5 MiB to 5 GiB. Larger parts mean fewer requests but
    /// more memory in flight. Default 16 MiB.
    pub multipart_part_size: u64,
    /// Parts uploaded at once. Default 4.
    pub multipart_concurrency: usize,
    /// Keys per DeleteObjects request, 1 to 1000. Default 1000.
    pub delete_batch_size: usize,
    /// Keys per ListObjectsV2 page, 1 to 1000. Default 1000.
    pub list_page_size: usize,
}

/// What `Debug` prints instead of a secret.
const REDACTED: &str = "<redacted>";

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &self.secret_access_key.as_ref().map(|_| REDACTED))
            .field("session_token", &self.session_token.as_ref().map(|_| REDACTED))
            .field("anonymous", &self.anonymous)
            .field("force_path_style", &self.force_path_style)
            .field("conditional_put", &self.conditional_put)
            .field("connect_timeout", &self.connect_timeout)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("max_attempts", &self.max_attempts)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("retry_seed", &self.retry_seed)
            .field("multipart_threshold", &self.multipart_threshold)
            .field("multipart_part_size", &self.multipart_part_size)
            .field("multipart_concurrency", &self.multipart_concurrency)
            .field("delete_batch_size", &self.delete_batch_size)
            .field("list_page_size", &self.list_page_size)
            .finish()
    }
}

impl Default for S3Config {
    fn default() -> Self {
        S3Config {
            bucket: String::new(),
            prefix: None,
            endpoint: None,
            region: "us-east-1".to_owned(),
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            anonymous: false,
            force_path_style: false,
            conditional_put: ConditionalPut::Atomic,
            connect_timeout: Duration::from_secs(5),
            attempt_timeout: Duration::from_secs(60),
            max_attempts: 6,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            retry_seed: None,
            multipart_threshold: 64 * 1024 * 1024,
            multipart_part_size: 16 * 1024 * 1024,
            multipart_concurrency: 4,
            delete_batch_size: MAX_BATCH,
            list_page_size: MAX_BATCH,
        }
    }
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ObjectStoreError {
    ObjectStoreError::InvalidConfig { field, reason: reason.into() }
}

impl S3Config {
    /// Reads the usual AWS variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`, `AWS_REGION` or `AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL_S3` or
    /// `AWS_ENDPOINT_URL`) and ours (`LAKESTREAM_S3_BUCKET`, `LAKESTREAM_S3_PREFIX`,
    /// `LAKESTREAM_S3_FORCE_PATH_STYLE`, `LAKESTREAM_S3_CONDITIONAL_PUT` =
    /// `atomic|sequential|disabled`) over the defaults, then validates.
    pub fn from_env() -> Result<Self, ObjectStoreError> {
        S3Config::from_vars(|name| std::env::var(name).ok())
    }

    /// [`S3Config::from_env`] with the variables read through `var` (for tests).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, ObjectStoreError> {
        let first = |names: &[&str]| names.iter().find_map(|name| var(name).filter(|v| !v.is_empty()));
        let mut config = S3Config::default();
        if let Some(bucket) = first(&["LAKESTREAM_S3_BUCKET"]) {
            config.bucket = bucket;
        }
        config.prefix = first(&["LAKESTREAM_S3_PREFIX"]);
        config.endpoint = first(&["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]);
        if let Some(region) = first(&["AWS_REGION", "AWS_DEFAULT_REGION"]) {
            config.region = region;
        }
        config.access_key_id = first(&["AWS_ACCESS_KEY_ID"]);
        config.secret_access_key = first(&["AWS_SECRET_ACCESS_KEY"]);
        config.session_token = first(&["AWS_SESSION_TOKEN"]);
        if let Some(flag) = first(&["LAKESTREAM_S3_FORCE_PATH_STYLE"]) {
            config.force_path_style = match flag.as_str() {
                "true" | "1" => true,
                "false" | "0" => false,
                _ => {
                    return Err(invalid(
                        "force_path_style",
                        format!("LAKESTREAM_S3_FORCE_PATH_STYLE={flag:?} is not true or false"),
                    ));
                }
            };
        }
        if let Some(mode) = first(&["LAKESTREAM_S3_CONDITIONAL_PUT"]) {
            config.conditional_put = match mode.as_str() {
                "atomic" => ConditionalPut::Atomic,
                "sequential" => ConditionalPut::Sequential,
                "disabled" => ConditionalPut::Disabled,
                _ => {
                    return Err(invalid(
                        "conditional_put",
                        format!(
                            "LAKESTREAM_S3_CONDITIONAL_PUT={mode:?} is not atomic, sequential or disabled"
                        ),
                    ));
                }
            };
        }
        config.validate()?;
        Ok(config)
    }

    /// The root (bucket plus prefix) these settings name.
    pub fn root(&self) -> Result<ObjectRoot, ObjectStoreError> {
        let prefix = match &self.prefix {
            Some(prefix) => {
                Some(ObjectPath::new(prefix.as_str()).map_err(|e| invalid("prefix", e.to_string()))?)
            }
            None => None,
        };
        ObjectRoot::new(self.bucket.as_str(), prefix).map_err(|e| invalid("bucket", e.to_string()))
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), ObjectStoreError> {
        self.root()?;
        if let Some(endpoint) = &self.endpoint
            && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        {
            return Err(invalid("endpoint", format!("{endpoint:?} does not start with http:// or https://")));
        }
        if self.region.is_empty() {
            return Err(invalid("region", "empty"));
        }
        if self.access_key_id.is_some() != self.secret_access_key.is_some() {
            return Err(invalid(
                "secret_access_key",
                "access_key_id and secret_access_key are set together or not at all",
            ));
        }
        if self.session_token.is_some() && self.access_key_id.is_none() {
            return Err(invalid("session_token", "set without access_key_id"));
        }
        if self.anonymous && self.access_key_id.is_some() {
            return Err(invalid(
                "anonymous",
                "unsigned requests cannot use access_key_id; set one or the other",
            ));
        }
        for (field, value) in [
            ("connect_timeout", self.connect_timeout),
            ("attempt_timeout", self.attempt_timeout),
            ("max_backoff", self.max_backoff),
        ] {
            if value.is_zero() {
                return Err(invalid(field, "must be greater than zero"));
            }
        }
        if self.max_attempts == 0 {
            return Err(invalid("max_attempts", "must be at least 1"));
        }
        if self.initial_backoff > self.max_backoff {
            return Err(invalid("initial_backoff", "greater than max_backoff"));
        }
        if !(MIN_PART_SIZE..=MAX_PART_SIZE).contains(&self.multipart_part_size) {
            return Err(invalid(
                "multipart_part_size",
                format!("{} is outside 5 MiB..=5 GiB", self.multipart_part_size),
            ));
        }
        if self.multipart_concurrency == 0 {
            return Err(invalid("multipart_concurrency", "must be at least 1"));
        }
        if !(1..=MAX_BATCH).contains(&self.delete_batch_size) {
            return Err(invalid(
                "delete_batch_size",
                format!("{} is outside 1..=1000", self.delete_batch_size),
            ));
        }
        if !(1..=MAX_BATCH).contains(&self.list_page_size) {
            return Err(invalid("list_page_size", format!("{} is outside 1..=1000", self.list_page_size)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn valid() -> S3Config {
        S3Config { bucket: "lakestream".to_owned(), ..S3Config::default() }
    }

    #[test]
    fn debug_never_shows_the_secret_key_or_session_token() {
        let config = S3Config {
            access_key_id: Some("AKIDEXAMPLE".into()),
            secret_access_key: Some("wJalrXUtnFEMI-secret".into()),
            session_token: Some("FwoGZXIvYXdz-session".into()),
            ..valid()
        };
        let shown = format!("{config:?}");
        assert!(!shown.contains("wJalr") && !shown.contains("FwoGZ"), "{shown}");
        assert!(shown.contains("AKIDEXAMPLE") && shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn defaults_are_valid_once_the_bucket_is_set() {
        assert!(valid().validate().is_ok());
        let err = S3Config::default().validate().unwrap_err();
        assert!(matches!(err, ObjectStoreError::InvalidConfig { field: "bucket", .. }), "{err}");
    }

    #[test]
    fn validate_names_the_bad_field() {
        let cases: Vec<(&str, S3Config)> = vec![
            ("prefix", S3Config { prefix: Some("/abs".into()), ..valid() }),
            ("endpoint", S3Config { endpoint: Some("localhost:9000".into()), ..valid() }),
            ("region", S3Config { region: String::new(), ..valid() }),
            ("secret_access_key", S3Config { access_key_id: Some("a".into()), ..valid() }),
            ("session_token", S3Config { session_token: Some("t".into()), ..valid() }),
            (
                "anonymous",
                S3Config {
                    anonymous: true,
                    access_key_id: Some("a".into()),
                    secret_access_key: Some("s".into()),
                    ..valid()
                },
            ),
            ("attempt_timeout", S3Config { attempt_timeout: Duration::ZERO, ..valid() }),
            ("max_attempts", S3Config { max_attempts: 0, ..valid() }),
            ("initial_backoff", S3Config { initial_backoff: Duration::from_secs(60), ..valid() }),
            ("multipart_part_size", S3Config { multipart_part_size: 1024, ..valid() }),
            ("multipart_concurrency", S3Config { multipart_concurrency: 0, ..valid() }),
            ("delete_batch_size", S3Config { delete_batch_size: 1001, ..valid() }),
            ("list_page_size", S3Config { list_page_size: 0, ..valid() }),
        ];
        for (field, config) in cases {
            match config.validate() {
                Err(ObjectStoreError::InvalidConfig { field: named, .. }) => assert_eq!(named, field),
                other => panic!("{field}: expected InvalidConfig, got {other:?}"),
            }
        }
    }

    #[test]
    fn from_vars_reads_the_aws_and_lakestream_variables() {
        let vars: HashMap<&str, &str> = HashMap::from([
            ("LAKESTREAM_S3_BUCKET", "wal-bucket"),
            ("LAKESTREAM_S3_PREFIX", "tenant/wal"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "key"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("LAKESTREAM_S3_FORCE_PATH_STYLE", "true"),
            ("LAKESTREAM_S3_CONDITIONAL_PUT", "sequential"),
        ]);
        let config = S3Config::from_vars(|name| vars.get(name).map(|v| v.to_string())).unwrap();
        assert_eq!(config.root().unwrap().to_string(), "wal-bucket/tenant/wal");
        assert_eq!(config.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(config.region, "eu-west-1");
        assert_eq!(config.access_key_id.as_deref(), Some("key"));
        assert!(config.force_path_style);
        assert_eq!(config.conditional_put, ConditionalPut::Sequential);

        let bad = S3Config::from_vars(|name| match name {
            "LAKESTREAM_S3_BUCKET" => Some("b-1".into()),
            "LAKESTREAM_S3_CONDITIONAL_PUT" => Some("maybe".into()),
            _ => None,
        });
        assert!(
            matches!(bad, Err(ObjectStoreError::InvalidConfig { field: "conditional_put", .. })),
            "{bad:?}"
        );
    }

    #[test]
    fn deserializes_with_human_readable_durations() {
        let config: S3Config = serde_json::from_str(
            r#"{"bucket": "b-1", "attempt_timeout": "2s", "conditional_put": "disabled", "list_page_size": 10}"#,
        )
        .unwrap();
        assert_eq!(config.attempt_timeout, Duration::from_secs(2));
        assert_eq!(config.conditional_put, ConditionalPut::Disabled);
        assert_eq!(config.list_page_size, 10);
        assert_eq!(config.max_attempts, S3Config::default().max_attempts);
        assert!(serde_json::from_str::<S3Config>(r#"{"bucket": "b-1", "typo": 1}"#).is_err());
    }
}
