//! JSON as Go's `encoding/json` writes it, where a byte-for-byte match with what a Go program
//! would write matters.
//!
//! kube-apiserver keeps an `apps/v1` ControllerRevision's `data` as the raw bytes it was sent,
//! and refuses any later change of those bytes (`data: field is immutable`). A merge patch of
//! the revision (the garbage collector's removal of an owner reference, a `kubectl label`)
//! re-encodes `data` through Go's `json.Marshal` of a map: keys sorted, `<`, `>`, `&`, U+2028
//! and U+2029 escaped. Data written in any other form can then never be patched, and a VM
//! deleted with orphan propagation keeps its `orphan` finalizer for ever. KubeVirt writes the
//! revision in that form because it builds `data` through a `map[string]interface{}`
//! (vm.go:1702-1724, `getVMRevisionData`).

use serde::Serialize;
use serde_json::Value;
use std::io;

/// `value` with every object's members in sorted order (what `json.Marshal` of a Go map
/// writes); arrays keep their order.
pub(crate) fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(String, Value)> = map.into_iter().collect();
            members.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(members.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// Compact JSON of `value` with Go's HTML-safe escaping of strings (`json.Marshal`'s default:
/// `<` `>` `&` as `\u003c` `\u003e` `\u0026`, and U+2028 U+2029 escaped). Member order is the
/// value's own: pass a [`sorted`] value for Go's map order.
pub(crate) fn to_vec<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, GoFormatter);
    value.serialize(&mut ser)?;
    Ok(out)
}

/// serde_json's compact formatter with Go's extra escapes inside strings.
struct GoFormatter;

impl serde_json::ser::Formatter for GoFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            let escape = match c {
                '<' => "\\u003c",
                '>' => "\\u003e",
                '&' => "\\u0026",
                '\u{2028}' => "\\u2028",
                '\u{2029}' => "\\u2029",
                _ => continue,
            };
            writer.write_all(&fragment.as_bytes()[start..i])?;
            writer.write_all(escape.as_bytes())?;
            start = i + c.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn members_are_sorted_at_every_level() {
        let v = sorted(
            json!({"spec": {"template": {"b": 1, "a": [{"z": 1, "y": 2}]}, "running": true}}),
        );
        assert_eq!(
            String::from_utf8(to_vec(&v).unwrap()).unwrap(),
            r#"{"spec":{"running":true,"template":{"a":[{"y":2,"z":1}],"b":1}}}"#
        );
    }

    #[test]
    fn strings_are_escaped_as_go_escapes_them() {
        // What Go's json.Marshal writes for this string (HTML-safe escaping).
        let v = json!({"userData": "a && b > c < d\u{2028}é\n\"q\""});
        assert_eq!(
            String::from_utf8(to_vec(&v).unwrap()).unwrap(),
            r#"{"userData":"a \u0026\u0026 b \u003e c \u003c d\u2028é\n\"q\""}"#
        );
        // And it reads back as the same value.
        let back: Value = serde_json::from_slice(&to_vec(&v).unwrap()).unwrap();
        assert_eq!(back, v);
    }
}
