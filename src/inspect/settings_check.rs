//! The settings the leader renders with against the cluster's KubeVirt CR (`inspect`'s
//! `settings`): a leader that has not loaded the CR's latest version, or refused it, renders
//! launcher pods the overhead check then finds different.

use super::model::SettingsCheck;
use crate::config::ClusterSettings;
use crate::controller::debug_state::DebugState;

/// Compare `cluster` (the CR as read now) with the leader's settings in `state`, if read.
pub(crate) fn settings_check(
    cluster: &ClusterSettings,
    state: Option<&DebugState>,
) -> SettingsCheck {
    let mut check = SettingsCheck {
        cluster: cluster.clone(),
        ..Default::default()
    };
    let Some(config) = state.and_then(|s| s.settings.as_ref()) else {
        return check;
    };
    check.differences = config
        .current
        .cr_changes_to(cluster)
        .into_iter()
        .map(|c| format!("{}: controller {}, KubeVirt CR {}", c.field, c.from, c.to))
        .collect();
    check.controller = Some(config.current.clone());
    check.controller_source = Some(config.source);
    check.controller_resource_version =
        config.kubevirt.as_ref().map(|v| v.resource_version.clone());
    check.controller_loaded_at = Some(config.loaded_at);
    check.controller_refused = config
        .refused
        .as_ref()
        .map(|r| format!("resourceVersion {}: {}", r.resource_version, r.error));
    check
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::cluster_config::ClusterConfig;
    use serde_json::json;

    fn leader_with(config: &ClusterConfig) -> DebugState {
        let mut state: DebugState = serde_json::from_value(json!({
            "generatedAt": "2026-12-01T10:00:00Z", "identity": "me", "leading": true,
            "lease": {"lease": "kubevirt/virt-controller", "identity": "me", "phase": "leading",
                      "leading": true, "holder": "me", "observedAt": null, "leaseTransitions": null,
                      "acquireTime": null, "lastRenew": null, "lastError": null},
            "caches": {"synced": true}, "queues": {}, "expectations": [], "reconciles": {}
        }))
        .unwrap();
        state.settings = Some(config.state());
        state
    }

    #[test]
    fn a_leader_behind_the_cr_is_named_field_by_field() {
        let cr = ClusterSettings {
            memory_overcommit: 150,
            ..Default::default()
        };
        // The leader still renders with the defaults (without_virt_api is its own: not compared).
        let leader = ClusterConfig::fixed(ClusterSettings {
            without_virt_api: true,
            ..Default::default()
        });
        let check = settings_check(&cr, Some(&leader_with(&leader)));
        assert_eq!(
            check.differences,
            ["memoryOvercommit: controller 100, KubeVirt CR 150"]
        );
        assert_eq!(check.controller.unwrap().memory_overcommit, 100);
        let agreeing = ClusterConfig::fixed(cr.clone());
        let check = settings_check(&cr, Some(&leader_with(&agreeing)));
        assert!(check.differences.is_empty());
    }

    #[test]
    fn without_the_leaders_state_only_the_cr_is_shown() {
        let check = settings_check(&ClusterSettings::default(), None);
        assert_eq!(check.controller, None);
        assert!(check.differences.is_empty());
    }
}
