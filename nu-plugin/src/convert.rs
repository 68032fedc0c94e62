//! The generic layer between nsyskit's JSON documents and Nushell values.
//!
//! # JSON → Nushell ([`json_to_nu`])
//! * objects → records (key order kept), arrays → lists (a list of records is a table), `null` → nothing,
//!   booleans → bool, strings → string, numbers → int when they fit an `i64`, float otherwise.
//! * Typed cells, in place (issue #41: a companion column next to each one made tables twice as wide). The key
//!   stays the document's own, so `select`, `get`, `sort-by` and the field names of docs/*.md work as written,
//!   and the value stays exact: a Nushell `duration` is an `i64` of nanoseconds, a `filesize` an `i64` of bytes.
//!   - key `<stem>_ns` or `<stem>_ns_<rest>` with an integer value → `duration` (`host_wall_time_ns`,
//!     `wall_ns_median`): `sort-by host_wall_time_ns` sorts by the exact nanoseconds, `where host_wall_time_ns >
//!     10ms` compares, `math sum` adds, `into int` gives the integer back;
//!   - key `bytes`, `<stem>_bytes`, `size` or `<stem>_size` with an integer value → `filesize`.
//!
//!   A float or `null` under such a key stays as it is.
//! * Timestamps: a string value under a key `captured_at`, `timestamp`, `date`, `time_utc`, `*_at`, `*_utc`
//!   that parses as RFC 3339 becomes a `date` (the string is not kept; it converts back exactly to an RFC 3339
//!   text of the same instant).
//!
//! # Nushell → JSON ([`nu_to_json`])
//! The reverse, so that a record from the pipeline is accepted wherever a binary takes a JSON document:
//! records → objects, lists → arrays, nothing → null, int/float/bool/string as such, `date` → RFC 3339 text
//! (`Z` for UTC), a `duration` → integer nanoseconds, a `filesize` → integer bytes, a glob → string: a document
//! goes through Nushell and back byte for byte. Closures, ranges, binary data and plugin custom values have no
//! JSON form: an error naming the cell path.

use chrono::{DateTime, FixedOffset, SecondsFormat};
use nu_protocol::{LabeledError, Record, ShellError, Span, Value};
use serde_json::{Map, Number, Value as Json};

/// The type an integer under a key becomes in Nushell (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Typed {
    Duration,
    Filesize,
}

/// The typing rule for one key (see the module docs): `None` when an integer under it stays an int.
pub fn typed_for(key: &str) -> Option<Typed> {
    if key.strip_suffix("_ns").is_some_and(|stem| !stem.is_empty()) {
        return Some(Typed::Duration);
    }
    if key.find("_ns_").is_some_and(|i| i > 0 && i + 4 < key.len()) {
        return Some(Typed::Duration);
    }
    if key == "bytes" || key == "size" || key.ends_with("_size") {
        return Some(Typed::Filesize);
    }
    if key.strip_suffix("_bytes").is_some_and(|stem| !stem.is_empty()) {
        return Some(Typed::Filesize);
    }
    None
}

/// Whether a string under this key is read as an RFC 3339 timestamp.
pub fn is_timestamp_key(key: &str) -> bool {
    matches!(key, "captured_at" | "timestamp" | "date" | "time_utc" | "utc")
        || (key.len() > 3 && key.ends_with("_at"))
        || (key.len() > 4 && key.ends_with("_utc"))
}

fn parse_rfc3339(s: &str) -> Option<DateTime<FixedOffset>> {
    DateTime::parse_from_rfc3339(s).ok()
}

/// A JSON number as a Nushell value: int when it fits an `i64`, float otherwise.
fn number_to_nu(n: &Number, span: Span) -> Value {
    if let Some(i) = n.as_i64() {
        Value::int(i, span)
    } else if let Some(f) = n.as_f64() {
        Value::float(f, span)
    } else {
        // unreachable without serde_json's arbitrary_precision; keep the text rather than lose it
        Value::string(n.to_string(), span)
    }
}

/// Any JSON value (an nsyskit document, a bundle) as a Nushell value, with typed cells.
pub fn json_to_nu(json: &Json, span: Span) -> Value {
    match json {
        Json::Null => Value::nothing(span),
        Json::Bool(b) => Value::bool(*b, span),
        Json::Number(n) => number_to_nu(n, span),
        Json::String(s) => Value::string(s.clone(), span),
        Json::Array(items) => Value::list(items.iter().map(|v| json_to_nu(v, span)).collect(), span),
        Json::Object(map) => Value::record(object_to_record(map, span), span),
    }
}

fn object_to_record(map: &Map<String, Json>, span: Span) -> Record {
    let mut record = Record::with_capacity(map.len());
    for (key, value) in map {
        let converted = match (value, typed_for(key), value.as_i64()) {
            (Json::String(s), _, _) if is_timestamp_key(key) => match parse_rfc3339(s) {
                Some(dt) => Value::date(dt, span),
                None => Value::string(s.clone(), span),
            },
            (_, Some(Typed::Duration), Some(i)) => Value::duration(i, span),
            (_, Some(Typed::Filesize), Some(i)) => Value::filesize(i, span),
            (other, _, _) => json_to_nu(other, span),
        };
        record.push(key.clone(), converted);
    }
    record
}

/// A date as JSON text: RFC 3339, `Z` for UTC, as many fraction digits as needed.
pub fn date_to_json(dt: &DateTime<FixedOffset>) -> String {
    let utc = dt.offset().local_minus_utc() == 0;
    dt.to_rfc3339_opts(SecondsFormat::AutoSi, utc)
}

/// A Nushell value (from the pipeline, or an argument) as JSON.
/// Errors name the cell path at fault (`$.gates.0.measured`), with the value's span.
pub fn nu_to_json(value: &Value) -> Result<Json, ShellError> {
    to_json_at(value, &mut vec!["$".to_string()])
}

fn to_json_at(value: &Value, path: &mut Vec<String>) -> Result<Json, ShellError> {
    let span = value.span();
    Ok(match value {
        Value::Nothing { .. } => Json::Null,
        Value::Bool { val, .. } => Json::Bool(*val),
        Value::Int { val, .. } => Json::from(*val),
        Value::Float { val, .. } => match Number::from_f64(*val) {
            Some(n) => Json::Number(n),
            None => return Err(no_json(path, "a non-finite float", span)),
        },
        Value::String { val, .. } => Json::String(val.clone()),
        Value::Glob { val, .. } => Json::String(val.clone()),
        Value::Date { val, .. } => Json::String(date_to_json(val)),
        Value::Duration { val, .. } => Json::from(*val),
        Value::Filesize { val, .. } => Json::from(val.get()),
        Value::CellPath { val, .. } => Json::String(val.to_string()),
        Value::List { vals, .. } => {
            let mut out = Vec::with_capacity(vals.len());
            for (i, v) in vals.iter().enumerate() {
                path.push(i.to_string());
                out.push(to_json_at(v, path)?);
                path.pop();
            }
            Json::Array(out)
        }
        Value::Record { val, .. } => {
            let mut out = Map::new();
            for (k, v) in val.iter() {
                path.push(k.clone());
                out.insert(k.clone(), to_json_at(v, path)?);
                path.pop();
            }
            Json::Object(out)
        }
        Value::Error { error, .. } => return Err((**error).clone()),
        other => return Err(no_json(path, &format!("a {}", other.get_type()), span)),
    })
}

fn no_json(path: &[String], what: &str, span: Span) -> ShellError {
    LabeledError::new(format!("{} is {what}, which has no JSON form", path.join(".")))
        .with_label("cannot be sent to an nsyskit command as JSON", span)
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn roundtrip(j: Json) -> Json {
        nu_to_json(&json_to_nu(&j, Span::test_data())).unwrap()
    }

    #[test]
    fn integers_are_typed_in_place() {
        let v = json_to_nu(
            &json!({"host_wall_time_ns": 1_500_000, "transfer_bytes": 2048, "bytes": 4, "size": 7,
                    "nested": [{"gap_ns": 3, "wall_ns_min": 4}], "ns": 5, "x_ns": 1.5, "y_ns": null, "span": 2}),
            Span::test_data(),
        );
        let r = v.as_record().unwrap();
        let cols: Vec<&str> = r.columns().map(|s| s.as_str()).collect();
        assert_eq!(
            cols,
            ["host_wall_time_ns", "transfer_bytes", "bytes", "size", "nested", "ns", "x_ns", "y_ns", "span"],
            "no column is added: a table is as wide as the document"
        );
        assert_eq!(r.get("host_wall_time_ns"), Some(&Value::test_duration(1_500_000)));
        assert_eq!(r.get("transfer_bytes"), Some(&Value::test_filesize(2048)));
        assert_eq!(r.get("bytes"), Some(&Value::test_filesize(4)));
        assert_eq!(r.get("size"), Some(&Value::test_filesize(7)));
        let nested = r.get("nested").unwrap().as_list().unwrap()[0].as_record().unwrap();
        assert_eq!(nested.get("gap_ns"), Some(&Value::test_duration(3)));
        assert_eq!(nested.get("wall_ns_min"), Some(&Value::test_duration(4)));
        assert_eq!(r.get("ns"), Some(&Value::test_int(5)));
        assert_eq!(r.get("x_ns"), Some(&Value::test_float(1.5)));
        assert_eq!(r.get("y_ns"), Some(&Value::test_nothing()));
        assert_eq!(r.get("span"), Some(&Value::test_int(2)));
        // exact beyond 2^53 (a float would round it)
        let big = json!({"t_ns": 9_007_199_254_740_993i64});
        assert_eq!(
            json_to_nu(&big, Span::test_data()).as_record().unwrap().get("t_ns"),
            Some(&Value::test_duration(9_007_199_254_740_993))
        );
        assert_eq!(roundtrip(big.clone()), big);
    }

    #[test]
    fn timestamps_become_dates_and_convert_back() {
        let j = json!({"captured_at": "2026-11-29T22:45:59Z", "start_utc": "2026-11-29T22:45:59.123456+01:00",
                       "label_at": "not a date", "name": "2026-11-29T22:45:59Z"});
        let v = json_to_nu(&j, Span::test_data());
        let r = v.as_record().unwrap();
        assert!(matches!(r.get("captured_at"), Some(Value::Date { .. })));
        assert!(matches!(r.get("start_utc"), Some(Value::Date { .. })));
        assert_eq!(r.get("label_at"), Some(&Value::test_string("not a date")));
        assert_eq!(r.get("name"), Some(&Value::test_string("2026-11-29T22:45:59Z")));
        assert_eq!(roundtrip(j.clone()), j);
    }

    #[test]
    fn documents_round_trip_exactly() {
        let j = json!({"schema": "nsyskit.gate/v1", "tool": {"name": "gate-check", "version": "0.1.0"},
                       "verdict": "RETRY", "gates": [{"id": "G1", "measured": 0.25, "threshold": null,
                       "window_ns": 12, "wall_ns_median": 3, "ok": false, "bytes": 9, "big": 9_007_199_254_740_993i64}],
                       "empty": {}, "list": [], "neg_ns": -5});
        assert_eq!(roundtrip(j.clone()), j);
        let text = serde_json::to_string(&roundtrip(j.clone())).unwrap();
        assert_eq!(text, serde_json::to_string(&j).unwrap(), "key order kept");
    }

    #[test]
    fn standalone_typed_values_become_numbers() {
        let mut r = Record::new();
        r.push("wait", Value::test_duration(1_000));
        r.push("disk", Value::test_filesize(4096));
        r.push("flag", Value::test_bool(true));
        assert_eq!(nu_to_json(&Value::test_record(r)).unwrap(), json!({"wait": 1000, "disk": 4096, "flag": true}));
    }

    #[test]
    fn values_without_json_form_name_their_path() {
        let mut inner = Record::new();
        inner.push("blob", Value::test_binary(vec![1, 2]));
        let v = Value::test_list(vec![Value::test_record(inner)]);
        let e = nu_to_json(&v).unwrap_err();
        let msg = LabeledError::from_diagnostic(&e).msg;
        assert!(msg.contains("$.0.blob"), "{msg}");
        assert!(nu_to_json(&Value::test_float(f64::NAN)).is_err());
    }
}
