//! `db stats`: the database's size and the rows and bytes of every table and index.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::store::error::{StoreError, sql};
use crate::store::guard::sidecar;
use crate::store::open::Store;

/// A table or an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectKind {
    Table,
    Index,
}

/// The size of one table or index.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableStats {
    /// Its name (`sqlite_autoindex_…` for the index of a `UNIQUE` column).
    pub name: String,
    pub kind: ObjectKind,
    /// The table it belongs to (its own name for a table).
    pub table: String,
    /// Rows of a table; `None` for an index and for SQLite's own schema table.
    pub rows: Option<u64>,
    /// Bytes of its pages, overflow pages included; `None` when SQLite lacks `dbstat`.
    pub bytes: Option<u64>,
    /// Its pages; `None` when SQLite lacks `dbstat`.
    pub pages: Option<u64>,
}

/// The database file and its tables and indexes, largest first ([`Store::stats`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DbStats {
    /// The database file.
    pub path: PathBuf,
    /// Size of the file (`None` for an in-memory database).
    pub file_bytes: Option<u64>,
    /// Size of its `-wal` log, when there is one (0 once checkpointed, while a connection is open).
    pub wal_bytes: Option<u64>,
    pub page_size: u64,
    /// Pages of the database (the log's committed pages included).
    pub page_count: u64,
    /// Unused pages (a `VACUUM` would give them back).
    pub freelist_count: u64,
    pub schema_version: i64,
    /// Every table and index, by bytes (then name).
    pub tables: Vec<TableStats>,
}

impl DbStats {
    /// The database's size in pages times the page size (the file, once checkpointed).
    pub fn database_bytes(&self) -> u64 {
        self.page_size * self.page_count
    }
}

impl Store {
    /// Sizes of the database file and of its `-wal` log, where they exist (`None` for an
    /// in-memory database or a checkpointed-away log).
    pub fn file_sizes(&self) -> (Option<u64>, Option<u64>) {
        let file_size = |p: &Path| std::fs::metadata(p).ok().map(|m| m.len());
        (
            file_size(self.path()),
            file_size(&sidecar(self.path(), "-wal")),
        )
    }

    /// The database's size, page layout, and rows and bytes of every table and index, largest
    /// first. Bytes come from SQLite's `dbstat` table, which reads every page (a second per few
    /// GB); without it they are `None` and only rows are counted.
    ///
    /// # Errors
    /// [`StoreError::Db`] if a query fails.
    pub fn stats(&self) -> Result<DbStats, StoreError> {
        let context = "reading the database's sizes";
        let conn = self.sqlite_only(
            "`gpufleet db stats`",
            "ask the server (pg_total_relation_size, pg_stat_user_tables)",
        )?;
        let pragma = |name: &str| -> Result<i64, StoreError> {
            conn.pragma_query_value(None, name, |r| r.get(0))
                .map_err(sql(context))
        };
        let count = |table: &str| -> Result<u64, StoreError> {
            let quoted = table.replace('"', "\"\"");
            conn.query_row(&format!("SELECT count(*) FROM \"{quoted}\""), [], |r| {
                r.get::<_, i64>(0)
            })
            .map(non_negative)
            .map_err(sql(context))
        };
        let mut sizes = self.dbstat_sizes()?;
        let mut stmt = conn
            .prepare(
                "SELECT name, type, tbl_name FROM sqlite_schema
                 WHERE type IN ('table', 'index') AND rootpage > 0 ORDER BY name",
            )
            .map_err(sql(context))?;
        let objects: Vec<(String, String, String)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))?;
        let mut tables = Vec::with_capacity(objects.len() + 1);
        for (name, kind, table) in objects {
            let kind = if kind == "index" {
                ObjectKind::Index
            } else {
                ObjectKind::Table
            };
            let rows = match kind {
                ObjectKind::Table => Some(count(&name)?),
                ObjectKind::Index => None,
            };
            let size = sizes.as_mut().and_then(|s| s.remove(&name));
            tables.push(TableStats {
                name,
                kind,
                table,
                rows,
                bytes: size.map(|s| s.0),
                pages: size.map(|s| s.1),
            });
        }
        // What `dbstat` names beyond the schema's list: the schema table itself (its rows are
        // tables and indexes, not data, so they are not counted).
        for (name, (bytes, pages)) in sizes.into_iter().flatten() {
            tables.push(TableStats {
                table: name.clone(),
                rows: None,
                name,
                kind: ObjectKind::Table,
                bytes: Some(bytes),
                pages: Some(pages),
            });
        }
        tables.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name)));
        let (file_bytes, wal_bytes) = self.file_sizes();
        Ok(DbStats {
            path: self.path().to_path_buf(),
            file_bytes,
            wal_bytes,
            page_size: non_negative(pragma("page_size")?),
            page_count: non_negative(pragma("page_count")?),
            freelist_count: non_negative(pragma("freelist_count")?),
            schema_version: self.schema_version()?,
            tables,
        })
    }

    /// Bytes and pages per table or index from `dbstat`; `None` when this SQLite was built without
    /// it (`SQLITE_ENABLE_DBSTAT_VTAB`; the bundled one has it).
    fn dbstat_sizes(&self) -> Result<Option<HashMap<String, PageSizes>>, StoreError> {
        let context = "reading page sizes from dbstat";
        let Some(conn) = self.conn.as_sqlite() else {
            return Ok(None);
        };
        let mut stmt =
            match conn.prepare("SELECT name, sum(pgsize), count(*) FROM dbstat GROUP BY name") {
                Ok(stmt) => stmt,
                Err(e) if e.to_string().contains("no such table") => return Ok(None),
                Err(e) => return Err(sql(context)(e)),
            };
        let sizes = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    (
                        non_negative(r.get::<_, i64>(1)?),
                        non_negative(r.get::<_, i64>(2)?),
                    ),
                ))
            })
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))?;
        Ok(Some(sizes))
    }
}

/// Bytes and pages of one table or index, from `dbstat`.
type PageSizes = (u64, u64);

/// A count SQLite returns as `i64`, which is never negative.
pub(super) fn non_negative(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
