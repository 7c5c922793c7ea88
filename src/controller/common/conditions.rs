//! The condition manager both controllers use (pkg/controller/conditions.go: the VM manager at
//! 90-141, the VMI manager at 170-218 — the same rules on two condition types). It works on a
//! plain list; the VMI side keeps its `Option<Vec<_>>` shape through thin wrappers in
//! `vmi::conditions`.

use crate::api::common::Condition;

/// The condition of this type, if any.
pub(crate) fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// A condition of this type exists (`HasCondition`).
pub(crate) fn has_condition(conditions: &[Condition], type_: &str) -> bool {
    condition(conditions, type_).is_some()
}

/// A condition of this type exists with this status (`HasConditionWithStatus`).
pub(crate) fn has_condition_with_status(
    conditions: &[Condition],
    type_: &str,
    status: &str,
) -> bool {
    condition(conditions, type_).is_some_and(|c| c.status == status)
}

/// `RemoveCondition` (conditions.go:108-117, 192-201): drop every condition of this type.
pub(crate) fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// `UpdateCondition` (conditions.go:127-141, 203-218): replace an existing condition of the same
/// type only when its status or reason changed (so probe/transition times stay put); append
/// otherwise. Go's `Reason` is a plain string, so an absent reason equals `""`.
pub(crate) fn update_condition(conditions: &mut Vec<Condition>, cond: Condition) {
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == cond.type_) {
        if existing.status != cond.status
            || existing.reason.as_deref().unwrap_or("") != cond.reason.as_deref().unwrap_or("")
        {
            *existing = cond;
        }
        return;
    }
    conditions.push(cond);
}

/// A condition with a type, status and optional reason (test data for both controllers).
#[cfg(test)]
pub(crate) fn test_condition(type_: &str, status: &str, reason: Option<&str>) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.map(Into::into),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(type_: &str, status: &str, reason: Option<&str>, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.map(Into::into),
            message: Some(message.into()),
            ..Default::default()
        }
    }

    #[test]
    fn update_replaces_only_on_status_or_reason_change() {
        let mut cs = vec![cond("Ready", "True", None, "first")];
        update_condition(&mut cs, cond("Ready", "True", Some(""), "second"));
        assert_eq!(
            cs[0].message.as_deref(),
            Some("first"),
            "\"\" reason is no reason"
        );
        update_condition(&mut cs, cond("Ready", "False", None, "third"));
        assert_eq!(cs[0].message.as_deref(), Some("third"));
        update_condition(&mut cs, cond("Paused", "True", None, "p"));
        assert_eq!(cs.len(), 2);
        assert!(has_condition_with_status(&cs, "Paused", "True"));
        assert!(!has_condition_with_status(&cs, "Paused", "False"));
        remove_condition(&mut cs, "Ready");
        assert!(!has_condition(&cs, "Ready"));
        assert_eq!(
            condition(&cs, "Paused").map(|c| c.status.as_str()),
            Some("True")
        );
    }
}
