//! Reading loosely typed replies (RESP2 and RESP3 shapes alike).

use redis::Value;

use crate::error::Error;

pub(crate) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

pub(crate) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::Double(d) if d.fract() == 0.0 => Some(*d as i64),
        other => text(other).and_then(|s| s.trim().parse().ok()),
    }
}

/// A map reply (RESP3 map, or RESP2 flat field/value array).
/// A holder's `cap` in `*.INFO`: ms left until it, -1 for none.
pub(crate) fn cap(v: &Value) -> Option<std::time::Duration> {
    int(v)
        .filter(|ms| *ms >= 0)
        .map(|ms| std::time::Duration::from_millis(ms as u64))
}

pub(crate) fn map(v: Value) -> Option<Vec<(String, Value)>> {
    match v {
        Value::Map(pairs) => pairs
            .into_iter()
            .map(|(k, v)| text(&k).map(|k| (k.to_ascii_lowercase(), v)))
            .collect(),
        Value::Array(items) if items.len() % 2 == 0 => {
            let mut out = Vec::with_capacity(items.len() / 2);
            let mut it = items.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                out.push((text(&k)?.to_ascii_lowercase(), v));
            }
            Some(out)
        }
        Value::Attribute { data, .. } => map(*data),
        _ => None,
    }
}

pub(crate) fn array(v: Value) -> Option<Vec<Value>> {
    match v {
        Value::Array(a) | Value::Set(a) => Some(a),
        Value::Attribute { data, .. } => array(*data),
        _ => None,
    }
}

/// A token or term: a positive integer.
pub(crate) fn token(v: &Value) -> Result<u64, Error> {
    match int(v) {
        Some(t) if t >= 1 => Ok(t as u64),
        _ => Err(Error::Protocol(format!("expected a token, got {v:?}"))),
    }
}
