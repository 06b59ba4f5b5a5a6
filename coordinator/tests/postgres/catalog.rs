//! What each engine's catalog says of a schema, read into one description ([`Schema`]) so that
//! `schema` can compare them.
//!
//! Types, mapped to a common name (SQLite's declared type; PostgreSQL's `format_type`):
//!
//! | common name | SQLite    | PostgreSQL         |
//! | ----------- | --------- | ------------------ |
//! | `integer`   | `INTEGER` | `bigint`           |
//! | `real`      | `REAL`    | `double precision` |
//! | `text`      | `TEXT`    | `text COLLATE "C"` |
//! | `blob`      | `BLOB`    | `bytea`            |
//!
//! Text is `COLLATE "C"` on PostgreSQL so that it compares and sorts byte by byte, as SQLite's
//! BINARY does (the baseline migration says so).
//!
//! PostgreSQL's `integer` and `smallint` stay `int4` and `int2`: SQLite's integers are 64-bit, so a
//! narrower column overflows on a value SQLite keeps. A text column in another collation is
//! `text collate NAME`; any other type keeps its engine's name (`sqlite:X`, `postgres:X`), so
//! it differs from everything on the other side.
//!
//! Normalised: nullability counts SQLite's implicit NOT NULL (the rowid alias, the primary key of
//! a WITHOUT ROWID table); a default loses PostgreSQL's `::type` casts and enclosing parentheses;
//! SQLite's rowid alias (`INTEGER PRIMARY KEY`) and a PostgreSQL identity column both default to
//! `generated id`; an index's `WHERE` loses its parentheses and case.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use rusqlite::types::ValueRef;

use super::super::rows;

/// A schema as both engines can say it: its tables by name.
pub(super) type Schema = BTreeMap<String, Table>;

#[derive(Debug, Default)]
pub(super) struct Table {
    pub(super) columns: Vec<Column>,
    pub(super) primary_key: Vec<String>,
    /// Unique constraints by their columns (each engine names them its own way).
    pub(super) uniques: BTreeSet<Vec<String>>,
    /// Indexes made by CREATE INDEX, by name: their columns, uniqueness and predicate.
    pub(super) indexes: BTreeMap<String, String>,
    /// Foreign keys by their columns: what they reference and their actions.
    pub(super) foreign_keys: BTreeMap<Vec<String>, String>,
    pub(super) triggers: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Column {
    pub(super) name: String,
    /// The common name ([module doc](self)).
    pub(super) ty: String,
    pub(super) not_null: bool,
    pub(super) default: Option<String>,
}

impl fmt::Display for Column {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.ty)?;
        if self.not_null {
            write!(f, " NOT NULL")?;
        }
        if let Some(d) = &self.default {
            write!(f, " DEFAULT {d}")?;
        }
        Ok(())
    }
}

/// `(a, b)`.
pub(super) fn list(columns: &[String]) -> String {
    format!("({})", columns.join(", "))
}

/// A default as both engines write it: without PostgreSQL's casts (`'x'::text`) and without
/// enclosing parentheses.
fn normalise_default(expr: &str) -> String {
    let mut e = expr.trim();
    loop {
        let before = e;
        if let Some(at) = e.rfind("::") {
            let ty = &e[at + 2..];
            if ty
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || " _[]\"".contains(c))
            {
                e = e[..at].trim_end();
            }
        }
        if e.starts_with('(') && e.ends_with(')') {
            e = e[1..e.len() - 1].trim();
        }
        if e == before {
            return e.to_owned();
        }
    }
}

/// An index's predicate in one spelling: no parentheses, lower case, single spaces, and without
/// the `::text` PostgreSQL writes after a string literal compared with a text column.
fn normalise_predicate(expr: &str) -> String {
    let bare: String = expr.chars().filter(|c| *c != '(' && *c != ')').collect();
    bare.replace("'::text", "'")
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn index_description(columns: &[String], unique: bool, predicate: Option<&str>) -> String {
    let unique = if unique { "unique " } else { "" };
    let predicate = predicate.map_or(String::new(), |p| {
        format!(" where {}", normalise_predicate(p))
    });
    format!("{unique}on {}{predicate}", list(columns))
}

fn reference(table: &str, columns: &[String], on_delete: &str, on_update: &str) -> String {
    let (d, u) = (on_delete.to_lowercase(), on_update.to_lowercase());
    format!("{table}{} on delete {d} on update {u}", list(columns))
}

/// The rows `sql` (with `?1` bound to `arg`) returns on SQLite, as text.
fn sqlite_rows(conn: &rusqlite::Connection, sql: &str, arg: &str) -> Vec<Vec<Option<String>>> {
    let mut stmt = conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let n = stmt.column_count();
    let params: &[&dyn rusqlite::ToSql] = if sql.contains("?1") { &[&arg] } else { &[] };
    stmt.query_map(params, |r| {
        (0..n)
            .map(|i| {
                Ok(match r.get_ref(i)? {
                    ValueRef::Null => None,
                    ValueRef::Integer(v) => Some(v.to_string()),
                    ValueRef::Real(v) => Some(v.to_string()),
                    ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(_) => Some("(blob)".to_owned()),
                })
            })
            .collect()
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// Field `i` of a catalog row (panics on NULL: the queries ask only for what is always there).
fn field(row: &[Option<String>], i: usize) -> String {
    row[i]
        .clone()
        .unwrap_or_else(|| panic!("column {i} of {row:?} is NULL"))
}

/// Comma-separated names as a list.
fn names(joined: &str) -> Vec<String> {
    joined.split(',').map(str::to_owned).collect()
}

/// What an SQLite database has, from its pragmas.
pub(super) fn sqlite_schema(conn: &rusqlite::Connection) -> Schema {
    let q = |sql: &str, arg: &str| sqlite_rows(conn, sql, arg);
    let mut schema = Schema::new();
    let tables = q(
        "SELECT name, wr FROM pragma_table_list
          WHERE schema = 'main' AND type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
        "",
    );
    for t in &tables {
        let (name, without_rowid) = (field(t, 0), field(t, 1) == "1");
        let mut table = Table::default();
        let columns = q(
            "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_xinfo(?1) ORDER BY cid",
            &name,
        );
        let mut pk: Vec<(i64, String)> = columns
            .iter()
            .filter(|c| field(c, 4) != "0")
            .map(|c| (field(c, 4).parse().unwrap(), field(c, 0)))
            .collect();
        pk.sort();
        table.primary_key = pk.into_iter().map(|(_, c)| c).collect();
        for c in &columns {
            let (col, decl) = (field(c, 0), field(c, 1).to_uppercase());
            let in_pk = field(c, 4) != "0";
            let rowid_alias =
                in_pk && !without_rowid && table.primary_key.len() == 1 && decl == "INTEGER";
            table.columns.push(Column {
                ty: match decl.as_str() {
                    "INTEGER" => "integer".into(),
                    "REAL" => "real".into(),
                    "TEXT" => "text".into(),
                    "BLOB" => "blob".into(),
                    other => format!("sqlite:{other}"),
                },
                not_null: field(c, 2) == "1" || rowid_alias || (in_pk && without_rowid),
                default: if rowid_alias {
                    Some("generated id".into())
                } else {
                    c[3].as_deref().map(normalise_default)
                },
                name: col,
            });
        }
        for i in q(
            "SELECT name, \"unique\", origin, partial FROM pragma_index_list(?1)",
            &name,
        ) {
            let index = field(&i, 0);
            let cols: Vec<String> = q(
                "SELECT name FROM pragma_index_info(?1) ORDER BY seqno",
                &index,
            )
            .iter()
            .map(|c| c[0].clone().unwrap_or_else(|| "(expression)".into()))
            .collect();
            match field(&i, 2).as_str() {
                "pk" => {}
                "u" => {
                    table.uniques.insert(cols);
                }
                _ => {
                    let sql = q("SELECT sql FROM sqlite_schema WHERE name = ?1", &index);
                    let sql = field(&sql[0], 0);
                    let predicate = (field(&i, 3) == "1")
                        .then(|| sql.to_lowercase().rfind(" where ").map(|at| &sql[at + 7..]))
                        .flatten();
                    let desc = index_description(&cols, field(&i, 1) == "1", predicate);
                    table.indexes.insert(index, desc);
                }
            }
        }
        // One row per column of each foreign key; the key's rows share its id.
        let mut fks: BTreeMap<String, Vec<Vec<Option<String>>>> = BTreeMap::new();
        let fk_rows = q(
            "SELECT id, \"table\", \"from\", \"to\", on_delete, on_update
               FROM pragma_foreign_key_list(?1) ORDER BY id, seq",
            &name,
        );
        for r in fk_rows {
            fks.entry(field(&r, 0)).or_default().push(r);
        }
        for rows in fks.into_values() {
            let to_table = field(&rows[0], 1);
            let from: Vec<String> = rows.iter().map(|r| field(r, 2)).collect();
            // No columns named: the referenced table's primary key.
            let to: Vec<String> = if rows.iter().all(|r| r[3].is_none()) {
                q(
                    "SELECT name FROM pragma_table_info(?1) WHERE pk > 0 ORDER BY pk",
                    &to_table,
                )
                .iter()
                .map(|r| field(r, 0))
                .collect()
            } else {
                rows.iter().map(|r| field(r, 3)).collect()
            };
            let (on_delete, on_update) = (field(&rows[0], 4), field(&rows[0], 5));
            let to = reference(&to_table, &to, &on_delete, &on_update);
            table.foreign_keys.insert(from, to);
        }
        schema.insert(name, table);
    }
    for t in q(
        "SELECT tbl_name, name FROM sqlite_schema WHERE type = 'trigger'",
        "",
    ) {
        let table = schema.entry(field(&t, 0)).or_default();
        table.triggers.insert(field(&t, 1));
    }
    schema
}

/// The names of `conkey`-like attribute numbers of relation `rel`, comma-separated, in order.
fn pg_names(keys: &str, rel: &str) -> String {
    format!(
        "(SELECT string_agg(coalesce(a.attname, '(expression)'), ',' ORDER BY k.i)
            FROM unnest({keys}) WITH ORDINALITY k(n, i)
            LEFT JOIN pg_attribute a ON a.attrelid = {rel} AND a.attnum = k.n)"
    )
}

/// What a PostgreSQL database has (its current schema), from pg_catalog.
pub(super) fn postgres_schema(url: &str) -> Schema {
    let q = |sql: &str| rows(url, sql);
    let mut schema = Schema::new();
    let in_schema = "c.relnamespace = current_schema()::regnamespace";
    for t in q(&format!(
        "SELECT c.relname FROM pg_class c WHERE {in_schema} AND c.relkind IN ('r', 'p')"
    )) {
        schema.insert(field(&t, 0), Table::default());
    }
    let columns = q(&format!(
        "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                pg_get_expr(d.adbin, d.adrelid), a.attidentity, coll.collname
           FROM pg_attribute a
           JOIN pg_class c ON c.oid = a.attrelid
           LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
           LEFT JOIN pg_collation coll ON coll.oid = a.attcollation
          WHERE {in_schema} AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
          ORDER BY c.relname, a.attnum"
    ));
    for c in columns {
        let ty = match (field(&c, 2).as_str(), c[6].as_deref()) {
            ("bigint", _) => "integer".to_owned(),
            ("integer", _) => "int4".to_owned(),
            ("smallint", _) => "int2".to_owned(),
            ("double precision", _) => "real".to_owned(),
            ("bytea", _) => "blob".to_owned(),
            ("text", Some("C")) => "text".to_owned(),
            ("text", coll) => format!("text collate {}", coll.unwrap_or("(none)")),
            (other, _) => format!("postgres:{other}"),
        };
        let identity = !field(&c, 5).is_empty();
        let table = schema.entry(field(&c, 0)).or_default();
        table.columns.push(Column {
            name: field(&c, 1),
            ty,
            not_null: field(&c, 3) == "t",
            default: if identity {
                Some("generated id".into())
            } else {
                c[4].as_deref().map(normalise_default)
            },
        });
    }
    let constraints = q(&format!(
        "SELECT c.relname, co.contype, {}, r.relname, {}, co.confdeltype, co.confupdtype
           FROM pg_constraint co
           JOIN pg_class c ON c.oid = co.conrelid
           LEFT JOIN pg_class r ON r.oid = co.confrelid
          WHERE {in_schema} AND co.contype IN ('p', 'u', 'f')",
        pg_names("co.conkey", "co.conrelid"),
        pg_names("co.confkey", "co.confrelid"),
    ));
    let action = |code: &str| match code {
        "a" => "no action",
        "r" => "restrict",
        "c" => "cascade",
        "n" => "set null",
        "d" => "set default",
        other => panic!("unknown foreign key action {other:?}"),
    };
    for co in constraints {
        let table = schema.entry(field(&co, 0)).or_default();
        let cols = names(&field(&co, 2));
        match field(&co, 1).as_str() {
            "p" => table.primary_key = cols,
            "u" => {
                table.uniques.insert(cols);
            }
            _ => {
                let (d, u) = (action(&field(&co, 5)), action(&field(&co, 6)));
                let to = reference(&field(&co, 3), &names(&field(&co, 4)), d, u);
                table.foreign_keys.insert(cols, to);
            }
        }
    }
    let indexes = q(&format!(
        "SELECT c.relname, i.relname, x.indisunique, {}, pg_get_expr(x.indpred, x.indrelid)
           FROM pg_index x
           JOIN pg_class i ON i.oid = x.indexrelid
           JOIN pg_class c ON c.oid = x.indrelid
          WHERE {in_schema} AND NOT EXISTS (
                SELECT 1 FROM pg_constraint co
                 WHERE co.conindid = x.indexrelid AND co.conrelid = x.indrelid)",
        pg_names("x.indkey::int2[]", "x.indrelid"),
    ));
    for i in indexes {
        let desc = index_description(&names(&field(&i, 3)), field(&i, 2) == "t", i[4].as_deref());
        schema
            .entry(field(&i, 0))
            .or_default()
            .indexes
            .insert(field(&i, 1), desc);
    }
    let triggers = q(&format!(
        "SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
          WHERE {in_schema} AND NOT t.tgisinternal"
    ));
    for t in triggers {
        schema
            .entry(field(&t, 0))
            .or_default()
            .triggers
            .insert(field(&t, 1));
    }
    schema
}

/// How many columns, primary keys, unique constraints, indexes, foreign keys and triggers
/// `schema` has: a reader that finds none of a kind is broken, and two broken readers agree.
pub(super) fn kinds_read(schema: &Schema) -> [usize; 6] {
    let count = |f: fn(&Table) -> usize| schema.values().map(f).sum();
    [
        count(|t| t.columns.len()),
        count(|t| usize::from(!t.primary_key.is_empty())),
        count(|t| t.uniques.len()),
        count(|t| t.indexes.len()),
        count(|t| t.foreign_keys.len()),
        count(|t| t.triggers.len()),
    ]
}
