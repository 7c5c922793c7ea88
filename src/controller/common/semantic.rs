//! apimachinery's `equality.Semantic.DeepEqual` on serialised objects — the one definition both
//! controllers use.
//!
//! Go compares typed values (k8s.io/apimachinery third_party/forked/golang/reflect/deep_equal.go,
//! `deepValueEqual`): a nil slice equals an empty one and a nil map equals an empty one (the
//! `Slice`/`Map` cases), but a nil pointer never equals a pointer to an empty struct (the `Ptr`
//! case compares `Elem()`s, and an invalid `Elem` equals only another invalid one). On JSON the
//! type is gone, so this module leans on how Go writes objects: `encoding/json` with `omitempty`
//! (every optional KubeVirt and Kubernetes field) drops nil *and* empty slices and maps, but
//! writes a non-nil pointer to an empty struct as `{}` (`masquerade: {}`, `efi: {}`,
//! `pod: {}`). So inside an object, after the JSON round trip KubeVirt's informers do:
//!
//! - a `null` member or a `[]` member is the same as an absent one (nil and empty slices);
//! - a `{}` member is significant: it is a pointer to an empty struct;
//! - the compared value itself is a map, a slice or a value struct when it is `null`, `[]` or
//!   `{}` (callers hand over `labels`, `finalizers`, `status`…): those three are equal.
//!
//! Quantities compare as text, not by value (`resource.Quantity`'s registered equality is not
//! modelled); both controllers only compare quantities they wrote themselves.

use serde::Serialize;
use serde_json::Value;

/// Drop `null` members and empty-array members, recursively; keep `{}` members.
pub(crate) fn normalize(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !is_nil_member(v))
                .map(|(k, v)| (k.clone(), normalize(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

fn is_nil_member(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// The compared value itself, once [`normalize`]d: `null`, `[]` and `{}` are all the zero
/// value (an object whose members are all dropped by `normalize` is `{}`).
fn is_top_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(is_nil_member),
        _ => false,
    }
}

/// `normalize(a) == normalize(b)` without building either: members that [`normalize`] drops
/// are skipped on both sides.
fn normalized_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            let kept = |m: &serde_json::Map<String, Value>| {
                m.values().filter(|v| !is_nil_member(v)).count()
            };
            a.iter().filter(|(_, v)| !is_nil_member(v)).all(|(k, va)| {
                b.get(k)
                    .is_some_and(|vb| !is_nil_member(vb) && normalized_eq(va, vb))
            }) && kept(a) == kept(b)
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| normalized_eq(x, y))
        }
        _ => a == b,
    }
}

/// `equality.Semantic.DeepEqual(a, b)`: serialise both and compare them as [`normalize`]d
/// values, with an empty top-level value equal to `null` (see the module docs). A value that
/// cannot be serialised compares unequal to everything.
///
/// Equal typed values serialise the same, so `a == b` answers first without serialising:
/// most comparisons in a reconcile are of a status or metadata map the sync left as it was.
pub(crate) fn semantic_eq<T: Serialize + PartialEq + ?Sized>(a: &T, b: &T) -> bool {
    a == b || serialized_semantic_eq(a, b)
}

/// [`semantic_eq`] on the serialised values only (also for two different types).
pub(crate) fn serialized_semantic_eq<A: Serialize + ?Sized, B: Serialize + ?Sized>(
    a: &A,
    b: &B,
) -> bool {
    match (serde_json::to_value(a), serde_json::to_value(b)) {
        (Ok(a), Ok(b)) => values_semantic_eq(&a, &b),
        _ => false,
    }
}

/// [`semantic_eq`] of two values already serialised (a caller that also reads them, such as
/// the VMI decision naming the changed status fields, serialises once).
pub(crate) fn values_semantic_eq(a: &Value, b: &Value) -> bool {
    if is_top_zero(a) || is_top_zero(b) {
        is_top_zero(a) && is_top_zero(b)
    } else {
        normalized_eq(a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::vmi::VirtualMachineInstanceStatus;
    use serde_json::json;
    use std::collections::BTreeMap;

    /// The comparison without building normalised copies answers as comparing the copies did.
    #[test]
    fn comparing_in_place_agrees_with_comparing_normalised_copies() {
        fn by_copies(a: &Value, b: &Value) -> bool {
            let top = |v: Value| match &v {
                Value::Array(x) if x.is_empty() => Value::Null,
                Value::Object(o) if o.is_empty() => Value::Null,
                _ => v,
            };
            top(normalize(a)) == top(normalize(b))
        }
        let values = [
            json!(null),
            json!({}),
            json!([]),
            json!({"x": null}),
            json!({"x": []}),
            json!({"x": {}}),
            json!({"x": 1}),
            json!({"x": 1, "y": null}),
            json!({"y": [], "x": 1}),
            json!({"x": {"a": null}}),
            json!({"x": {"a": [null]}}),
            json!({"x": {"a": [{"b": null}]}}),
            json!({"x": {"a": [{}]}}),
            json!([null]),
            json!([{"b": []}]),
            json!([{}]),
            json!("s"),
            json!(0),
        ];
        for a in &values {
            for b in &values {
                assert_eq!(semantic_eq(a, b), by_copies(a, b), "{a} vs {b}");
                // The `==` shortcut never changes an answer.
                assert_eq!(
                    semantic_eq(a, b),
                    serialized_semantic_eq(a, b),
                    "{a} vs {b}"
                );
            }
        }
    }

    // From controller/vm/semantic.rs.
    #[test]
    fn nil_and_empty_lists_are_equal_but_empty_structs_are_not_nil() {
        assert!(semantic_eq(
            &json!({"a": [], "b": null, "c": 1}),
            &json!({"c": 1})
        ));
        assert!(!semantic_eq(&json!({"masquerade": {}}), &json!({})));
        assert!(!semantic_eq(&json!({"a": [1]}), &json!({"a": [2]})));
    }

    // From controller/vmi/patch.rs.
    #[test]
    fn semantic_eq_treats_nil_and_empty_alike() {
        let a: Option<Vec<String>> = None;
        let b: Option<Vec<String>> = Some(vec![]);
        assert!(semantic_eq(&a, &b));
        let c: Option<BTreeMap<String, String>> = Some(BTreeMap::new());
        assert!(semantic_eq(&None::<BTreeMap<String, String>>, &c));
        assert!(!semantic_eq(&Some(vec!["x".to_string()]), &b));
        // an empty-string label value is a real entry
        let with_key: Option<BTreeMap<String, String>> = Some(
            [(
                "kubevirt.io/outdatedLauncherImage".to_string(),
                String::new(),
            )]
            .into(),
        );
        assert!(!semantic_eq(&with_key, &c));
    }

    // The two former copies disagreed here. deep_equal.go's `Ptr` case: a VMI status whose
    // `migrationState` went from nil to a pointer to an empty struct is NOT semantically equal,
    // so KubeVirt writes it; the copy that dropped every `{}` said "equal" and skipped the write.
    // And its `Map` case: a nil map equals an empty one at the top, which the copy that kept
    // every `{}` got wrong.
    #[test]
    fn pointer_to_empty_struct_differs_from_nil_but_empty_map_equals_nil() {
        let without: VirtualMachineInstanceStatus =
            serde_json::from_value(json!({"phase": "Running"})).expect("valid status");
        let with_empty: VirtualMachineInstanceStatus =
            serde_json::from_value(json!({"phase": "Running", "migrationState": {}}))
                .expect("valid status");
        assert!(!semantic_eq(&without, &with_empty));
        assert!(serialized_semantic_eq(
            &Some(BTreeMap::<String, String>::new()),
            &json!(null)
        ));
        assert!(serialized_semantic_eq(
            &VirtualMachineInstanceStatus::default(),
            &json!({})
        ));
    }
}
