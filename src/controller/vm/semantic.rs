//! An approximation of apimachinery's `equality.Semantic.DeepEqual` on serialised objects.
//!
//! Go compares typed structs: a nil slice or map equals an empty one, and quantities compare by
//! value. On JSON this becomes: `null` values and empty arrays are dropped before comparing.
//! Empty objects are kept (in JSON an empty map and a pointer to an empty struct look the same,
//! and the latter is significant, e.g. `masquerade: {}`); quantities compare as text. Both
//! differences only matter for objects written by different clients.

use serde::Serialize;
use serde_json::Value;

/// Drop `null` members and empty-array members, recursively.
pub fn normalize(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !is_empty_member(v))
                .map(|(k, v)| (k.clone(), normalize(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

fn is_empty_member(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Serialise both values and compare them after [`normalize`]. A value that cannot be
/// serialised compares unequal to everything.
pub fn semantic_eq<A: Serialize, B: Serialize>(a: &A, b: &B) -> bool {
    match (serde_json::to_value(a), serde_json::to_value(b)) {
        (Ok(a), Ok(b)) => normalize(&a) == normalize(&b),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nil_and_empty_lists_are_equal_but_empty_structs_are_not_nil() {
        assert!(semantic_eq(
            &json!({"a": [], "b": null, "c": 1}),
            &json!({"c": 1})
        ));
        assert!(!semantic_eq(&json!({"masquerade": {}}), &json!({})));
        assert!(!semantic_eq(&json!({"a": [1]}), &json!({"a": [2]})));
    }
}
