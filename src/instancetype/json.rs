//! Go-struct semantics on raw JSON: what "set", "zero" and "nil" mean for the fields the apply
//! functions touch (omitempty fields: absent and zero values are the same thing).

use serde_json::{Map, Value};

/// The object at `key` of `parent`, created (`&T{}`) when absent or null.
pub(crate) fn child<'a>(parent: &'a mut Value, key: &str) -> &'a mut Value {
    if !parent.is_object() {
        *parent = Value::Object(Map::new());
    }
    let map = parent.as_object_mut().expect("just made an object");
    let entry = map
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    entry
}

/// The value at `path` below `v`, if every step is present and not null.
pub(crate) fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = v;
    for key in path {
        cur = cur.get(*key)?;
    }
    (!cur.is_null()).then_some(cur)
}

/// Go's "is not the zero value" for a field of a decoded struct: a pointer/slice/map that is
/// set, a non-empty string, a non-zero number, `true`.
pub(crate) fn non_zero(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::Array(_) | Value::Object(_)) => true,
    }
}

/// A non-empty list (Go `len(x) > 0`).
pub(crate) fn non_empty_list(v: Option<&Value>) -> bool {
    v.and_then(Value::as_array).is_some_and(|a| !a.is_empty())
}

/// The string at `path`, `""` when absent (Go's zero string).
pub(crate) fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    at(v, path).and_then(Value::as_str).unwrap_or("")
}

/// Set `key` to `value`, or remove it when `value` is Go's zero value for an omitempty field.
pub(crate) fn set_omitempty(obj: &mut Value, key: &str, value: Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    if non_zero(Some(&value)) {
        map.insert(key.to_string(), value);
    } else {
        map.remove(key);
    }
}

/// Set `key` when it is absent or null (KubeVirt's "only when the user has not set it").
pub(crate) fn set_if_nil(obj: &mut Value, key: &str, value: &Value) {
    if at(obj, &[key]).is_none()
        && let Some(map) = obj.as_object_mut()
    {
        map.insert(key.to_string(), value.clone());
    }
}

/// A quantity in Kubernetes' canonical text (what a Go `resource.Quantity` re-encodes to); the
/// text unchanged when it does not parse (the API server's schema accepted it as a string).
pub(crate) fn canonical_quantity(v: &Value) -> Value {
    match v.as_str().map(crate::api::quantity::ParsedQuantity::parse) {
        Some(Ok(q)) => Value::String(q.to_canonical()),
        _ => v.clone(),
    }
}
