//! Decoders of raw replies (`redis::Value`), strict about the reply's type: each panics with the
//! reply it got when it is not what the caller expects.

use std::collections::BTreeMap;

use redis::Value;

pub fn is_nil(v: &Value) -> bool {
    matches!(v, Value::Nil)
}

pub fn is_err(v: &Value) -> bool {
    matches!(v, Value::ServerError(_))
}

/// An integer reply (or a bulk string holding one).
pub fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an integer: {v:?}")),
        other => panic!("not an integer: {other:?}"),
    }
}

/// An integer reply >= 1 (a token or term).
pub fn token(v: &Value) -> i64 {
    let t = int(v);
    assert!(t >= 1, "token must be >= 1, got {t}");
    t
}

/// A token or term, or nil (a request that was not granted).
pub fn token_or_nil(v: &Value) -> Option<i64> {
    (!is_nil(v)).then(|| token(v))
}

/// The text of an error reply ("CODE detail"); panics on anything else.
pub fn err(v: &Value) -> String {
    match v {
        Value::ServerError(e) => match e.details() {
            Some(d) => format!("{} {}", e.code(), d),
            None => e.code().to_string(),
        },
        other => panic!("expected an error reply, got {other:?}"),
    }
}

/// A string reply of any RESP kind (an integer reads as its digits).
pub fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Okay => "OK".into(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::Int(n) => n.to_string(),
        other => panic!("not a string: {other:?}"),
    }
}

pub fn array(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) | Value::Set(a) => a,
        other => panic!("not an array: {other:?}"),
    }
}

/// Field/value pairs of a map reply, in reply order: a RESP3 map or a RESP2 flat array.
pub fn pairs(v: &Value) -> Vec<(String, Value)> {
    match v {
        Value::Map(m) => m.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        Value::Array(a) => {
            assert!(a.len() % 2 == 0, "odd-length map array: {a:?}");
            a.chunks(2).map(|c| (text(&c[0]), c[1].clone())).collect()
        }
        other => panic!("not a map: {other:?}"),
    }
}

/// A map reply by field name (RESP2 or RESP3).
pub fn map(v: &Value) -> BTreeMap<String, Value> {
    pairs(v).into_iter().collect()
}

/// The value of field `name` in `pairs`; panics if there is none.
pub fn field<'a>(p: &'a [(String, Value)], name: &str) -> &'a Value {
    &p.iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no field {name} in {p:?}"))
        .1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn resp2_and_resp3_maps_decode_alike() {
        let resp2 = Value::Array(vec![bulk("a"), Value::Int(1), bulk("b"), bulk("x")]);
        let resp3 = Value::Map(vec![(bulk("a"), Value::Int(1)), (bulk("b"), bulk("x"))]);
        assert_eq!(pairs(&resp2), pairs(&resp3));
        assert_eq!(int(field(&pairs(&resp2), "a")), 1);
        assert_eq!(text(&map(&resp3)["b"]), "x");
    }

    #[test]
    #[should_panic(expected = "token must be >= 1")]
    fn a_zero_is_not_a_token() {
        token(&Value::Int(0));
    }

    #[test]
    #[should_panic(expected = "not an integer")]
    fn a_status_reply_is_not_an_integer() {
        int(&Value::SimpleString("5".into()));
    }
}
