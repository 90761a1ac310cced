//! The `lakestream` command's configuration: one TOML file, environment variables and flags.
//!
//! The file holds every part's sections side by side: the service's
//! ([`lakestream_service::ServiceConfig`]: `[roles]`, `[metadata]`, `[storage]`, `[writer]`,
//! ...), the HTTP and gRPC transports' ([`lakestream_server::ServerConfig`]: `[http]`,
//! `[grpc]`, `[tls]`, `[listener]`), the Kafka front end's (`[kafka]`) and this command's own
//! (`[log]`, `[tracing]`). Each part is read from the one merged document; a section no part
//! has is refused, naming it.
//!
//! Precedence, highest first: command-line flags, `LAKESTREAM_*` environment variables, the
//! TOML file, the defaults. One rule maps variables to keys: `LAKESTREAM_` then the key's
//! levels joined by `__` (`LAKESTREAM_WRITER__FLUSH_WINDOW` sets `writer.flush_window`), plus
//! a few documented aliases ([`ENV_ALIASES`]). The file and the variables are merged by
//! `figment`. Unknown keys are refused with an error naming them (and the variable), so a
//! typo never silently falls back to a default.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lakestream_kafka::KafkaConfig;
use lakestream_server::ServerConfig;
use lakestream_service::config::{InvalidSetting, MetadataConfig, ObjectStoreConfig, ServiceConfig};
use serde::Deserialize;

/// Everything a `lakestream` service process reads from its configuration.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// The service layer: roles, stores and every role's settings.
    pub service: ServiceConfig,
    /// The HTTP and gRPC APIs.
    pub server: ServerConfig,
    /// The Kafka wire-protocol front end.
    pub kafka: KafkaConfig,
    /// Logging: `format = "text"` (the default) or `"json"`.
    pub log: LogConfig,
    /// Trace export: `otlp_endpoint` (needs a `lakestream` built with the `otlp` feature).
    pub tracing: TracingConfig,
}

/// This command's own sections of the file.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Own {
    kafka: KafkaConfig,
    log: LogConfig,
    tracing: TracingConfig,
}

/// Where spans are exported, if anywhere.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct TracingConfig {
    /// An OTLP/HTTP collector's traces URL (`http://collector:4318/v1/traces`): every span
    /// (a request's, with its id) is exported there in batches. Off when absent. Needs the
    /// `otlp` cargo feature of `lakestream-cli`; without it, setting this is an error at start.
    pub otlp_endpoint: Option<String>,
}

/// How the service writes its logs (to stderr). The `lakestream` command applies it; the
/// filter stays `RUST_LOG`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `text` (human-readable lines, the default) or `json` (one JSON object per line, with
    /// the fields of the enclosing spans: a request's `id`, `method` and `path`).
    pub format: LogFormat,
}

/// A log line format.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!("{s:?} is neither `text` nor `json`")),
        }
    }
}

/// A configuration that cannot be used: names the file, key or variable and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema (the message names the key).
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, naming the key and line.
        message: String,
    },
    /// An environment variable holds a bad value, names no setting, or clashes with another.
    #[error("environment variable {var}{}: {message}", setting_of(.key))]
    Env {
        /// The variable (or variables, comma-separated).
        var: String,
        /// The setting it sets, e.g. `writer.flush_window`.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A setting breaks a rule.
    #[error("invalid setting {key}: {message}")]
    Invalid {
        /// The key, e.g. `writer.flush_window`.
        key: String,
        /// What is wrong.
        message: String,
    },
}

/// ` (setting KEY)`, or nothing when the variable names no key.
fn setting_of(key: &str) -> String {
    if key.is_empty() { String::new() } else { format!(" (setting {key})") }
}

/// Parses a human-readable duration such as `1h`, `90s` or `1h 30m` (for flags and
/// environment variables); the error says what was wrong.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime_serde::re::humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration such as 1h ({e})"))
}

/// Every environment variable whose name starts with this and contains [`ENV_SEPARATOR`] is a
/// setting: `LAKESTREAM_WRITER__FLUSH_WINDOW` sets `writer.flush_window`.
pub const ENV_PREFIX: &str = "LAKESTREAM_";

/// Separates the levels of a setting's key in an environment variable's name.
pub const ENV_SEPARATOR: &str = "__";

/// The documented short names kept from before the general rule, and the keys each sets.
/// `LAKESTREAM_OXIA_ADDRESSES` also switches `metadata` to Oxia, and `LAKESTREAM_S3_ENDPOINT`
/// sets the endpoint of every S3 root.
pub const ENV_ALIASES: [(&str, &[&str]); 6] = [
    ("LAKESTREAM_HTTP_ADDR", &["http.addr"]),
    ("LAKESTREAM_GRPC_ADDR", &["grpc.addr"]),
    ("LAKESTREAM_OXIA_ADDRESSES", &["metadata.addresses"]),
    ("LAKESTREAM_S3_ENDPOINT", &["storage.wal.endpoint", "storage.compacted.endpoint"]),
    ("LAKESTREAM_CLOUDEVENTS_DEDUP_WINDOW", &["cloudevents.dedup_window"]),
    ("LAKESTREAM_LOG_FORMAT", &["log.format"]),
];

/// Keys whose values are secrets: an error about them, or about a section holding them, never
/// shows the value.
const SECRET_KEYS: [&str; 13] = [
    "metadata.bearer_token",
    "storage.wal.secret_access_key",
    "storage.wal.session_token",
    "storage.compacted.secret_access_key",
    "storage.compacted.session_token",
    // GCS and Azure.
    "storage.wal.service_account_key",
    "storage.wal.access_key",
    "storage.wal.connection_string",
    "storage.compacted.service_account_key",
    "storage.compacted.access_key",
    "storage.compacted.connection_string",
    "auth.tokens",
    // The Iceberg catalog's database URI may hold a password.
    "tables.uri",
];

/// The name figment's metadata gives a value that came from an environment variable (the
/// variable's name is the metadata's custom source).
const ENV_SOURCE_NAME: &str = "environment variable";

/// One environment variable under the general rule: a figment provider of one value at one key.
#[derive(Debug, Clone)]
struct EnvSetting {
    /// The variable, e.g. `LAKESTREAM_WRITER__FLUSH_WINDOW`.
    var: String,
    /// The key, e.g. `writer.flush_window`.
    key: String,
    /// The value, parsed as figment parses environment variables: `true`/`false`, numbers,
    /// `[a, b]` arrays, `{k = v}` tables, `"quoted"` strings, anything else a string.
    value: figment::value::Value,
}

impl figment::Provider for EnvSetting {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::from(ENV_SOURCE_NAME, figment::Source::Custom(self.var.clone()))
    }

    fn data(&self) -> Result<figment::value::Map<figment::Profile, figment::value::Dict>, figment::Error> {
        let dict = figment::util::nest(&self.key, self.value.clone())
            .into_dict()
            .ok_or_else(|| figment::Error::from(format!("{} names no key", self.var)))?;
        Ok(figment::Profile::Default.collect(dict))
    }
}

/// The `LAKESTREAM_*` environment variables that configure a service: the settings (names
/// with `__`) and the aliases. Every other variable is left alone (`LAKESTREAM_TOOLS`,
/// `LAKESTREAM_TEST_*`, a `token_env` variable and so on are not settings).
#[derive(Debug, Default)]
struct EnvOverrides {
    settings: Vec<EnvSetting>,
    aliases: std::collections::BTreeMap<&'static str, String>,
}

impl EnvOverrides {
    /// Refuses a top-level section that no part of the configuration reads, naming the
    /// variable that set it, or the file.
    fn refuse_unknown_sections(&self, figment: &figment::Figment, path: &Path) -> Result<(), ConfigError> {
        let known = Config::sections();
        use figment::Provider as _;
        let data = figment.data().map_err(|e| self.describe(e, path))?;
        for section in data.values().flat_map(|dict| dict.keys()) {
            if known.contains(&section.as_str()) {
                continue;
            }
            let message = format!("unknown section `{section}`, expected one of {}", known.join(", "));
            if let Some(s) = self.settings.iter().find(|s| related(&s.key, section)) {
                return Err(ConfigError::Env { var: s.var.clone(), key: s.key.clone(), message });
            }
            return Err(ConfigError::Parse { path: path.to_path_buf(), message });
        }
        Ok(())
    }

    fn read(env: impl IntoIterator<Item = (String, String)>) -> Result<EnvOverrides, ConfigError> {
        let mut found = EnvOverrides::default();
        for (var, value) in env {
            let Some(rest) = var.strip_prefix(ENV_PREFIX) else { continue };
            if !rest.contains(ENV_SEPARATOR) {
                if let Some((alias, _)) = ENV_ALIASES.iter().find(|(alias, _)| *alias == var) {
                    found.aliases.insert(alias, value);
                }
                continue;
            }
            let levels: Vec<&str> = rest.split(ENV_SEPARATOR).collect();
            if levels
                .iter()
                .any(|l| l.is_empty() || !l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
            {
                return Err(ConfigError::Env {
                    key: String::new(),
                    message: format!(
                        "names no setting: a setting's variable is {ENV_PREFIX} and its key's levels in \
                         capitals joined by {ENV_SEPARATOR}, e.g. LAKESTREAM_WRITER__FLUSH_WINDOW for \
                         writer.flush_window"
                    ),
                    var,
                });
            }
            let key = levels.iter().map(|l| l.to_ascii_lowercase()).collect::<Vec<_>>().join(".");
            let value = value.parse().unwrap_or_else(|never: std::convert::Infallible| match never {});
            found.settings.push(EnvSetting { var, key, value });
        }
        // Later variables win at the same key; sort so that the outcome does not depend on the
        // environment's order.
        found.settings.sort_by(|a, b| a.var.cmp(&b.var));
        for (alias, keys) in ENV_ALIASES {
            if !found.aliases.contains_key(alias) {
                continue;
            }
            if let Some(clash) = found.settings.iter().find(|s| keys.contains(&s.key.as_str())) {
                return Err(ConfigError::Env {
                    var: format!("{alias}, {}", clash.var),
                    key: clash.key.clone(),
                    message: "both set the same setting; set one of them".into(),
                });
            }
        }
        Ok(found)
    }

    /// The error for a value figment could not use, naming the variable (or, for a value
    /// from the file, the file) and the key; never showing a secret.
    fn describe(&self, errors: figment::Error, path: &Path) -> ConfigError {
        let Some(e) = errors.into_iter().next() else {
            return ConfigError::Parse { path: path.to_path_buf(), message: "unknown error".into() };
        };
        let key = e.path.join(".");
        let secret = !key.is_empty() && SECRET_KEYS.iter().any(|s| related(s, &key));
        let what = describe_kind(&e.kind, secret);
        let var = e.metadata.as_ref().and_then(|m| match &m.source {
            Some(figment::Source::Custom(var)) if m.name == ENV_SOURCE_NAME => Some(var.clone()),
            _ => None,
        });
        // A number or boolean where a string belongs: say how to pass a string.
        let hint = match &e.kind {
            figment::error::Kind::InvalidType(
                figment::error::Actual::Unsigned(_)
                | figment::error::Actual::Signed(_)
                | figment::error::Actual::Float(_)
                | figment::error::Actual::Bool(_),
                expected,
            ) if expected.contains("string") => {
                " (a variable's value that reads as a number or true/false is one; to pass it as a \
                 string, quote it: LAKESTREAM_…='\"…\"')"
            }
            _ => "",
        };
        // A variable's own value is wrong, or its key is unknown (rather than a section it
        // shares with the file or other variables).
        let unknown_key = matches!(&e.kind, figment::error::Kind::UnknownField(field, _)
            if key.rsplit('.').next() == Some(field.as_str()));
        let own = |s: &EnvSetting| s.key == key || (unknown_key && related(&s.key, &key));
        if let Some(var) = var.filter(|var| self.settings.iter().any(|s| &s.var == var && own(s))) {
            return ConfigError::Env { var, key, message: format!("{what}{hint}") };
        }
        // A section checked as a whole (such as `metadata`, whose `backend` picks its keys):
        // name the variables that set keys in it, and the file.
        let vars: Vec<&str> = if key.is_empty() {
            Vec::new()
        } else {
            self.settings.iter().filter(|s| related(&s.key, &key)).map(|s| s.var.as_str()).collect()
        };
        if !vars.is_empty() {
            return ConfigError::Env {
                var: vars.join(", "),
                key,
                message: format!(
                    "{what}{hint} (in the section as merged from config file {})",
                    path.display()
                ),
            };
        }
        let message = if key.is_empty() { what } else { format!("{key}: {what}") };
        ConfigError::Parse { path: path.to_path_buf(), message }
    }
}

/// Whether one key lies at, under or above the other.
fn related(a: &str, b: &str) -> bool {
    let under = |x: &str, y: &str| x.strip_prefix(y).is_some_and(|r| r.starts_with('.'));
    a == b || under(a, b) || under(b, a)
}

/// figment's description of what is wrong, without the value when it may be a secret.
fn describe_kind(kind: &figment::error::Kind, secret: bool) -> String {
    use figment::error::{Actual, Kind};
    if !secret {
        return kind.to_string();
    }
    let shape = |actual: &Actual| match actual {
        Actual::Bool(_) => "a boolean",
        Actual::Unsigned(_) | Actual::Signed(_) | Actual::Float(_) => "a number",
        Actual::Char(_) | Actual::Str(_) => "a string",
        Actual::Seq => "a list",
        Actual::Map => "a table",
        _ => "a value",
    };
    match kind {
        Kind::InvalidType(actual, expected) => {
            format!("invalid type: found {} (not shown), expected {expected}", shape(actual))
        }
        Kind::InvalidValue(actual, expected) => {
            format!("invalid value: found {} (not shown), expected {expected}", shape(actual))
        }
        Kind::Message(_) => "invalid value (not shown: this section holds secrets)".into(),
        other => other.to_string(),
    }
}

/// The names of a struct's fields, as its `Deserialize` implementation declares them: the
/// top-level sections a part of the configuration reads.
fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    /// A deserializer that records the field list a struct asks for, and gives it nothing.
    struct Fields<'a>(&'a mut &'static [&'static str]);
    impl<'de> serde::Deserializer<'de> for Fields<'_> {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(serde::de::Error::custom("only structs name their fields"))
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(serde::de::Error::custom("fields recorded"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
            unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Fields(&mut fields));
    fields
}

impl Config {
    /// The top-level sections of the file: every part's.
    pub fn sections() -> Vec<&'static str> {
        let mut all = Vec::new();
        all.extend_from_slice(fields_of::<ServiceConfig>());
        all.extend_from_slice(fields_of::<ServerConfig>());
        all.extend_from_slice(fields_of::<Own>());
        all
    }

    /// The configuration `lakestream dev` uses, before the environment and flags: the
    /// service's dev profile ([`ServiceConfig::dev_toml`]) under `data_dir`, HTTP on `addr`.
    pub fn dev_toml(data_dir: &Path, addr: std::net::SocketAddr) -> String {
        format!("{}\n[http]\naddr = \"{addr}\"\n", ServiceConfig::dev_toml(data_dir))
    }

    /// Parses a TOML document (`path` names it in errors), without the environment.
    #[cfg(test)]
    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        Self::from_toml_and_env(text, path, std::iter::empty())
    }

    /// Reads and parses a TOML file, without the environment.
    #[cfg(test)]
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        Self::load(path, std::iter::empty())
    }

    /// Reads the TOML file `path` and applies the environment `env` (name, value pairs: the
    /// process's, or a test's) over it: every `LAKESTREAM_` variable with `__` in its name
    /// sets one key (`LAKESTREAM_WRITER__FLUSH_WINDOW` sets `writer.flush_window`), and the
    /// [`ENV_ALIASES`] set theirs. Flags go on top of the result.
    pub fn load(path: &Path, env: impl IntoIterator<Item = (String, String)>) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Self::from_toml_and_env(&text, path, env)
    }

    /// [`Config::load`] with the file's text given.
    pub fn from_toml_and_env(
        text: &str,
        path: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        use figment::providers::Format;
        let env = EnvOverrides::read(env)?;
        let mut figment = figment::Figment::from(figment::providers::Toml::string(text));
        for setting in &env.settings {
            figment = figment.merge(setting);
        }
        env.refuse_unknown_sections(&figment, path)?;
        let service: ServiceConfig = figment.extract().map_err(|e| env.describe(e, path))?;
        let server: ServerConfig = figment.extract().map_err(|e| env.describe(e, path))?;
        let own: Own = figment.extract().map_err(|e| env.describe(e, path))?;
        let mut config = Config { service, server, kafka: own.kafka, log: own.log, tracing: own.tracing };
        config.apply_env(|var| env.aliases.get(var).cloned())?;
        config.service.max_fetch_wait = config.server.http.max_fetch_wait;
        Ok(config)
    }

    /// Applies the aliases ([`ENV_ALIASES`]: `LAKESTREAM_HTTP_ADDR`, `LAKESTREAM_GRPC_ADDR`,
    /// `LAKESTREAM_OXIA_ADDRESSES`, `LAKESTREAM_S3_ENDPOINT` (the endpoint of every S3 root),
    /// `LAKESTREAM_CLOUDEVENTS_DEDUP_WINDOW`, `LAKESTREAM_LOG_FORMAT`), read through `var` so
    /// tests need not touch the process environment. [`Config::load`] applies them and
    /// the general rule.
    pub fn apply_env(&mut self, var: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        if let Some(format) = var("LAKESTREAM_LOG_FORMAT") {
            self.log.format = format.parse().map_err(|message| ConfigError::Env {
                var: "LAKESTREAM_LOG_FORMAT".into(),
                key: "log.format".into(),
                message,
            })?;
        }
        if let Some(window) = var("LAKESTREAM_CLOUDEVENTS_DEDUP_WINDOW") {
            self.service.cloudevents.dedup_window =
                parse_duration(&window).map_err(|message| ConfigError::Env {
                    var: "LAKESTREAM_CLOUDEVENTS_DEDUP_WINDOW".into(),
                    key: "cloudevents.dedup_window".into(),
                    message,
                })?;
        }
        if let Some(addr) = var("LAKESTREAM_GRPC_ADDR") {
            self.server.grpc.addr = Some(addr.parse().map_err(|e| ConfigError::Env {
                var: "LAKESTREAM_GRPC_ADDR".into(),
                key: "grpc.addr".into(),
                message: format!("{addr:?} is not host:port ({e})"),
            })?);
        }
        if let Some(addr) = var("LAKESTREAM_HTTP_ADDR") {
            self.server.http.addr = addr.parse().map_err(|e| ConfigError::Env {
                var: "LAKESTREAM_HTTP_ADDR".into(),
                key: "http.addr".into(),
                message: format!("{addr:?} is not host:port ({e})"),
            })?;
        }
        if let Some(endpoint) = var("LAKESTREAM_S3_ENDPOINT") {
            let mut any = false;
            for store in [&mut self.service.storage.wal, &mut self.service.storage.compacted] {
                if let ObjectStoreConfig::S3(s3) = store {
                    s3.endpoint = Some(endpoint.clone());
                    any = true;
                }
            }
            if !any {
                return Err(ConfigError::Env {
                    var: "LAKESTREAM_S3_ENDPOINT".into(),
                    key: "storage.wal.endpoint, storage.compacted.endpoint".into(),
                    message: "is set, but neither storage.wal nor storage.compacted uses backend = \"s3\""
                        .into(),
                });
            }
        }
        if let Some(addresses) = var("LAKESTREAM_OXIA_ADDRESSES") {
            let list: Vec<String> =
                addresses.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
            if list.is_empty() {
                return Err(ConfigError::Env {
                    var: "LAKESTREAM_OXIA_ADDRESSES".into(),
                    key: "metadata.addresses".into(),
                    message: "names no address".into(),
                });
            }
            self.service.metadata =
                match std::mem::replace(&mut self.service.metadata, MetadataConfig::Memory) {
                    MetadataConfig::Oxia {
                        namespace,
                        service_name,
                        session_timeout,
                        request_timeout,
                        bearer_token,
                        tls,
                        tls_ca_file,
                        tls_domain,
                        ..
                    } => MetadataConfig::Oxia {
                        addresses: list,
                        namespace,
                        service_name,
                        session_timeout,
                        request_timeout,
                        bearer_token,
                        tls,
                        tls_ca_file,
                        tls_domain,
                    },
                    _ => MetadataConfig::oxia(list),
                };
        }
        Ok(())
    }

    /// Checks every part's settings, naming the key of a bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.service.validate()?;
        self.server.validate()?;
        self.kafka.validate()?;
        Ok(())
    }
}

impl From<InvalidSetting> for ConfigError {
    fn from(e: InvalidSetting) -> Self {
        ConfigError::Invalid { key: e.key, message: e.message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(name, value)` pairs, as `std::env::vars` yields them.
    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn writer_file() -> (String, PathBuf) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/writer.toml");
        (std::fs::read_to_string(&path).unwrap(), path)
    }

    #[test]
    fn the_dev_document_is_the_dev_config() {
        let dir = Path::new("/tmp/a \"quoted\" dir");
        let addr: std::net::SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let text = Config::dev_toml(dir, addr);
        let parsed = Config::from_toml(&text, Path::new("dev")).unwrap();
        let dev = ServiceConfig::dev(dir);
        assert_eq!(format!("{:?}", parsed.service.storage), format!("{:?}", dev.storage));
        assert_eq!(format!("{:?}", parsed.service.metadata), format!("{:?}", dev.metadata));
        assert_eq!(parsed.service.tables, dev.tables);
        assert!(dev.tables.uri.as_deref().is_some_and(|u| u.ends_with("dir/catalog.db")));
        assert_eq!(parsed.server.http.addr, addr);
    }

    #[test]
    fn every_setting_comes_from_the_environment_by_one_rule() {
        let (text, path) = writer_file();
        let from_file = Config::from_toml(&text, &path).unwrap();
        assert_eq!(from_file.service.writer.flush_window, Duration::from_millis(250));
        let config = Config::from_toml_and_env(
            &text,
            &path,
            env(&[
                // A duration over the file's value.
                ("LAKESTREAM_WRITER__FLUSH_WINDOW", "20ms"),
                // A number, a boolean, three levels deep, a list: over the file's values.
                ("LAKESTREAM_HTTP__MAX_BODY_BYTES", "1024"),
                ("LAKESTREAM_ROLES__CATALOG", "false"),
                ("LAKESTREAM_STORAGE__WAL__BUCKET", "other-bucket"),
                ("LAKESTREAM_METADATA__ADDRESSES", "[oxia-0:6648, oxia-1:6648]"),
                // A key the file does not set (over the default).
                ("LAKESTREAM_READER__INDEX_CACHE_TTL", "2s"),
                ("LAKESTREAM_COMPACTOR_SCHEDULE__GC_INTERVAL", "1m"),
            ]),
        )
        .unwrap();
        assert_eq!(config.service.writer.flush_window, Duration::from_millis(20));
        assert_eq!(config.server.http.max_body_bytes, 1024);
        assert!(!config.service.roles.catalog && config.service.roles.writer, "{:?}", config.service.roles);
        match (&config.service.storage.wal, &config.service.storage.compacted) {
            (ObjectStoreConfig::S3(wal), ObjectStoreConfig::S3(compacted)) => {
                assert_eq!((wal.bucket.as_str(), wal.prefix.as_deref()), ("other-bucket", Some("wal")));
                assert_eq!(compacted.bucket, "lakestream");
            }
            other => panic!("{other:?}"),
        }
        match &config.service.metadata {
            MetadataConfig::Oxia { addresses, namespace, .. } => {
                assert_eq!(addresses, &["oxia-0:6648", "oxia-1:6648"]);
                assert_eq!(namespace, "default");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(config.service.reader.index_cache_ttl, Duration::from_secs(2));
        assert_eq!(config.service.compactor_schedule.gc_interval, Duration::from_secs(60));
        // What no variable names stays as the file (or the default) has it.
        assert_eq!(config.service.writer.flush_bytes, from_file.service.writer.flush_bytes);
        assert_eq!(config.server.http.addr, from_file.server.http.addr);
        assert_eq!(config.service.compactor_schedule.interval, Duration::from_secs(10));
        config.validate().unwrap();
    }

    #[test]
    fn the_aliases_still_set_their_keys() {
        let (text, path) = writer_file();
        let config = Config::from_toml_and_env(
            &text,
            &path,
            env(&[
                ("LAKESTREAM_HTTP_ADDR", "0.0.0.0:9999"),
                ("LAKESTREAM_GRPC_ADDR", "0.0.0.0:9998"),
                ("LAKESTREAM_OXIA_ADDRESSES", "a:1,b:2"),
                ("LAKESTREAM_S3_ENDPOINT", "http://seaweedfs:8333"),
                ("LAKESTREAM_CLOUDEVENTS_DEDUP_WINDOW", "30m"),
            ]),
        )
        .unwrap();
        assert_eq!(config.server.http.addr.port(), 9999);
        assert_eq!(config.server.grpc.addr.map(|a| a.port()), Some(9998));
        assert!(
            matches!(&config.service.metadata, MetadataConfig::Oxia { addresses, .. } if addresses == &["a:1", "b:2"])
        );
        assert!(
            matches!(&config.service.storage.compacted, ObjectStoreConfig::S3(s3) if s3.endpoint.as_deref() == Some("http://seaweedfs:8333"))
        );
        assert_eq!(config.service.cloudevents.dedup_window, Duration::from_secs(1800));
        let err = Config::from_toml_and_env(&text, &path, env(&[("LAKESTREAM_HTTP_ADDR", "nope")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("LAKESTREAM_HTTP_ADDR") && err.contains("http.addr"), "{err}");
    }

    #[test]
    fn an_alias_and_the_general_name_of_its_key_together_are_refused() {
        let (text, path) = writer_file();
        for (alias, general) in [
            (("LAKESTREAM_HTTP_ADDR", "0.0.0.0:1"), ("LAKESTREAM_HTTP__ADDR", "0.0.0.0:2")),
            (("LAKESTREAM_S3_ENDPOINT", "http://a"), ("LAKESTREAM_STORAGE__COMPACTED__ENDPOINT", "http://b")),
            (("LAKESTREAM_OXIA_ADDRESSES", "a:1"), ("LAKESTREAM_METADATA__ADDRESSES", "[b:1]")),
        ] {
            let err =
                Config::from_toml_and_env(&text, &path, env(&[alias, general])).unwrap_err().to_string();
            assert!(err.contains(alias.0) && err.contains(general.0), "{err}");
        }
    }

    #[test]
    fn a_mistyped_setting_variable_is_refused_naming_it() {
        let (text, path) = writer_file();
        for (var, unknown) in [
            ("LAKESTREAM_WRITER__FLUSH_WINDW", "flush_windw"),
            ("LAKESTREAM_WRITR__FLUSH_WINDOW", "writr"),
            ("LAKESTREAM_STORAGE__WAL__BUCKIT", "buckit"),
        ] {
            let err = Config::from_toml_and_env(&text, &path, env(&[(var, "10ms")])).unwrap_err();
            let message = err.to_string();
            assert!(matches!(err, ConfigError::Env { .. }), "{message}");
            assert!(message.contains(var) && message.contains(unknown), "{message}");
        }
        // Not a key at all: an empty level.
        for var in ["LAKESTREAM_WRITER____FLUSH_WINDOW", "LAKESTREAM_WRITER__", "LAKESTREAM___WRITER"] {
            let err = Config::from_toml_and_env(&text, &path, env(&[(var, "10ms")])).unwrap_err();
            assert!(err.to_string().contains(var), "{err}");
        }
    }

    #[test]
    fn variables_for_other_purposes_are_not_settings() {
        let (text, path) = writer_file();
        let others = env(&[
            ("LAKESTREAM_TOOLS", "/opt/tools"),
            ("LAKESTREAM_BIN", "target/debug/lakestream"),
            ("LAKESTREAM_OXIA_BIN", "/opt/oxia"),
            ("LAKESTREAM_TEST_S3_ENDPOINT", "http://127.0.0.1:1"),
            ("LAKESTREAM_TEST_OXIA", "127.0.0.1:2"),
            ("LAKESTREAM_E2E_SEED", "7"),
            ("LAKESTREAM_CHECKER_SEED", "x"),
            ("LAKESTREAM_SOAK_SECS", "not a number"),
            ("LAKESTREAM_INTEROP_SEED", "1"),
            ("LAKESTREAM_FUZZ_SECONDS", "3"),
            ("LAKESTREAM_SKIP_FUZZ", "1"),
            ("LAKESTREAM_KEEP_OXIA_CLUSTER", "1"),
            ("LAKESTREAM_TOKEN", "hunter2-hunter2-hunter2"),
            ("LAKESTREAM_INGEST_TOKEN", "hunter2-hunter2-hunter2"),
            ("LAKESTREAM_DATA_DIR", "/tmp/x"),
            ("LAKESTREAM_URL", "http://x"),
            ("LAKESTREAM_S3_BUCKET", "elsewhere"),
            ("OTHER__THING", "1"),
            ("lakestream_writer__flush_window", "1ms"),
        ]);
        let with = Config::from_toml_and_env(&text, &path, others).unwrap();
        let without = Config::from_toml(&text, &path).unwrap();
        assert_eq!(format!("{with:?}"), format!("{without:?}"));
    }

    #[test]
    fn a_bad_value_from_the_environment_names_the_variable_and_the_key() {
        let (text, path) = writer_file();
        for (var, value, key) in [
            ("LAKESTREAM_WRITER__FLUSH_WINDOW", "soon", "writer.flush_window"),
            ("LAKESTREAM_HTTP__MAX_BODY_BYTES", "lots", "http.max_body_bytes"),
            ("LAKESTREAM_ROLES__READER", "maybe", "roles.reader"),
            ("LAKESTREAM_GRPC__ADDR", "nowhere", "grpc.addr"),
            ("LAKESTREAM_STORAGE__WAL__MAX_ATTEMPTS", "-1", "storage.wal"),
        ] {
            let err = Config::from_toml_and_env(&text, &path, env(&[(var, value)])).unwrap_err();
            let message = err.to_string();
            assert!(matches!(err, ConfigError::Env { .. }), "{message}");
            assert!(message.contains(var) && message.contains(key), "{message}");
        }
        // A value that parses but breaks a rule: `validate` names the key.
        let config =
            Config::from_toml_and_env(&text, &path, env(&[("LAKESTREAM_WRITER__FLUSH_WINDOW", "0ms")]))
                .unwrap();
        assert!(config.validate().unwrap_err().to_string().contains("writer.flush_window"));
        // A number where a string belongs: the error says how to quote it; quoted, it is read.
        let err =
            Config::from_toml_and_env(&text, &path, env(&[("LAKESTREAM_STORAGE__WAL__BUCKET", "12345")]))
                .unwrap_err()
                .to_string();
        assert!(err.contains("LAKESTREAM_STORAGE__WAL__BUCKET") && err.contains("quote"), "{err}");
        let config =
            Config::from_toml_and_env(&text, &path, env(&[("LAKESTREAM_STORAGE__WAL__BUCKET", "\"12345\"")]))
                .unwrap();
        assert!(matches!(&config.service.storage.wal, ObjectStoreConfig::S3(s3) if s3.bucket == "12345"));
    }

    #[test]
    fn a_backend_switched_from_the_environment_names_the_variable_and_the_file() {
        // The file's `metadata` is embedded (a `path`); switching to Oxia from the environment
        // leaves that key, which Oxia does not have.
        let text = "[metadata]\nbackend = \"embedded\"\npath = \"m.redb\"\n";
        let err = Config::from_toml_and_env(
            text,
            Path::new("x.toml"),
            env(&[("LAKESTREAM_METADATA__BACKEND", "oxia"), ("LAKESTREAM_METADATA__ADDRESSES", "[a:1]")]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("LAKESTREAM_METADATA__BACKEND") && err.contains("x.toml"), "{err}");
        assert!(err.contains("path"), "{err}");
        // Over a file that says nothing of `metadata`, the variables choose it whole.
        let config = Config::from_toml_and_env(
            "",
            Path::new("x.toml"),
            env(&[("LAKESTREAM_METADATA__BACKEND", "oxia"), ("LAKESTREAM_METADATA__ADDRESSES", "[a:1]")]),
        )
        .unwrap();
        assert!(
            matches!(&config.service.metadata, MetadataConfig::Oxia { addresses, .. } if addresses == &["a:1"])
        );
    }

    #[test]
    fn producer_expiry_defaults_and_settings() {
        let defaults = Config::from_toml("", Path::new("x.toml")).unwrap().service.producers;
        assert_eq!(
            (defaults.idle_expiry, defaults.sweep_interval),
            (Duration::from_secs(7 * 24 * 3600), Duration::from_secs(3600))
        );
        let text = "[producers]\nidle_expiry = \"1day\"\nsweep_interval = \"10m\"\n";
        let set = Config::from_toml(text, Path::new("x.toml")).unwrap().service.producers;
        assert_eq!(
            (set.idle_expiry, set.sweep_interval),
            (Duration::from_secs(86_400), Duration::from_secs(600))
        );
        let err = Config::from_toml("[producers]\nidle_expiri = \"1d\"\n", Path::new("x.toml")).unwrap_err();
        assert!(err.to_string().contains("idle_expiri"), "{err}");
    }

    #[test]
    fn gcs_and_azure_roots_from_urls_or_keys() {
        let text = "[storage.wal]\nbackend = \"gcs\"\nurl = \"gs://lake-bucket/prod/wal\"\n\n\
                    [storage.compacted]\nbackend = \"azure\"\naccount = \"lakeacct\"\ncontainer = \"lake\"\n\
                    prefix = \"prod/compacted\"\naccess_key = \"hunter2key\"\n";
        let config = Config::from_toml(text, Path::new("x.toml")).unwrap();
        config.validate().unwrap();
        match (&config.service.storage.wal, &config.service.storage.compacted) {
            (ObjectStoreConfig::Gcs(gcs), ObjectStoreConfig::Azure(azure)) => {
                assert_eq!(gcs.validate().unwrap().to_string(), "lake-bucket/prod/wal");
                assert_eq!(azure.validate().unwrap().to_string(), "lake/prod/compacted");
            }
            other => panic!("{other:?}"),
        }
        let roots = lakestream_service::deployment::StorageRoots::of(&config.service.storage).unwrap();
        assert_eq!(
            (roots.wal.as_str(), roots.compacted.as_str()),
            ("gs://lake-bucket/prod/wal", "az://lake/prod/compacted")
        );
        assert!(!format!("{config:?}").contains("hunter2key"), "Debug hides the Azure key");
    }

    #[test]
    fn bad_gcs_and_azure_settings_name_the_key() {
        for (text, key) in [
            ("[storage.wal]\nbackend = \"gcs\"\nurl = \"s3://b/p\"\n", "storage.wal.url"),
            ("[storage.wal]\nbackend = \"gcs\"\nprefix = \"wal\"\n", "storage.wal.bucket"),
            ("[storage.compacted]\nbackend = \"azure\"\nurl = \"az://\"\n", "storage.compacted.url"),
            (
                "[storage.compacted]\nbackend = \"azure\"\ncontainer = \"lake\"\nmax_attempts = 0\n",
                "storage.compacted.max_attempts",
            ),
        ] {
            let err = Config::from_toml(text, Path::new("x.toml")).unwrap().validate().unwrap_err();
            assert!(matches!(&err, ConfigError::Invalid { key: k, .. } if k == key), "{text}: {err}");
        }
        // A key the backend does not have is refused when the file is read.
        let err =
            Config::from_toml("[storage.wal]\nbackend = \"gcs\"\nbuckett = \"b\"\n", Path::new("x.toml"))
                .unwrap_err()
                .to_string();
        assert!(err.contains("buckett"), "{err}");
        // A secret of a badly typed value is not shown.
        let err = Config::from_toml_and_env(
            "[storage.wal]\nbackend = \"azure\"\ncontainer = \"lake\"\n",
            Path::new("x.toml"),
            env(&[("LAKESTREAM_STORAGE__WAL__CONNECTION_STRING", "[hunter2secret]")]),
        )
        .unwrap_err()
        .to_string();
        assert!(!err.contains("hunter2secret"), "{err}");
    }

    #[test]
    fn secrets_from_the_environment_are_never_shown() {
        let text = "[metadata]\nbackend = \"oxia\"\naddresses = [\"oxia:6648\"]\n";
        // A token that reads as a number is the wrong type; the error must not show it.
        let err = Config::from_toml_and_env(
            text,
            Path::new("x.toml"),
            env(&[("LAKESTREAM_METADATA__BEARER_TOKEN", "987654321098")]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("LAKESTREAM_METADATA__BEARER_TOKEN"), "{err}");
        assert!(!err.contains("987654321098"), "{err}");
        let (text, path) = writer_file();
        let err = Config::from_toml_and_env(
            &text,
            &path,
            env(&[("LAKESTREAM_STORAGE__WAL__SECRET_ACCESS_KEY", "[hunter2secret]")]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("LAKESTREAM_STORAGE__WAL__SECRET_ACCESS_KEY"), "{err}");
        assert!(!err.contains("hunter2secret"), "{err}");
        // Set as strings they are used, and `Debug` hides them.
        let config = Config::from_toml_and_env(
            &text,
            &path,
            env(&[
                ("LAKESTREAM_STORAGE__WAL__ACCESS_KEY_ID", "AKIDEXAMPLE"),
                ("LAKESTREAM_STORAGE__WAL__SECRET_ACCESS_KEY", "hunter2secret"),
                ("LAKESTREAM_METADATA__BEARER_TOKEN", "\"987654321098\""),
            ]),
        )
        .unwrap();
        assert!(
            matches!(&config.service.storage.wal, ObjectStoreConfig::S3(s3) if s3.secret_access_key.as_deref() == Some("hunter2secret"))
        );
        assert!(
            matches!(&config.service.metadata, MetadataConfig::Oxia { bearer_token: Some(t), .. } if t == "987654321098")
        );
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2secret") && !shown.contains("987654321098"), "{shown}");
    }

    #[test]
    fn the_log_format_comes_from_the_file_then_the_environment() {
        let path = Path::new("test.toml");
        assert_eq!(Config::default().log.format, LogFormat::Text);
        let mut c = Config::from_toml("[log]\nformat = \"json\"\n", path).unwrap();
        assert_eq!(c.log.format, LogFormat::Json);
        c.apply_env(|v| (v == "LAKESTREAM_LOG_FORMAT").then(|| "text".to_string())).unwrap();
        assert_eq!(c.log.format, LogFormat::Text);
        let e = c.apply_env(|v| (v == "LAKESTREAM_LOG_FORMAT").then(|| "yaml".to_string())).unwrap_err();
        assert!(e.to_string().contains("LAKESTREAM_LOG_FORMAT"), "{e}");
        let e = Config::from_toml("[log]\nformat = \"xml\"\n", path).unwrap_err();
        assert!(e.to_string().contains("xml"), "{e}");
        assert!(Config::from_toml("[log]\nfromat = \"json\"\n", path).is_err(), "a typo is refused");
    }

    #[test]
    fn the_example_files_parse_and_validate() {
        for name in ["dev.toml", "writer.toml", "reader.toml", "compactor.toml"] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy").join(name);
            let config = Config::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
            config.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    /// The role files the Helm chart renders with its default values (kept equal to the
    /// chart's output by `scripts/check-deploy`) are valid service configurations.
    #[test]
    fn the_helm_charts_role_files_parse_and_validate() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/helm/lakestream/ci/expected");
        for (name, writer, reader, compactor) in [
            ("writer.toml", true, false, false),
            ("reader.toml", false, true, false),
            ("compactor.toml", false, false, true),
        ] {
            let config = Config::from_file(&dir.join(name)).unwrap_or_else(|e| panic!("{e}"));
            config.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                (config.service.roles.writer, config.service.roles.reader, config.service.roles.compactor),
                (writer, reader, compactor)
            );
            assert!(matches!(config.service.metadata, MetadataConfig::Oxia { .. }), "{name}");
            assert!(matches!(config.service.storage.wal, ObjectStoreConfig::S3(_)), "{name}");
            assert_eq!(config.server.listener.drain_delay, Duration::from_secs(5), "{name}");
        }
    }

    #[test]
    fn a_reader_cache_longer_than_the_grace_checks_allow_is_refused() {
        let mut config = Config::default();
        config.service.reader.index_cache_ttl =
            config.service.compactor.reader_index_cache_ttl + Duration::from_secs(1);
        assert!(config.validate().unwrap_err().to_string().contains("reader.index_cache_ttl"));
    }

    #[test]
    fn an_unknown_key_is_named() {
        let err = Config::from_toml("[writer]\nflush_windw = \"10ms\"\n", Path::new("x.toml")).unwrap_err();
        assert!(err.to_string().contains("flush_windw"), "{err}");
    }

    #[test]
    fn a_bad_value_is_named() {
        let config = Config::from_toml("[writer]\nflush_window = \"0ms\"\n", Path::new("x.toml")).unwrap();
        assert!(config.validate().unwrap_err().to_string().contains("writer.flush_window"));
        let err = Config::default().apply_env(|v| (v == "LAKESTREAM_HTTP_ADDR").then(|| "nope".into()));
        assert!(err.unwrap_err().to_string().contains("LAKESTREAM_HTTP_ADDR"));
    }

    #[test]
    fn the_cloudevents_dedup_window_is_read_and_limited() {
        let config =
            Config::from_toml("[cloudevents]\ndedup_window = \"25h\"\n", Path::new("x.toml")).unwrap();
        assert!(config.validate().unwrap_err().to_string().contains("cloudevents.dedup_window"));
        let mut config =
            Config::from_toml("[cloudevents]\ndedup_window = \"2h\"\n", Path::new("x.toml")).unwrap();
        assert_eq!(config.service.cloudevents.dedup_window, Duration::from_secs(7200));
        config.apply_env(|v| (v == "LAKESTREAM_CLOUDEVENTS_DEDUP_WINDOW").then(|| "30m".into())).unwrap();
        assert_eq!(config.service.cloudevents.dedup_window, Duration::from_secs(1800));
        let err = config.apply_env(|v| (v == "LAKESTREAM_CLOUDEVENTS_DEDUP_WINDOW").then(|| "soon".into()));
        assert!(err.unwrap_err().to_string().contains("LAKESTREAM_CLOUDEVENTS_DEDUP_WINDOW"));
    }

    #[test]
    fn environment_overrides_the_file() {
        let mut config = Config::default();
        config
            .apply_env(|v| match v {
                "LAKESTREAM_HTTP_ADDR" => Some("0.0.0.0:9999".into()),
                "LAKESTREAM_OXIA_ADDRESSES" => Some("oxia:6648, other:6648".into()),
                _ => None,
            })
            .unwrap();
        assert_eq!(config.server.http.addr.port(), 9999);
        assert!(
            matches!(&config.service.metadata, MetadataConfig::Oxia { addresses, .. } if addresses.len() == 2)
        );
    }

    #[test]
    fn the_s3_endpoint_comes_from_the_environment_for_every_s3_root() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/writer.toml");
        let mut config = Config::from_file(&path).unwrap();
        config
            .apply_env(|v| (v == "LAKESTREAM_S3_ENDPOINT").then(|| "http://seaweedfs:8333".into()))
            .unwrap();
        for store in [&config.service.storage.wal, &config.service.storage.compacted] {
            match store {
                ObjectStoreConfig::S3(s3) => {
                    assert_eq!(s3.endpoint.as_deref(), Some("http://seaweedfs:8333"))
                }
                other => panic!("{other:?}"),
            }
        }
        config.validate().unwrap();
        let err = Config::default()
            .apply_env(|v| (v == "LAKESTREAM_S3_ENDPOINT").then(|| "http://seaweedfs:8333".into()))
            .unwrap_err();
        assert!(err.to_string().contains("LAKESTREAM_S3_ENDPOINT"), "{err}");
    }

    #[test]
    fn debug_never_shows_the_oxia_bearer_token() {
        let text = "[metadata]\nbackend = \"oxia\"\naddresses = [\"oxia:6648\"]\nbearer_token = \"hunter2-hunter2-hunter2\"\n";
        let config = Config::from_toml(text, Path::new("x.toml")).unwrap();
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2") && shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn listener_limits_are_read_and_checked() {
        let config = Config::from_toml(
            "[listener]\nmax_connections = 5\nheader_read_timeout = \"2s\"\nidle_timeout = \"3s\"\n\
             tls_handshake_timeout = \"4s\"\nhttp2_max_concurrent_streams = 7\ndrain_delay = \"5s\"\n\
             http2_max_send_buf_size = 1048576\n",
            Path::new("x.toml"),
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.server.listener.max_connections, 5);
        assert_eq!(config.server.listener.header_read_timeout, Duration::from_secs(2));
        assert_eq!(config.server.listener.idle_timeout, Duration::from_secs(3));
        assert_eq!(config.server.listener.tls_handshake_timeout, Duration::from_secs(4));
        assert_eq!(config.server.listener.http2_max_concurrent_streams, 7);
        assert_eq!(config.server.listener.drain_delay, Duration::from_secs(5));
        assert_eq!(config.server.listener.http2_max_send_buf_size, 1 << 20);
        assert_eq!(Config::default().server.listener.http2_max_send_buf_size, 4 << 20);
        for (key, text) in [
            ("listener.max_connections", "max_connections = 0"),
            ("listener.max_connections", "max_connections = 1000001"),
            ("listener.idle_timeout", "idle_timeout = \"0s\""),
            ("listener.header_read_timeout", "header_read_timeout = \"0s\""),
            ("listener.tls_handshake_timeout", "tls_handshake_timeout = \"0s\""),
            ("listener.http2_max_concurrent_streams", "http2_max_concurrent_streams = 0"),
            ("listener.http2_max_send_buf_size", "http2_max_send_buf_size = 0"),
            ("listener.http2_max_send_buf_size", "http2_max_send_buf_size = 1073741825"),
        ] {
            let config = Config::from_toml(&format!("[listener]\n{text}\n"), Path::new("x.toml")).unwrap();
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
        let err = Config::from_toml("[listener]\nidle_timeot = \"1s\"\n", Path::new("x.toml")).unwrap_err();
        assert!(err.to_string().contains("idle_timeot"), "{err}");
    }

    #[test]
    fn kafka_is_off_unless_an_address_is_given_and_its_settings_are_checked() {
        let defaults = Config::default().kafka;
        assert!(defaults.addr.is_none());
        assert_eq!((defaults.node_id, defaults.max_request_bytes), (1, 100 << 20));
        let config = Config::from_toml(
            "[kafka]\naddr = \"127.0.0.1:9192\"\nadvertised_listener = \"lakestream:9092\"\nnode_id = 3\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(config.kafka.addr.map(|a| a.port()), Some(9192));
        assert_eq!(config.kafka.advertised_listener.as_deref(), Some("lakestream:9092"));
        assert_eq!(config.kafka.node_id, 3);
        config.validate().unwrap();
        let unknown = Config::from_toml("[kafka]\nadress = \"x\"\n", Path::new("x.toml"));
        assert!(unknown.unwrap_err().to_string().contains("adress"));
        for (change, key) in [
            (
                (|c: &mut KafkaConfig| c.advertised_listener = Some("no-port".into()))
                    as fn(&mut KafkaConfig),
                "kafka.advertised_listener",
            ),
            (|c: &mut KafkaConfig| c.max_request_bytes = 10, "kafka.max_request_bytes"),
            (|c: &mut KafkaConfig| c.default_partitions = 0, "kafka.default_partitions"),
            (|c: &mut KafkaConfig| c.node_id = -1, "kafka.node_id"),
            (
                |c: &mut KafkaConfig| c.coordinator_session_timeout = Duration::from_secs(1),
                "kafka.coordinator_session_timeout",
            ),
            (
                |c: &mut KafkaConfig| c.group_initial_rebalance_delay = Duration::from_secs(301),
                "kafka.group_initial_rebalance_delay",
            ),
        ] {
            let mut bad = config.clone();
            change(&mut bad.kafka);
            assert!(bad.validate().unwrap_err().to_string().contains(key), "{key}");
        }
    }

    #[test]
    fn grpc_is_off_unless_an_address_is_given() {
        assert!(Config::default().server.grpc.addr.is_none());
        let mut config = Config::from_toml(
            "[grpc]\naddr = \"127.0.0.1:9191\"\nmax_message_bytes = 1024\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(config.server.grpc.addr.map(|a| a.port()), Some(9191));
        assert_eq!(config.server.grpc.max_message_bytes, 1024);
        config.apply_env(|v| (v == "LAKESTREAM_GRPC_ADDR").then(|| "0.0.0.0:9292".into())).unwrap();
        assert_eq!(config.server.grpc.addr.map(|a| a.port()), Some(9292));
        let err = config.apply_env(|v| (v == "LAKESTREAM_GRPC_ADDR").then(|| "nope".into()));
        assert!(err.unwrap_err().to_string().contains("LAKESTREAM_GRPC_ADDR"));
        config.server.grpc.max_message_bytes = 0;
        assert!(config.validate().unwrap_err().to_string().contains("grpc.max_message_bytes"));
    }
}
