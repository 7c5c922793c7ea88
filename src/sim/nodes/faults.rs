//! Fault-injection state: which pods cannot pull images and which VMIs fail before running.

use super::virt_handler::ANNOTATION_DOMAIN;
use std::collections::BTreeMap;

/// Selects pods or VMIs by namespace-less identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matcher {
    /// Every object.
    Any,
    /// Objects whose name starts with this prefix.
    NamePrefix(String),
    /// Objects carrying this label with this value.
    Label { key: String, value: String },
    /// A VMI with this name, and the virt-launcher pods of a VMI with this name (annotation
    /// `kubevirt.io/domain`).
    Vmi(String),
}

impl Matcher {
    /// Matcher on a name prefix.
    pub fn name_prefix(prefix: impl Into<String>) -> Self {
        Matcher::NamePrefix(prefix.into())
    }

    /// Matcher on a label value.
    pub(crate) fn label(key: impl Into<String>, value: impl Into<String>) -> Self {
        Matcher::Label {
            key: key.into(),
            value: value.into(),
        }
    }

    /// Matcher on a VMI name (the VMI itself or its launcher pods).
    pub fn vmi(name: impl Into<String>) -> Self {
        Matcher::Vmi(name.into())
    }

    /// Whether an object with this kind (`"Pod"` or `"VirtualMachineInstance"`), name, labels
    /// and annotations matches.
    pub(crate) fn matches(
        &self,
        kind: &str,
        name: &str,
        labels: Option<&BTreeMap<String, String>>,
        annotations: Option<&BTreeMap<String, String>>,
    ) -> bool {
        match self {
            Matcher::Any => true,
            Matcher::NamePrefix(p) => name.starts_with(p.as_str()),
            Matcher::Label { key, value } => labels.and_then(|l| l.get(key)) == Some(value),
            Matcher::Vmi(vmi) => match kind {
                "Pod" => annotations.and_then(|a| a.get(ANNOTATION_DOMAIN)) == Some(vmi),
                _ => name == vmi,
            },
        }
    }
}

/// Faults currently injected.
#[derive(Debug, Clone, Default)]
pub(crate) struct FaultState {
    /// Pods matching any of these never get their images.
    pub image_pull: Vec<Matcher>,
    /// VMIs matching go `Failed` from `Scheduled`; the count is how many more times.
    pub fail_before_running: Vec<(Matcher, u32)>,
}

impl FaultState {
    /// Whether the pod's images are stuck.
    pub(crate) fn image_pull_stuck(
        &self,
        name: &str,
        labels: Option<&BTreeMap<String, String>>,
        annotations: Option<&BTreeMap<String, String>>,
    ) -> bool {
        self.image_pull
            .iter()
            .any(|m| m.matches("Pod", name, labels, annotations))
    }

    /// Index of the first early-failure rule with budget left that matches the VMI.
    pub(crate) fn early_failure(
        &self,
        name: &str,
        labels: Option<&BTreeMap<String, String>>,
    ) -> Option<usize> {
        self.fail_before_running
            .iter()
            .position(|(m, n)| *n > 0 && m.matches("VirtualMachineInstance", name, labels, None))
    }

    /// Use up one failure of rule `index` (dropping the rule at zero).
    pub(crate) fn consume_early_failure(&mut self, index: usize) {
        if let Some((_, n)) = self.fail_before_running.get_mut(index) {
            *n = n.saturating_sub(1);
        }
        self.fail_before_running.retain(|(_, n)| *n > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matchers() {
        let labels = BTreeMap::from([("app".to_string(), "db".to_string())]);
        let ann = BTreeMap::from([(ANNOTATION_DOMAIN.to_string(), "vm-a".to_string())]);
        assert!(Matcher::Any.matches("Pod", "x", None, None));
        assert!(Matcher::name_prefix("virt-launcher-vm-a-").matches(
            "Pod",
            "virt-launcher-vm-a-xyz",
            None,
            None
        ));
        assert!(!Matcher::name_prefix("virt-launcher-vm-b-").matches(
            "Pod",
            "virt-launcher-vm-a-xyz",
            None,
            None
        ));
        assert!(Matcher::label("app", "db").matches("Pod", "p", Some(&labels), None));
        assert!(!Matcher::label("app", "web").matches("Pod", "p", Some(&labels), None));
        assert!(Matcher::vmi("vm-a").matches("Pod", "virt-launcher-vm-a-xyz", None, Some(&ann)));
        assert!(Matcher::vmi("vm-a").matches("VirtualMachineInstance", "vm-a", None, None));
        assert!(!Matcher::vmi("vm-a").matches("VirtualMachineInstance", "vm-ab", None, None));
    }

    #[test]
    fn early_failure_budget_is_consumed() {
        let mut f = FaultState::default();
        f.fail_before_running.push((Matcher::vmi("vm-a"), 2));
        let i = f.early_failure("vm-a", None);
        assert_eq!(i, Some(0));
        f.consume_early_failure(0);
        assert_eq!(f.early_failure("vm-a", None), Some(0));
        f.consume_early_failure(0);
        assert_eq!(f.early_failure("vm-a", None), None);
        assert!(f.fail_before_running.is_empty());
        assert_eq!(f.early_failure("vm-b", None), None);
    }
}
