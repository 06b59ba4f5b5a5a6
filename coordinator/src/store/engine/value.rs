//! Values between Rust and either engine: SQLite's five storage classes, borrowed ([`ValueRef`])
//! or owned ([`Value`]), with the conversions to each engine's wire types.

use bytes::BytesMut;
use postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

/// A column value or parameter, borrowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::store) enum ValueRef<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
    Blob(&'a [u8]),
}

/// A column value or parameter, owned (what crosses to the PostgreSQL connection's thread).
#[derive(Debug, Clone, PartialEq)]
pub(in crate::store) enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}

impl ValueRef<'_> {
    /// The owned copy.
    pub(in crate::store) fn to_owned(self) -> Value {
        match self {
            ValueRef::Null => Value::Null,
            ValueRef::Int(i) => Value::Int(i),
            ValueRef::Real(f) => Value::Real(f),
            ValueRef::Text(t) => Value::Text(t.to_owned()),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        }
    }

    /// SQLite's value, with text that is not UTF-8 read as a blob (nothing the store writes).
    pub(super) fn from_sqlite(v: rusqlite::types::ValueRef<'_>) -> ValueRef<'_> {
        use rusqlite::types::ValueRef as S;
        match v {
            S::Null => ValueRef::Null,
            S::Integer(i) => ValueRef::Int(i),
            S::Real(f) => ValueRef::Real(f),
            S::Text(t) => std::str::from_utf8(t).map_or(ValueRef::Blob(t), ValueRef::Text),
            S::Blob(b) => ValueRef::Blob(b),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            ValueRef::Null => "NULL",
            ValueRef::Int(_) => "an integer",
            ValueRef::Real(_) => "a real",
            ValueRef::Text(_) => "text",
            ValueRef::Blob(_) => "a blob",
        }
    }
}

impl Value {
    /// The borrowed view.
    pub(in crate::store) fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Null => ValueRef::Null,
            Value::Int(i) => ValueRef::Int(*i),
            Value::Real(f) => ValueRef::Real(*f),
            Value::Text(t) => ValueRef::Text(t),
            Value::Blob(b) => ValueRef::Blob(b),
        }
    }
}

/// A Rust value that can be a statement's parameter.
pub(in crate::store) trait ToParam {
    /// The value, borrowed.
    fn to_value(&self) -> ValueRef<'_>;
}

macro_rules! int_param {
    ($($t:ty),*) => {$(
        impl ToParam for $t {
            fn to_value(&self) -> ValueRef<'_> {
                // Every integer the store writes fits (ids, counts, sizes); saturate rather than wrap.
                ValueRef::Int(i64::try_from(*self).unwrap_or(i64::MAX))
            }
        }
    )*};
}
int_param!(i8, i16, i32, i64, u8, u16, u32, u64, usize, isize);

impl ToParam for f64 {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Real(*self)
    }
}

impl ToParam for f32 {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Real(f64::from(*self))
    }
}

impl ToParam for bool {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Int(i64::from(*self))
    }
}

impl ToParam for str {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Text(self)
    }
}

impl ToParam for String {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Text(self)
    }
}

impl ToParam for [u8] {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Blob(self)
    }
}

impl ToParam for Vec<u8> {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Blob(self)
    }
}

impl ToParam for Value {
    fn to_value(&self) -> ValueRef<'_> {
        self.as_ref()
    }
}

impl ToParam for ValueRef<'_> {
    fn to_value(&self) -> ValueRef<'_> {
        *self
    }
}

impl<T: ToParam + ?Sized> ToParam for &T {
    fn to_value(&self) -> ValueRef<'_> {
        (**self).to_value()
    }
}

impl<T: ToParam> ToParam for Option<T> {
    fn to_value(&self) -> ValueRef<'_> {
        self.as_ref().map_or(ValueRef::Null, ToParam::to_value)
    }
}

impl rusqlite::ToSql for ValueRef<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef as S};
        Ok(ToSqlOutput::Borrowed(match *self {
            ValueRef::Null => S::Null,
            ValueRef::Int(i) => S::Integer(i),
            ValueRef::Real(f) => S::Real(f),
            ValueRef::Text(t) => S::Text(t.as_bytes()),
            ValueRef::Blob(b) => S::Blob(b),
        }))
    }
}

/// A Rust type a column can be read into.
pub(in crate::store) trait FromValue: Sized {
    /// The value converted, or why not.
    ///
    /// # Errors
    /// What was found and what was wanted.
    fn from_value(v: ValueRef<'_>) -> Result<Self, String>;
}

fn mismatch<T>(v: ValueRef<'_>, wanted: &str) -> Result<T, String> {
    Err(format!("{} cannot be read as {wanted}", v.kind()))
}

impl FromValue for i64 {
    fn from_value(v: ValueRef<'_>) -> Result<Self, String> {
        match v {
            ValueRef::Int(i) => Ok(i),
            // PostgreSQL's `sum` of integers is numeric; a whole real reads back as its integer.
            ValueRef::Real(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
            _ => mismatch(v, "an integer"),
        }
    }
}

macro_rules! int_from {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(v: ValueRef<'_>) -> Result<Self, String> {
                let i = i64::from_value(v)?;
                <$t>::try_from(i).map_err(|_| format!("{i} is out of range for {}", stringify!($t)))
            }
        }
    )*};
}
int_from!(i32, u32, u64, usize, u8, u16);

impl FromValue for f64 {
    fn from_value(v: ValueRef<'_>) -> Result<Self, String> {
        match v {
            ValueRef::Real(f) => Ok(f),
            ValueRef::Int(i) => Ok(i as f64),
            _ => mismatch(v, "a real"),
        }
    }
}

impl FromValue for bool {
    fn from_value(v: ValueRef<'_>) -> Result<Self, String> {
        match v {
            ValueRef::Int(i) => Ok(i != 0),
            _ => mismatch(v, "a boolean (an integer)"),
        }
    }
}

impl FromValue for String {
    fn from_value(v: ValueRef<'_>) -> Result<Self, String> {
        match v {
            ValueRef::Text(t) => Ok(t.to_owned()),
            _ => mismatch(v, "text"),
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(v: ValueRef<'_>) -> Result<Self, String> {
        match v {
            ValueRef::Blob(b) => Ok(b.to_vec()),
            _ => mismatch(v, "a blob"),
        }
    }
}

impl FromValue for Value {
    fn from_value(v: ValueRef<'_>) -> Result<Self, String> {
        Ok(v.to_owned())
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: ValueRef<'_>) -> Result<Self, String> {
        match v {
            ValueRef::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// Reads any column PostgreSQL sends as one of SQLite's storage classes.
impl<'a> FromSql<'a> for ValueRef<'a> {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(match *ty {
            Type::BOOL => ValueRef::Int(i64::from(bool::from_sql(ty, raw)?)),
            Type::INT2 => ValueRef::Int(i64::from(i16::from_sql(ty, raw)?)),
            Type::INT4 => ValueRef::Int(i64::from(i32::from_sql(ty, raw)?)),
            Type::INT8 => ValueRef::Int(i64::from_sql(ty, raw)?),
            Type::OID => ValueRef::Int(i64::from(u32::from_sql(ty, raw)?)),
            Type::FLOAT4 => ValueRef::Real(f64::from(f32::from_sql(ty, raw)?)),
            Type::FLOAT8 => ValueRef::Real(f64::from_sql(ty, raw)?),
            Type::NUMERIC => numeric(raw)?,
            Type::BYTEA => ValueRef::Blob(raw),
            Type::JSONB => ValueRef::Text(std::str::from_utf8(raw.get(1..).unwrap_or_default())?),
            _ => ValueRef::Text(<&str as FromSql>::from_sql(ty, raw).map_err(|_| {
                format!("a column of PostgreSQL type {ty} has no storage class here")
            })?),
        })
    }

    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(ValueRef::Null)
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// A binary `numeric` (sign, base-10000 digits, weight, scale) as an integer when it is whole and
/// fits, else a real.
fn numeric(raw: &[u8]) -> Result<ValueRef<'static>, Box<dyn std::error::Error + Sync + Send>> {
    let word = |i: usize| -> Result<u16, String> {
        raw.get(i * 2..i * 2 + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or_else(|| "a truncated numeric".to_owned())
    };
    let ndigits = word(0)? as usize;
    let weight = word(1)? as i16;
    let sign = word(2)?;
    let scale = word(3)?;
    if sign == 0xC000 {
        return Ok(ValueRef::Real(f64::NAN));
    }
    let mut whole: i128 = 0;
    let mut real = 0.0f64;
    let mut exact = scale == 0;
    for i in 0..ndigits {
        let digit = i128::from(word(4 + i)?);
        let power = i32::from(weight) - i as i32;
        real += digit as f64 * 10_000f64.powi(power);
        if power >= 0 && exact {
            whole = whole
                .checked_add(digit * 10_000i128.checked_pow(power as u32).unwrap_or(i128::MAX))
                .unwrap_or(i128::MAX);
        } else if digit != 0 {
            exact = false;
        }
    }
    let negative = sign == 0x4000;
    if exact && let Ok(i) = i64::try_from(whole) {
        return Ok(ValueRef::Int(if negative { -i } else { i }));
    }
    Ok(ValueRef::Real(if negative { -real } else { real }))
}

/// Writes a parameter as whatever type PostgreSQL inferred for it, the way SQLite would take it:
/// an integer into a real column, a number into text.
impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        let v = self.as_ref();
        let wrong = || -> Box<dyn std::error::Error + Sync + Send> {
            format!("{} cannot be sent as PostgreSQL type {ty}", v.kind()).into()
        };
        match (v, ty) {
            (ValueRef::Null, _) => return Ok(IsNull::Yes),
            (ValueRef::Int(i), &Type::INT8) => i.to_sql(ty, out)?,
            (ValueRef::Int(i), &Type::INT4) => i32::try_from(i)?.to_sql(ty, out)?,
            (ValueRef::Int(i), &Type::INT2) => i16::try_from(i)?.to_sql(ty, out)?,
            (ValueRef::Int(i), &Type::FLOAT8) => (i as f64).to_sql(ty, out)?,
            (ValueRef::Int(i), &Type::BOOL) => (i != 0).to_sql(ty, out)?,
            (ValueRef::Real(f), &Type::FLOAT8) => f.to_sql(ty, out)?,
            (ValueRef::Real(f), &Type::FLOAT4) => (f as f32).to_sql(ty, out)?,
            (ValueRef::Real(f), &Type::INT8) if f.fract() == 0.0 => (f as i64).to_sql(ty, out)?,
            (ValueRef::Blob(b), &Type::BYTEA) => b.to_sql(ty, out)?,
            (ValueRef::Text(t), &Type::JSONB) => {
                out.extend_from_slice(&[1]);
                out.extend_from_slice(t.as_bytes());
                IsNull::No
            }
            (ValueRef::Text(t), _) if <&str as ToSql>::accepts(ty) || *ty == Type::JSON => {
                out.extend_from_slice(t.as_bytes());
                IsNull::No
            }
            (ValueRef::Int(i), _) if <&str as ToSql>::accepts(ty) => {
                out.extend_from_slice(i.to_string().as_bytes());
                IsNull::No
            }
            (ValueRef::Real(f), _) if <&str as ToSql>::accepts(ty) => {
                out.extend_from_slice(f.to_string().as_bytes());
                IsNull::No
            }
            _ => return Err(wrong()),
        };
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_convert_as_sqlite_does() {
        assert_eq!(f64::from_value(ValueRef::Int(3)), Ok(3.0));
        assert_eq!(i64::from_value(ValueRef::Real(3.0)), Ok(3));
        assert!(i64::from_value(ValueRef::Real(3.5)).is_err());
        assert_eq!(Option::<i64>::from_value(ValueRef::Null), Ok(None));
        assert!(i64::from_value(ValueRef::Null).is_err());
        assert!(String::from_value(ValueRef::Int(1)).is_err());
        assert_eq!(bool::from_value(ValueRef::Int(1)), Ok(true));
        assert!(u32::from_value(ValueRef::Int(-1)).is_err());
    }

    #[test]
    fn numerics_decode_to_integers_or_reals() {
        // 12345678 = 1234 * 10000 + 5678: weight 1, scale 0.
        let raw = [0, 2, 0, 1, 0, 0, 0, 0, 0x04, 0xD2, 0x16, 0x2E];
        assert_eq!(numeric(&raw).unwrap(), ValueRef::Int(12_345_678));
        // -1.5 = -(1 + 5000/10000): weight 0, scale 1.
        let raw = [0, 2, 0, 0, 0x40, 0, 0, 1, 0, 1, 0x13, 0x88];
        assert_eq!(numeric(&raw).unwrap(), ValueRef::Real(-1.5));
        // 0: no digits.
        assert_eq!(
            numeric(&[0, 0, 0, 0, 0, 0, 0, 0]).unwrap(),
            ValueRef::Int(0)
        );
    }
}
