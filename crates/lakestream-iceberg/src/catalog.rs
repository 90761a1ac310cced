//! The catalog: the Iceberg SQL catalog (`iceberg-catalog-sql`) on SQLite or PostgreSQL,
//! with the compacted root as its file I/O; and `Pinned`, which makes one commit attempt
//! apply to exactly the table state it was prepared from.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{
    Catalog, CatalogBuilder, Error, ErrorKind, Namespace, NamespaceIdent, Result, TableCommit, TableCreation,
    TableIdent,
};
use iceberg_catalog_sql::{
    SQL_CATALOG_PROP_BIND_STYLE, SQL_CATALOG_PROP_URI, SQL_CATALOG_PROP_WAREHOUSE, SqlBindStyle,
    SqlCatalogBuilder,
};

use crate::config::{Database, TablesConfig, redact};
use crate::error::{TablesError, TablesResult};
use crate::storage::{ObjectStoreStorage, ObjectStoreStorageFactory};

/// How long connecting the catalog's database may take at start.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Connects the configured catalog; an error names `tables.uri` when the database cannot be
/// reached or set up.
pub async fn connect(
    config: &TablesConfig,
    storage: ObjectStoreStorage,
    warehouse: &str,
) -> TablesResult<Arc<dyn Catalog>> {
    let (database, uri) = database_uri(config)?;
    let bind_style = match database {
        Database::Sqlite => SqlBindStyle::QMark,
        Database::Postgres => SqlBindStyle::DollarNumeric,
    };
    let props = HashMap::from([
        (SQL_CATALOG_PROP_URI.to_owned(), uri),
        (SQL_CATALOG_PROP_WAREHOUSE.to_owned(), warehouse.to_owned()),
        (SQL_CATALOG_PROP_BIND_STYLE.to_owned(), bind_style.to_string()),
        // Few connections: one committer per process, a handful of tables at a time.
        ("pool.max-connections".to_owned(), "4".to_owned()),
    ]);
    let unreachable = |why: String| TablesError::Config {
        key: "tables.uri".into(),
        message: format!(
            "cannot open the {:?} catalog on {}: {why}",
            config.catalog,
            redact(config.uri.as_deref().unwrap_or_default())
        ),
    };
    let load = SqlCatalogBuilder::default()
        .with_storage_factory(Arc::new(ObjectStoreStorageFactory::new(storage)))
        .load(config.catalog_name.clone(), props);
    // The pool would keep trying an unreachable server for 30 s.
    let catalog = tokio::time::timeout(CONNECT_TIMEOUT, load)
        .await
        .map_err(|_| unreachable(format!("no answer within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| unreachable(e.to_string()))?;
    Ok(Arc::new(catalog))
}

/// The database kind and the URI sqlx opens.
fn database_uri(config: &TablesConfig) -> TablesResult<(Database, String)> {
    let (database, uri) = config.database()?;
    Ok(match database {
        // `mode=rwc` creates the database file when it is missing.
        Database::Sqlite if !uri.contains('?') => (database, format!("{uri}?mode=rwc")),
        _ => (database, uri.to_owned()),
    })
}

/// Swaps a table's metadata location in the SQL catalog (`iceberg_tables`) only while it is
/// still the one a commit was prepared from: the same compare-and-set (one SQL `UPDATE`) as
/// `iceberg-catalog-sql`'s `update_table`. It serves the commits that no public `iceberg`
/// 0.10.1 action makes (a snapshot that removes data files): `TableCommit` cannot be built
/// outside that crate, so such metadata is built with `TableMetadataBuilder` and swapped in
/// here.
#[derive(Debug, Clone)]
pub(crate) struct MetadataSwap {
    pool: sqlx::AnyPool,
    database: Database,
    catalog_name: String,
}

impl MetadataSwap {
    pub(crate) async fn connect(config: &TablesConfig) -> TablesResult<MetadataSwap> {
        let (database, uri) = database_uri(config)?;
        sqlx::any::install_default_drivers();
        let pool = sqlx::any::AnyPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(CONNECT_TIMEOUT)
            .connect_lazy(&uri)
            .map_err(|e| TablesError::Config {
                key: "tables.uri".into(),
                message: format!("cannot open {}: {e}", redact(config.uri.as_deref().unwrap_or_default())),
            })?;
        Ok(MetadataSwap { pool, database, catalog_name: config.catalog_name.clone() })
    }

    /// Sets the table's metadata location to `new` if it is `expected`; `Ok(false)` when it
    /// is not (another commit came first, or the table is gone).
    pub(crate) async fn swap(&self, table: &TableIdent, expected: &str, new: &str) -> Result<bool> {
        let sql = match self.database {
            Database::Sqlite => {
                "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? \
                 WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? AND metadata_location = ? \
                 AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)"
            }
            Database::Postgres => {
                "UPDATE iceberg_tables SET metadata_location = $1, previous_metadata_location = $2 \
                 WHERE catalog_name = $3 AND table_namespace = $4 AND table_name = $5 AND metadata_location = $6 \
                 AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)"
            }
        };
        let done = sqlx::query(sql)
            .bind(new)
            .bind(expected)
            .bind(&self.catalog_name)
            .bind(table.namespace().join("."))
            .bind(table.name())
            .bind(expected)
            .execute(&self.pool)
            .await
            .map_err(|e| {
                Error::new(ErrorKind::Unexpected, format!("swapping the metadata of {table}: {e}"))
            })?;
        Ok(done.rows_affected() == 1)
    }
}

/// A catalog whose `load_table` answers one fixed table state and whose errors are never
/// retryable: `Transaction::commit` then applies its actions to exactly that state (and the
/// snapshot requirement it adds makes the catalog refuse the commit if the table moved),
/// instead of silently re-applying them to a newer state after a conflict. The caller
/// re-reads the table and decides again.
#[derive(Debug)]
pub(crate) struct Pinned<'a> {
    pub(crate) inner: &'a dyn Catalog,
    pub(crate) table: Table,
}

fn final_error(e: Error) -> Error {
    if e.retryable() { Error::new(e.kind(), e.message().to_owned()).with_source(e) } else { e }
}

#[async_trait]
impl Catalog for Pinned<'_> {
    async fn list_namespaces(&self, parent: Option<&NamespaceIdent>) -> Result<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(parent).await
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        self.inner.create_namespace(namespace, properties).await
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        self.inner.get_namespace(namespace).await
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        self.inner.namespace_exists(namespace).await
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        self.inner.update_namespace(namespace, properties).await
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        self.inner.drop_namespace(namespace).await
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        self.inner.list_tables(namespace).await
    }

    async fn create_table(&self, namespace: &NamespaceIdent, creation: TableCreation) -> Result<Table> {
        self.inner.create_table(namespace, creation).await
    }

    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        if table != self.table.identifier() {
            return Err(Error::new(ErrorKind::Unexpected, format!("{table} is not the pinned table")));
        }
        Ok(self.table.clone())
    }

    async fn drop_table(&self, table: &TableIdent) -> Result<()> {
        self.inner.drop_table(table).await
    }

    async fn purge_table(&self, table: &TableIdent) -> Result<()> {
        self.inner.purge_table(table).await
    }

    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        self.inner.table_exists(table).await
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        self.inner.rename_table(src, dest).await
    }

    async fn register_table(&self, table: &TableIdent, metadata_location: String) -> Result<Table> {
        self.inner.register_table(table, metadata_location).await
    }

    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        self.inner.update_table(commit).await.map_err(final_error)
    }
}
