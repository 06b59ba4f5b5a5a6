//! JSON that was stored or received, read into a typed value with an error that names the field at
//! fault.
//!
//! serde_json's own errors say what is wrong and where in the text, not in which field: a stored
//! job spec with `"min_seconds": "x"`, a campaign whose `runs[2].warmup` is a string or a worker
//! line whose `times_s` is not a list must fail naming that field, never turn into a default or
//! an empty value. The coordinator (stored specs and descriptions) and the agent (its workers'
//! lines) read through here.

use serde::de::DeserializeOwned;

/// JSON without the shape the reader expects.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", describe(field, message))]
pub struct JsonError {
    /// Where the fault is (`min_seconds`, `runs[2].warmup`); empty when the document as a whole
    /// is wrong (not JSON, not an object).
    pub field: String,
    /// What is wrong, as serde says it.
    pub message: String,
}

fn describe(field: &str, message: &str) -> String {
    if field.is_empty() {
        message.to_string()
    } else {
        format!("field `{field}`: {message}")
    }
}

impl JsonError {
    fn of<E: std::fmt::Display>(e: serde_path_to_error::Error<E>) -> JsonError {
        let outer = e.path().to_string();
        let outer = if outer == "." { String::new() } else { outer };
        let message = e.into_inner().to_string();
        // A part read by [`flattened`] names its own field in its message: join the two paths.
        match message
            .strip_prefix("field `")
            .and_then(|rest| rest.split_once("`: "))
        {
            Some((inner, rest)) => JsonError {
                field: if outer.is_empty() {
                    inner.to_string()
                } else {
                    format!("{outer}.{inner}")
                },
                message: rest.to_string(),
            },
            None => JsonError {
                field: outer,
                message,
            },
        }
    }
}

/// For `#[serde(flatten, deserialize_with = "...")]`: reads the flattened part of a container
/// (the fields it keeps at its own top level) so that an error still names the field. serde reads
/// a flattened part through a buffer that loses the path, so a stored campaign with
/// `"timeout_s": "soon"` would otherwise fail without saying `timeout_s`.
///
/// # Errors
/// The part's error, naming the field.
pub fn flattened<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: DeserializeOwned,
{
    let value = <serde_json::Value as serde::Deserialize>::deserialize(d)?;
    from_json_value(&value).map_err(serde::de::Error::custom)
}

/// Parses `text` as a `T`.
///
/// # Errors
/// [`JsonError`] naming the field at fault (or the document, for text that is not JSON or has
/// trailing characters).
pub fn from_json_str<T: DeserializeOwned>(text: &str) -> Result<T, JsonError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut de).map_err(JsonError::of)?;
    de.end().map_err(|e| JsonError {
        field: String::new(),
        message: e.to_string(),
    })?;
    Ok(value)
}

/// Reads `value` (a stored JSON column) as a `T`.
///
/// # Errors
/// [`JsonError`] naming the field at fault.
pub fn from_json_value<T: DeserializeOwned>(value: &serde_json::Value) -> Result<T, JsonError> {
    serde_path_to_error::deserialize(value).map_err(JsonError::of)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Outcome {
        status: String,
        times_s: Vec<f64>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Stored {
        runs: Vec<Run>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Run {
        warmup: Option<u32>,
    }

    #[test]
    fn a_wrong_type_names_its_field() {
        let e = from_json_str::<Outcome>(r#"{"status": "ok", "times_s": "fast"}"#).unwrap_err();
        assert_eq!(e.field, "times_s");
        assert!(
            e.to_string()
                .starts_with("field `times_s`: invalid type: string \"fast\""),
            "{e}"
        );
        let v = serde_json::json!({"runs": [{"warmup": 1}, {"warmup": "x"}]});
        let e = from_json_value::<Stored>(&v).unwrap_err();
        assert_eq!(e.field, "runs[1].warmup");
        let e = from_json_str::<Outcome>(r#"{"status": "ok"}"#).unwrap_err();
        assert!(e.to_string().contains("missing field `times_s`"), "{e}");
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Outer {
        name: String,
        #[serde(flatten, deserialize_with = "flattened")]
        part: Run,
    }

    #[test]
    fn a_flattened_part_names_its_field_too() {
        let v = serde_json::json!({"name": "x", "warmup": 2});
        let o: Outer = from_json_value(&v).unwrap();
        assert_eq!(o.part.warmup, Some(2));
        let e = from_json_str::<Outer>(r#"{"name": "x", "warmup": "two"}"#).unwrap_err();
        assert_eq!(e.field, "warmup", "{e}");
        let e = from_json_value::<Vec<Outer>>(&serde_json::json!([{"name": "x", "warmup": -1}]))
            .unwrap_err();
        assert_eq!(e.field, "[0].warmup", "{e}");
        assert!(e.message.starts_with("invalid value: integer `-1`"), "{e}");
    }

    #[test]
    fn good_json_reads_and_broken_documents_say_so() {
        let o: Outcome = from_json_str(r#"{"status": "ok", "times_s": [1.0]}"#).unwrap();
        assert_eq!(o.times_s, [1.0]);
        let e = from_json_str::<Outcome>("7").unwrap_err();
        assert_eq!(e.field, "");
        assert!(
            e.to_string().starts_with("invalid type: integer `7`"),
            "{e}"
        );
        let e = from_json_str::<Outcome>(r#"{"status": "ok", "times_s": []} x"#).unwrap_err();
        assert!(e.to_string().contains("trailing characters"), "{e}");
    }
}
