//! The one RFC 6902 JSON-patch builder both controllers use, shaped like KubeVirt's
//! `pkg/apimachinery/patch` (`patch.New(patch.WithTest(..), patch.WithReplace(..))`): operations
//! in order, each `{"op", "path", "value"}`, sent as `application/json-patch+json`.
//!
//! Paths are built from unescaped tokens ([`path`]), so a key such as
//! `descheduler.alpha.kubernetes.io/evict` becomes `…/descheduler.alpha.kubernetes.io~1evict`.

use json_patch::jsonptr::PointerBuf;
use json_patch::{
    AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation, TestOperation,
};
use serde::Serialize;
use serde_json::Value;

/// A JSON pointer from unescaped tokens: `path(&["metadata", "finalizers"])` is
/// `/metadata/finalizers`.
pub(crate) fn path(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

/// A value as JSON; one that cannot be serialised (never the case for API types) is `null`.
pub(crate) fn to_json<T: Serialize + ?Sized>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// An ordered list of JSON-patch operations (`patch.PatchSet`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PatchSet(Vec<PatchOperation>);

impl PatchSet {
    /// No operations yet (`patch.New()`).
    pub(crate) fn new() -> Self {
        PatchSet::default()
    }

    /// `patch.WithTest(path, value)`. A `None`/nil value is `null`.
    pub(crate) fn test<T: Serialize + ?Sized>(&mut self, path: PointerBuf, value: &T) -> &mut Self {
        let value = to_json(value);
        self.0
            .push(PatchOperation::Test(TestOperation { path, value }));
        self
    }

    /// `patch.WithReplace(path, value)`.
    pub(crate) fn replace<T: Serialize + ?Sized>(
        &mut self,
        path: PointerBuf,
        value: &T,
    ) -> &mut Self {
        let value = to_json(value);
        self.0
            .push(PatchOperation::Replace(ReplaceOperation { path, value }));
        self
    }

    /// `patch.WithAdd(path, value)`.
    pub(crate) fn add<T: Serialize + ?Sized>(&mut self, path: PointerBuf, value: &T) -> &mut Self {
        let value = to_json(value);
        self.0
            .push(PatchOperation::Add(AddOperation { path, value }));
        self
    }

    /// The idiom KubeVirt writes at every call site: when there was no old value, `add` the new
    /// one; otherwise `test` the old value and `replace` it (lifecycle.go:627-721,
    /// vm.go:3067-3188).
    pub(crate) fn add_or_test_and_replace<O, N>(
        &mut self,
        path: PointerBuf,
        old: Option<&O>,
        new: &N,
    ) -> &mut Self
    where
        O: Serialize + ?Sized,
        N: Serialize + ?Sized,
    {
        match old {
            None => self.add(path, new),
            Some(old) => self.test(path.clone(), old).replace(path, new),
        }
    }

    /// `patch.WithRemove(path)`.
    pub(crate) fn remove(&mut self, path: PointerBuf) -> &mut Self {
        self.0
            .push(PatchOperation::Remove(RemoveOperation { path }));
        self
    }

    /// True when there are no operations.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The typed patch (what the VMI actions carry).
    pub(crate) fn into_patch(self) -> Patch {
        Patch(self.0)
    }

    /// The patch document as a JSON array (`GeneratePayload`; what the VM actions carry).
    pub(crate) fn into_value(self) -> Value {
        to_json(&Patch(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn operations_in_order_with_escaped_paths() {
        let mut p = PatchSet::new();
        p.test(path(&["metadata", "finalizers"]), &None::<Vec<String>>)
            .replace(path(&["metadata", "finalizers"]), &["a"])
            .add(path(&["metadata", "annotations", "a/b"]), "v")
            .remove(path(&["metadata", "labels", "x~y"]));
        assert_eq!(p.clone().into_patch().0.len(), 4);
        assert_eq!(
            p.into_value(),
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "replace", "path": "/metadata/finalizers", "value": ["a"]},
                {"op": "add", "path": "/metadata/annotations/a~1b", "value": "v"},
                {"op": "remove", "path": "/metadata/labels/x~0y"}
            ])
        );
        assert!(PatchSet::new().is_empty());
        let mut set = PatchSet::new();
        set.add_or_test_and_replace(path(&["a"]), None::<&u8>, &1)
            .add_or_test_and_replace(path(&["b"]), Some(&2), &3);
        assert_eq!(
            set.into_value(),
            json!([
                {"op": "add", "path": "/a", "value": 1},
                {"op": "test", "path": "/b", "value": 2},
                {"op": "replace", "path": "/b", "value": 3}
            ])
        );
    }
}
