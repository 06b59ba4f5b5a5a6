//! A statement's parameters: how the store gives them (`[]`, `[x]`, `params![a, b]`,
//! `named_params! {":a": a}`, a `Vec`) and how each engine takes them: bound to an SQLite
//! statement, or written into PostgreSQL's `$N` spelling with the values in that order.

use super::value::{ToParam, Value};

/// A statement's parameters: positional (`?1`, `?2`, …) or named (`:name`).
#[derive(Clone, Copy)]
pub(in crate::store) enum Params<'a> {
    /// `?N` takes the N-th.
    Positional(&'a [&'a dyn ToParam]),
    /// `:name` takes the value paired with `":name"`.
    Named(&'a [(&'a str, &'a dyn ToParam)]),
}

/// What a statement's parameters can be given as: `[]`, `[x]`, `params![a, b]`,
/// `named_params! {":a": a}`.
pub(in crate::store) trait IntoParams {
    /// The parameters, borrowed.
    fn with_params<R>(&self, f: impl FnOnce(Params<'_>) -> R) -> R;
}

impl IntoParams for &[&dyn ToParam] {
    fn with_params<R>(&self, f: impl FnOnce(Params<'_>) -> R) -> R {
        f(Params::Positional(self))
    }
}

impl IntoParams for &[(&str, &dyn ToParam)] {
    fn with_params<R>(&self, f: impl FnOnce(Params<'_>) -> R) -> R {
        f(Params::Named(self))
    }
}

/// `[]`: no parameters (one impl for the empty array, so `[]` needs no type).
impl IntoParams for [&dyn ToParam; 0] {
    fn with_params<R>(&self, f: impl FnOnce(Params<'_>) -> R) -> R {
        f(Params::Positional(&[]))
    }
}

/// `values` as positional parameters.
fn positional<T: ToParam, R>(values: &[T], f: impl FnOnce(Params<'_>) -> R) -> R {
    let refs: Vec<&dyn ToParam> = values.iter().map(|v| v as &dyn ToParam).collect();
    f(Params::Positional(&refs))
}

macro_rules! array_params {
    ($($n:literal)*) => {$(
        impl<T: ToParam> IntoParams for [T; $n] {
            fn with_params<R>(&self, f: impl FnOnce(Params<'_>) -> R) -> R {
                positional(self, f)
            }
        }
    )*};
}
array_params!(1 2 3 4 5 6 7 8);

impl<T: ToParam> IntoParams for Vec<T> {
    fn with_params<R>(&self, f: impl FnOnce(Params<'_>) -> R) -> R {
        positional(self, f)
    }
}

/// Positional parameters, as `rusqlite::params!`.
macro_rules! params {
    () => { &[] as &[&dyn $crate::store::engine::ToParam] };
    ($($p:expr),+ $(,)?) => { &[$(&$p as &dyn $crate::store::engine::ToParam),+] as &[&dyn $crate::store::engine::ToParam] };
}

/// Named parameters, as `rusqlite::named_params!`.
macro_rules! named_params {
    ($($n:literal : $p:expr),+ $(,)?) => {
        &[$(($n, &$p as &dyn $crate::store::engine::ToParam)),+] as &[(&str, &dyn $crate::store::engine::ToParam)]
    };
}

// `pub(in crate::store)`: re-exported by `engine` for the store's modules.
pub(in crate::store) use {named_params, params};

/// Binds `params` to an SQLite statement.
pub(super) fn sqlite_bind<'s, 'c>(
    stmt: &'s mut rusqlite::CachedStatement<'c>,
    params: Params<'_>,
) -> rusqlite::Result<&'s mut rusqlite::CachedStatement<'c>> {
    match params {
        Params::Positional(values) => {
            let expected = stmt.parameter_count();
            if values.len() != expected {
                return Err(rusqlite::Error::InvalidParameterCount(
                    values.len(),
                    expected,
                ));
            }
            for (i, v) in values.iter().enumerate() {
                stmt.raw_bind_parameter(i + 1, v.to_value())?;
            }
        }
        Params::Named(pairs) => {
            for (name, v) in pairs {
                let Some(i) = stmt.parameter_index(name)? else {
                    return Err(rusqlite::Error::InvalidParameterName((*name).to_owned()));
                };
                stmt.raw_bind_parameter(i, v.to_value())?;
            }
        }
    }
    Ok(stmt)
}

/// `sql` in PostgreSQL's spelling of parameters, and the values in `$N` order: `?N` becomes `$N`,
/// a bare `?` the next number, `:name` the position of `name` among named parameters. String
/// literals, quoted names, comments and `::` casts are left alone.
pub(super) fn pg_sql(sql: &str, params: Params<'_>) -> (String, Vec<Value>) {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + 8);
    let mut next = 0usize;
    let mut i = 0;
    let mut copied = 0;
    let names: Vec<&str> = match params {
        Params::Named(pairs) => pairs.iter().map(|(n, _)| *n).collect(),
        Params::Positional(_) => Vec::new(),
    };
    while i < bytes.len() {
        match bytes[i] {
            q @ (b'\'' | b'"') => {
                i += 1;
                while i < bytes.len() && bytes[i] != q {
                    i += 1;
                }
                i += 1;
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b':' if bytes.get(i + 1) == Some(&b':') => i += 2,
            b'?' => {
                out.push_str(&sql[copied..i]);
                i += 1;
                let start = i;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                let n = if start == i {
                    next += 1;
                    next
                } else {
                    let n: usize = sql[start..i].parse().unwrap_or(0);
                    next = next.max(n);
                    n
                };
                out.push_str(&format!("${n}"));
                copied = i;
            }
            b':' if !names.is_empty()
                && bytes
                    .get(i + 1)
                    .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_') =>
            {
                let start = i;
                i += 1;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                if let Some(pos) = names.iter().position(|n| *n == &sql[start..i]) {
                    out.push_str(&sql[copied..start]);
                    out.push_str(&format!("${}", pos + 1));
                    copied = i;
                }
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[copied..]);
    let values = match params {
        Params::Positional(values) => values.iter().map(|v| v.to_value().to_owned()).collect(),
        Params::Named(pairs) => pairs.iter().map(|(_, v)| v.to_value().to_owned()).collect(),
    };
    (out, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_sql_numbers_parameters_and_leaves_literals_alone() {
        let (sql, values) = pg_sql(
            "SELECT '?1', \"a?\", x::text FROM t WHERE a = ?2 AND b = ?1 -- ?3\n AND c = ?",
            Params::Positional(params![1i64, "x", 2.5f64]),
        );
        assert_eq!(
            sql,
            "SELECT '?1', \"a?\", x::text FROM t WHERE a = $2 AND b = $1 -- ?3\n AND c = $3"
        );
        assert_eq!(values.len(), 3);
        let (sql, values) = pg_sql(
            "INSERT INTO t VALUES (:b, :a, :b, ':a')",
            Params::Named(named_params! {":a": 1i64, ":b": "two"}),
        );
        assert_eq!(sql, "INSERT INTO t VALUES ($2, $1, $2, ':a')");
        assert_eq!(values, vec![Value::Int(1), Value::Text("two".into())]);
    }
}
