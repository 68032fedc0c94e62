//! JSON values parsed strictly: a duplicate key in any object is an error naming its JSON path (serde_json's
//! own `Value` keeps the last one silently, which let a second `ranges` member replace the real one).

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The marker that starts the message of a duplicate-key error (see [`duplicate_key_path`]).
pub(crate) const DUPLICATE: &str = "duplicate key ";

/// A JSON value that refuses duplicate keys; deserialize it where a `serde_json::Value` would be.
#[derive(Debug, Clone, PartialEq)]
pub struct StrictValue(pub Value);

impl<'de> serde::Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Seed { path: "$".to_string(), keep: true }.deserialize(d).map(StrictValue)
    }
}

/// Check that `text` is one JSON document a [`StrictValue`] reader accepts, with the same errors (a number
/// beyond f64, nesting of 128 levels or more, a lone surrogate escape, a duplicate key), without building the
/// value: only the keys of the objects being read are held.
pub fn check_strict(text: &str) -> serde_json::Result<()> {
    let mut de = serde_json::Deserializer::from_str(text);
    Seed { path: "$".to_string(), keep: false }.deserialize(&mut de)?;
    de.end()
}

/// `$.a.b`, `$.a[3]`, `$["odd key"]`.
pub fn push_key(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !key.starts_with(|c: char| c.is_ascii_digit());
    if plain {
        format!("{path}.{key}")
    } else {
        format!("{path}[{}]", serde_json::to_string(key).unwrap_or_default())
    }
}

struct Seed {
    path: String,
    /// Build the value (else only check it: arrays stay empty, members are null).
    keep: bool,
}

impl<'de> DeserializeSeed<'de> for Seed {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map(Value::Number).unwrap_or(Value::Null))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let (mut out, mut n) = (Vec::new(), 0usize);
        while let Some(v) = seq.next_element_seed(Seed { path: format!("{}[{n}]", self.path), keep: self.keep })? {
            n += 1;
            if self.keep {
                out.push(v);
            }
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = push_key(&self.path, &key);
            if out.contains_key(&key) {
                return Err(A::Error::custom(format!(
                    "{DUPLICATE}{key:?} at {path} (nsyskit will not guess which one counts)"
                )));
            }
            let v = map.next_value_seed(Seed { path, keep: self.keep })?;
            out.insert(key, if self.keep { v } else { Value::Null });
        }
        Ok(Value::Object(out))
    }
}

/// The JSON path named by a duplicate-key error message, when it is one.
pub fn duplicate_key_path(message: &str) -> Option<&str> {
    let rest = &message[message.find(DUPLICATE)?..];
    let at = rest.find(" at $")? + 4;
    let tail = &rest[at..];
    Some(&tail[..tail.find(" (nsyskit").unwrap_or(tail.len())])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_named_by_path() {
        let e = serde_json::from_str::<StrictValue>(r#"{"a": [1, {"b": 1, "b": 2}]}"#).unwrap_err().to_string();
        assert!(e.contains(r#"duplicate key "b" at $.a[1].b"#), "{e}");
        assert_eq!(duplicate_key_path(&e), Some("$.a[1].b"));
        let e = serde_json::from_str::<StrictValue>(r#"{"x y": {}, "x y": 1}"#).unwrap_err().to_string();
        assert!(e.contains(r#"at $["x y"]"#), "{e}");
        let v = serde_json::from_str::<StrictValue>(r#"{"n": 12345678901234567890, "f": 1.5, "s": "é", "z": null}"#)
            .unwrap();
        assert_eq!(v.0, serde_json::json!({"n": 12345678901234567890u64, "f": 1.5, "s": "é", "z": null}));
    }

    #[test]
    fn check_strict_refuses_what_strict_values_refuse() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        for text in [
            "{\"a\": 1e400}".to_string(),
            "[\"\\ud800\"]".to_string(),
            deep(128),
            "{\"a\": {\"b\": 1, \"b\": 2}}".to_string(),
            "{} {}".to_string(),
        ] {
            assert!(check_strict(&text).is_err(), "{text}");
            assert!(serde_json::from_str::<StrictValue>(&text).is_err(), "{text}");
        }
        for text in [deep(127), "{\"n\": 123456789012345678901234567890, \"p\": \"\\ud83d\\ude00\"}".to_string()] {
            assert!(check_strict(&text).is_ok(), "{text}");
            assert!(serde_json::from_str::<StrictValue>(&text).is_ok(), "{text}");
        }
        let e = check_strict("{\"a\": [{\"b\": 1, \"b\": 2}]}").unwrap_err().to_string();
        assert_eq!(duplicate_key_path(&e), Some("$.a[0].b"));
    }
}
