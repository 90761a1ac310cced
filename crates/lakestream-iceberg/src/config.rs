//! `[tables]`: which streams are tables, the catalog, where table files go, file sizes and
//! commit retries. Every field has a default; [`TablesConfig::validate`] names the key of a bad
//! setting (`tables.{field}`).

use std::time::Duration;

use serde::Deserialize;

use crate::error::TablesError;

/// The stream property, and the `[tables]` key, that make a stream a table.
pub const TABLE_PROPERTY: &str = "table";
/// The value of [`TABLE_PROPERTY`] that makes a stream an Iceberg table.
pub const TABLE_ICEBERG: &str = "iceberg";
/// The value of [`TABLE_PROPERTY`] that keeps a stream out of tables.
pub const TABLE_NONE: &str = "none";

/// The catalog kinds this crate implements.
pub const KNOWN_CATALOGS: &[&str] = &["sql"];

/// Settings of stream tables (`[tables]` in the server's configuration).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TablesConfig {
    /// Which streams are tables when their `table` property does not say: `none` (default;
    /// only streams whose properties set `table = "iceberg"`) or `iceberg` (every stream
    /// except those setting `table = "none"`).
    pub table: String,
    /// The catalog kind. `sql` (default): the Iceberg SQL catalog (the `iceberg_tables` and
    /// `iceberg_namespace_properties` tables that pyiceberg, Spark's JdbcCatalog and Trino's
    /// JDBC catalog share), on SQLite or PostgreSQL.
    pub catalog: String,
    /// The catalog's database, as sqlx takes it: `sqlite:///abs/path/catalog.db` (created if
    /// missing) or `postgres://user:password@host:port/database`. Required once any stream
    /// can be a table.
    pub uri: Option<String>,
    /// The catalog name (the `catalog_name` column). Default `lakestream`; readers must use
    /// the same name.
    pub catalog_name: String,
    /// The prefix, inside the compacted root, under which tables live
    /// (`{prefix}/{namespace}/{stream}/data|metadata/…`). Default `_iceberg`. Never a name
    /// the compactor's collector touches: it only deletes `ls-{L}-{uuid}.parquet` files.
    pub prefix: String,
    /// The URI under which readers (Spark, Trino, pyiceberg, DuckDB) reach the compacted
    /// root, e.g. `s3://bucket/compacted`; table locations are `{root_uri}/{prefix}/…`. The
    /// server derives it from `storage.compacted` when unset (`file://`, `s3://`, `gs://`,
    /// `abfss://`).
    pub root_uri: Option<String>,
    /// A data file is closed once it holds about this many bytes. Default 128 MiB: each open
    /// data file is built in memory.
    pub target_file_bytes: u64,
    /// Row groups hold about this many uncompressed bytes. Default 8 MiB.
    pub row_group_bytes: usize,
    /// The Parquet codec of data files: `zstd` (default, level 3), `snappy` or `uncompressed`.
    pub codec: String,
    /// How many times one commit is attempted (conflicts with other committers, catalog
    /// errors) before it is left for the next pass. Default 4.
    pub commit_attempts: u32,
    /// How often the committer looks for compacted ranges not yet in their tables, besides
    /// being woken by each compacted range. Default 30 s.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// How much payload one read of a compacted range asks the reader for. Default 8 MiB.
    pub read_chunk_bytes: usize,
    /// The most payload of one log read for one commit; a longer backlog is committed in
    /// several. Default 256 MiB (the entries and the files being built are held in memory).
    pub max_commit_bytes: u64,
    /// How often the committer runs a table's maintenance: snapshot expiry, the deletion of
    /// unreferenced files, and the dropping of tables whose stream was dropped. Default
    /// 10 min. (Trims are applied on every pass.)
    #[serde(with = "humantime_serde")]
    pub maintenance_interval: Duration,
    /// Snapshots older than this are expired (except the newest `min_snapshots` and the
    /// current one). Default 1 h: time travel reaches back this far.
    #[serde(with = "humantime_serde")]
    pub snapshot_max_age: Duration,
    /// The newest snapshots kept whatever their age. Default 10; at least 1.
    pub min_snapshots: usize,
    /// A file under a table's location that no snapshot (and no metadata version in the
    /// table's metadata log) refers to is deleted once it is this old. Default 1 h; it must
    /// exceed the time a commit takes from writing its first file to swapping the metadata,
    /// so that no file of an ongoing commit is taken for an orphan.
    #[serde(with = "humantime_serde")]
    pub orphan_grace: Duration,
}

impl Default for TablesConfig {
    fn default() -> Self {
        TablesConfig {
            table: TABLE_NONE.to_owned(),
            catalog: "sql".to_owned(),
            uri: None,
            catalog_name: "lakestream".to_owned(),
            prefix: "_iceberg".to_owned(),
            root_uri: None,
            target_file_bytes: 128 << 20,
            row_group_bytes: 8 << 20,
            codec: "zstd".to_owned(),
            commit_attempts: 4,
            interval: Duration::from_secs(30),
            read_chunk_bytes: 8 << 20,
            max_commit_bytes: 256 << 20,
            maintenance_interval: Duration::from_secs(600),
            snapshot_max_age: Duration::from_secs(3600),
            min_snapshots: 10,
            orphan_grace: Duration::from_secs(3600),
        }
    }
}

/// A Parquet codec of table data files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// Zstandard, level 3.
    Zstd,
    /// Snappy.
    Snappy,
    /// None.
    Uncompressed,
}

fn invalid(key: &str, message: impl Into<String>) -> TablesError {
    TablesError::Config { key: format!("tables.{key}"), message: message.into() }
}

impl TablesConfig {
    /// Whether a stream with these properties is a table: its `table` property, else
    /// [`TablesConfig::table`].
    pub fn is_table(&self, table_property: Option<&str>) -> bool {
        table_property.unwrap_or(&self.table) == TABLE_ICEBERG
    }

    /// Whether any stream can be a table without a stream property saying so.
    pub fn all_streams(&self) -> bool {
        self.table == TABLE_ICEBERG
    }

    /// The codec.
    pub fn codec(&self) -> Result<Codec, TablesError> {
        match self.codec.as_str() {
            "zstd" => Ok(Codec::Zstd),
            "snappy" => Ok(Codec::Snappy),
            "uncompressed" => Ok(Codec::Uncompressed),
            other => Err(invalid("codec", format!("{other:?} is not a codec (zstd, snappy, uncompressed)"))),
        }
    }

    /// Checks every setting that needs no connection; names the key of the first bad one.
    /// `uri` is checked only when `needs_catalog` (a process that commits tables).
    pub fn validate(&self, needs_catalog: bool) -> Result<(), TablesError> {
        check_table_value("table", &self.table)?;
        if !KNOWN_CATALOGS.contains(&self.catalog.as_str()) {
            return Err(invalid(
                "catalog",
                format!("unknown catalog {:?} (known: {})", self.catalog, KNOWN_CATALOGS.join(", ")),
            ));
        }
        if self.catalog_name.trim().is_empty() {
            return Err(invalid("catalog_name", "must not be empty"));
        }
        if self.prefix.is_empty()
            || self.prefix.starts_with('/')
            || self.prefix.ends_with('/')
            || self.prefix.split('/').any(|s| s.is_empty() || s == "." || s == "..")
        {
            return Err(invalid("prefix", format!("{:?} is not a relative object path", self.prefix)));
        }
        if let Some(root) = &self.root_uri
            && (!root.contains("://") || root.ends_with('/'))
        {
            return Err(invalid("root_uri", format!("{root:?} is not a URI without a trailing '/'")));
        }
        if self.target_file_bytes < 1 << 20 {
            return Err(invalid("target_file_bytes", "must be at least 1 MiB"));
        }
        if self.row_group_bytes < 64 << 10 {
            return Err(invalid("row_group_bytes", "must be at least 64 KiB"));
        }
        self.codec()?;
        if self.commit_attempts == 0 {
            return Err(invalid("commit_attempts", "must be at least 1"));
        }
        if self.interval < Duration::from_millis(100) {
            return Err(invalid("interval", "must be at least 100ms"));
        }
        if self.read_chunk_bytes < 64 << 10 {
            return Err(invalid("read_chunk_bytes", "must be at least 64 KiB"));
        }
        if self.max_commit_bytes < 1 << 20 {
            return Err(invalid("max_commit_bytes", "must be at least 1 MiB"));
        }
        if self.maintenance_interval < Duration::from_millis(100) {
            return Err(invalid("maintenance_interval", "must be at least 100ms"));
        }
        if self.min_snapshots == 0 {
            return Err(invalid("min_snapshots", "must be at least 1 (the current snapshot is always kept)"));
        }
        if needs_catalog {
            self.database()?;
        }
        Ok(())
    }

    /// The catalog database: its kind (`sqlite` or `postgres`) and URI; an error naming
    /// `tables.uri` when it is missing or of another kind.
    pub fn database(&self) -> Result<(Database, &str), TablesError> {
        let uri = self.uri.as_deref().ok_or_else(|| {
            invalid("uri", "is required: the catalog database (sqlite:///path/catalog.db or postgres://…)")
        })?;
        let database = if uri.starts_with("sqlite:") {
            Database::Sqlite
        } else if uri.starts_with("postgres://") || uri.starts_with("postgresql://") {
            Database::Postgres
        } else {
            return Err(invalid("uri", format!("{} is neither sqlite: nor postgres://", redact(uri))));
        };
        Ok((database, uri))
    }
}

/// The SQL catalog's database kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Database {
    /// SQLite (what `lakestream dev` uses).
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

/// Checks a `table` value (the stream property or the `[tables]` default).
pub fn check_table_value(key: &str, value: &str) -> Result<(), TablesError> {
    if value == TABLE_ICEBERG || value == TABLE_NONE {
        return Ok(());
    }
    Err(TablesError::Config {
        key: if key.contains('.') { key.to_owned() } else { format!("tables.{key}") },
        message: format!("{value:?} is not a table kind ({TABLE_ICEBERG:?} or {TABLE_NONE:?})"),
    })
}

/// A database URI with its password replaced by `***`, for messages.
pub fn redact(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else { return uri.to_owned() };
    let Some((userinfo, host)) = rest.split_once('@') else { return uri.to_owned() };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => uri.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_name_their_key() {
        let bad = |f: fn(&mut TablesConfig)| {
            let mut c = TablesConfig { uri: Some("sqlite:///tmp/c.db".into()), ..TablesConfig::default() };
            f(&mut c);
            c.validate(true).unwrap_err().to_string()
        };
        assert!(bad(|c| c.catalog = "hive".into()).contains("tables.catalog"));
        assert!(bad(|c| c.catalog = "hive".into()).contains("unknown catalog \"hive\""));
        assert!(bad(|c| c.table = "delta".into()).contains("tables.table"));
        assert!(bad(|c| c.uri = None).contains("tables.uri"));
        assert!(bad(|c| c.uri = Some("mysql://x".into())).contains("tables.uri"));
        assert!(bad(|c| c.prefix = "/abs".into()).contains("tables.prefix"));
        assert!(bad(|c| c.codec = "brotli".into()).contains("tables.codec"));
        assert!(bad(|c| c.commit_attempts = 0).contains("tables.commit_attempts"));
        assert!(bad(|c| c.root_uri = Some("s3://b/".into())).contains("tables.root_uri"));
        assert!(bad(|c| c.min_snapshots = 0).contains("tables.min_snapshots"));
        assert!(bad(|c| c.maintenance_interval = Duration::ZERO).contains("tables.maintenance_interval"));
        // A process that commits nothing needs no catalog database.
        TablesConfig::default().validate(false).unwrap();
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact("sqlite:///tmp/x.db"), "sqlite:///tmp/x.db");
    }

    #[test]
    fn the_stream_property_wins_over_the_default() {
        let all = TablesConfig { table: TABLE_ICEBERG.into(), ..TablesConfig::default() };
        assert!(all.is_table(None));
        assert!(!all.is_table(Some("none")));
        let none = TablesConfig::default();
        assert!(!none.is_table(None));
        assert!(none.is_table(Some("iceberg")));
    }
}
