//! Fault rules as text, for `cluster serve --fault RULE` and the admin endpoint
//! ([`super::admin`]): every API fault of [`super::faults`] and every node fault of
//! [`super::nodes::NodeSimHandle`].
//!
//! A rule is `ACTION[=ARG][,KEY=VALUE]...`:
//!
//! | action | effect |
//! |---|---|
//! | `error=CODE` | [`FaultRule::error`] (500, 503, 429, ...) |
//! | `too-many-requests=SECONDS` | [`FaultRule::too_many_requests`] |
//! | `latency=DURATION` | [`FaultRule::latency`] |
//! | `conflict` | [`FaultRule::conflict`] |
//! | `drop-watch-after=N` | [`FaultRule::drop_watch_after`] |
//! | `delay-watch=DURATION` | [`FaultRule::delay_watch_events`] |
//! | `stuck-image-pull=MATCHER` | [`NodeSimHandle::stick_image_pull`] (removed with the rule) |
//! | `fail-before-running=MATCHER,count=N` | [`NodeSimHandle::fail_vmis_before_running`] |
//! | `fail-pod=NS/NAME` | [`NodeSimHandle::fail_pod`] (a failing launcher pod) |
//! | `crash-guest=NS/NAME`, `shutdown-guest=NS/NAME` | guest crash / shutdown of a VMI |
//! | `remove-node=NAME`, `add-node` | node loss, a new node |
//!
//! Keys of API faults: `verbs=create|update|...` (Kubernetes verbs), `resource=PLURAL`,
//! `agent=SUBSTRING` (user agent), `probability=0..1`, `times=N`, `retry-after=SECONDS`.
//! Durations are `250ms`, `2s`, `1m`. Matchers: `any`, `vmi:NAME`, `prefix:NAME`,
//! `label:KEY=VALUE`.

use std::time::Duration;

use super::faults::{FaultRule, Verb};
use super::nodes::{Matcher, NodeSimError, NodeSimHandle};

/// A parsed rule.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultSpec {
    /// A rule of the API server's [`super::Faults`].
    Api(FaultRule),
    /// A fault of the simulated nodes.
    Node(NodeFault),
}

/// A fault of the simulated nodes.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeFault {
    /// Pods matching stay in `ErrImagePull` / `ImagePullBackOff`.
    StuckImagePull(Matcher),
    /// The next `count` matching VMIs fail before running.
    FailBeforeRunning(Matcher, u32),
    /// Every container of the pod terminates with exit code 1.
    FailPod(String, String),
    /// The guest of a running VMI crashes.
    CrashGuest(String, String),
    /// The guest of a running VMI shuts down.
    ShutdownGuest(String, String),
    /// The node disappears.
    RemoveNode(String),
    /// A new node registers.
    AddNode,
}

impl NodeFault {
    /// Whether the fault stays in force until removed (`false`: it happens once).
    pub fn is_standing(&self) -> bool {
        matches!(self, NodeFault::StuckImagePull(_))
    }

    /// Make it happen on `nodes`.
    ///
    /// # Errors
    /// The simulator's error (an unknown pod, VMI or node).
    pub async fn apply(&self, nodes: &NodeSimHandle) -> Result<(), NodeSimError> {
        match self {
            NodeFault::StuckImagePull(m) => nodes.stick_image_pull(m.clone()),
            NodeFault::FailBeforeRunning(m, n) => nodes.fail_vmis_before_running(m.clone(), *n),
            NodeFault::FailPod(ns, n) => nodes.fail_pod(ns, n).await?,
            NodeFault::CrashGuest(ns, n) => nodes.crash_guest(ns, n).await?,
            NodeFault::ShutdownGuest(ns, n) => nodes.shutdown_guest(ns, n).await?,
            NodeFault::RemoveNode(n) => nodes.remove_node(n).await?,
            NodeFault::AddNode => {
                nodes.add_node().await?;
            }
        }
        Ok(())
    }
}

/// `250ms`, `2s`, `1m`, or a number of milliseconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {s:?} (use e.g. 250ms, 2s, 1m)");
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "ms"),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(bad()),
    }
}

fn parse_matcher(s: &str) -> Result<Matcher, String> {
    if s == "any" {
        return Ok(Matcher::Any);
    }
    if let Some(n) = s.strip_prefix("vmi:") {
        return Ok(Matcher::vmi(n));
    }
    if let Some(p) = s.strip_prefix("prefix:") {
        return Ok(Matcher::name_prefix(p));
    }
    if let Some((k, v)) = s.strip_prefix("label:").and_then(|l| l.split_once('=')) {
        return Ok(Matcher::label(k, v));
    }
    Err(format!(
        "invalid matcher {s:?} (any, vmi:NAME, prefix:NAME, label:KEY=VALUE)"
    ))
}

fn parse_verb(s: &str) -> Result<Verb, String> {
    Ok(match s {
        "get" => Verb::Get,
        "list" => Verb::List,
        "watch" => Verb::Watch,
        "create" => Verb::Create,
        "update" => Verb::Update,
        "patch" => Verb::Patch,
        "delete" => Verb::Delete,
        "deletecollection" => Verb::DeleteCollection,
        _ => return Err(format!("unknown verb {s:?}")),
    })
}

fn namespaced(s: &str, what: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((ns, n)) if !ns.is_empty() && !n.is_empty() => Ok((ns.into(), n.into())),
        _ => Err(format!("{what} needs NAMESPACE/NAME, got {s:?}")),
    }
}

/// Parse a rule (see the module docs).
///
/// # Errors
/// A message naming the part that is wrong.
pub fn parse(rule: &str) -> Result<FaultSpec, String> {
    let mut parts = rule.trim().split(',');
    let head = parts.next().unwrap_or("");
    let (action, arg) = match head.split_once('=') {
        Some((a, v)) => (a, Some(v)),
        None => (head, None),
    };
    let need = |what: &str| arg.ok_or_else(|| format!("{action} needs ={what}"));
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for p in parts {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("expected KEY=VALUE, got {p:?}"))?;
        keys.push((k, v));
    }
    let num = |v: &str, k: &str| -> Result<u64, String> {
        v.parse().map_err(|_| format!("{k}: {v:?} is not a number"))
    };
    let node = |f: NodeFault, keys: &[(&str, &str)]| -> Result<FaultSpec, String> {
        match keys.first() {
            Some((k, _)) => Err(format!("{action} takes no key {k:?}")),
            None => Ok(FaultSpec::Node(f)),
        }
    };
    let mut rule = match action {
        "error" => FaultRule::error(
            need("CODE")?
                .parse()
                .map_err(|_| format!("error: {:?} is not an HTTP code", arg.unwrap_or("")))?,
        ),
        "too-many-requests" => FaultRule::too_many_requests(num(need("SECONDS")?, action)? as u32),
        "latency" => FaultRule::latency(parse_duration(need("DURATION")?)?),
        "conflict" => FaultRule::conflict(),
        "drop-watch-after" => FaultRule::drop_watch_after(num(need("N")?, action)?),
        "delay-watch" => FaultRule::delay_watch_events(parse_duration(need("DURATION")?)?),
        "stuck-image-pull" => {
            return node(
                NodeFault::StuckImagePull(parse_matcher(need("MATCHER")?)?),
                &keys,
            );
        }
        "fail-before-running" => {
            let m = parse_matcher(need("MATCHER")?)?;
            let mut count = 1;
            for (k, v) in &keys {
                match *k {
                    "count" => count = num(v, k)? as u32,
                    _ => return Err(format!("{action} takes count=N, not {k:?}")),
                }
            }
            return Ok(FaultSpec::Node(NodeFault::FailBeforeRunning(m, count)));
        }
        "fail-pod" => {
            let (ns, n) = namespaced(need("NS/NAME")?, action)?;
            return node(NodeFault::FailPod(ns, n), &keys);
        }
        "crash-guest" => {
            let (ns, n) = namespaced(need("NS/NAME")?, action)?;
            return node(NodeFault::CrashGuest(ns, n), &keys);
        }
        "shutdown-guest" => {
            let (ns, n) = namespaced(need("NS/NAME")?, action)?;
            return node(NodeFault::ShutdownGuest(ns, n), &keys);
        }
        "remove-node" => return node(NodeFault::RemoveNode(need("NAME")?.into()), &keys),
        "add-node" => return node(NodeFault::AddNode, &keys),
        other => {
            return Err(format!(
                "unknown fault {other:?} (error, too-many-requests, latency, conflict, drop-watch-after, delay-watch, stuck-image-pull, fail-before-running, fail-pod, crash-guest, shutdown-guest, remove-node, add-node)"
            ));
        }
    };
    for (k, v) in keys {
        rule = match k {
            "verbs" => {
                let verbs = v
                    .split('|')
                    .map(parse_verb)
                    .collect::<Result<Vec<_>, _>>()?;
                rule.verbs(&verbs)
            }
            "resource" => rule.resource(v),
            "agent" => rule.user_agent(v),
            "probability" => {
                let p: f64 = v
                    .parse()
                    .ok()
                    .filter(|p| (0.0..=1.0).contains(p))
                    .ok_or_else(|| format!("probability: {v:?} is not within 0..1"))?;
                rule.probability(p)
            }
            "times" => rule.times(num(v, k)?),
            "retry-after" => rule.retry_after(num(v, k)? as u32),
            _ => {
                return Err(format!(
                    "unknown key {k:?} (verbs, resource, agent, probability, times, retry-after)"
                ));
            }
        };
    }
    Ok(FaultSpec::Api(rule))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::faults::FaultAction;

    #[test]
    fn api_rules_with_every_key() {
        let FaultSpec::Api(r) = parse(
            "error=503,verbs=create|patch,resource=pods,agent=virt-controller,probability=0.5,times=3",
        )
        .unwrap() else {
            panic!("an API rule")
        };
        assert_eq!(
            r.action,
            FaultAction::Error {
                code: 503,
                retry_after_seconds: None
            }
        );
        assert_eq!(r.verbs, vec![Verb::Create, Verb::Patch]);
        assert_eq!(r.resource.as_deref(), Some("pods"));
        assert_eq!(r.user_agent.as_deref(), Some("virt-controller"));
        assert_eq!((r.probability, r.times), (0.5, Some(3)));
        assert_eq!(
            parse("latency=250ms").unwrap(),
            FaultSpec::Api(FaultRule::latency(Duration::from_millis(250)))
        );
        assert_eq!(
            parse("delay-watch=2s,resource=pods").unwrap(),
            FaultSpec::Api(FaultRule::delay_watch_events(Duration::from_secs(2)).resource("pods"))
        );
        assert_eq!(
            parse("drop-watch-after=4").unwrap(),
            FaultSpec::Api(FaultRule::drop_watch_after(4))
        );
        assert_eq!(
            parse("conflict").unwrap(),
            FaultSpec::Api(FaultRule::conflict())
        );
        assert_eq!(
            parse("too-many-requests=2").unwrap(),
            FaultSpec::Api(FaultRule::too_many_requests(2))
        );
    }

    #[test]
    fn node_faults() {
        assert_eq!(
            parse("stuck-image-pull=vmi:vm-a").unwrap(),
            FaultSpec::Node(NodeFault::StuckImagePull(Matcher::vmi("vm-a")))
        );
        assert_eq!(
            parse("fail-before-running=label:app=x,count=2").unwrap(),
            FaultSpec::Node(NodeFault::FailBeforeRunning(Matcher::label("app", "x"), 2))
        );
        assert_eq!(
            parse("crash-guest=default/vm").unwrap(),
            FaultSpec::Node(NodeFault::CrashGuest("default".into(), "vm".into()))
        );
        assert_eq!(
            parse("remove-node=sim-node-1").unwrap(),
            FaultSpec::Node(NodeFault::RemoveNode("sim-node-1".into()))
        );
        assert_eq!(
            parse("add-node").unwrap(),
            FaultSpec::Node(NodeFault::AddNode)
        );
    }

    #[test]
    fn mistakes_are_named() {
        for (rule, says) in [
            ("explode", "unknown fault"),
            ("error", "needs =CODE"),
            ("error=x", "not an HTTP code"),
            ("error=500,color=red", "unknown key \"color\""),
            ("error=500,verbs=fly", "unknown verb"),
            ("error=500,probability=2", "within 0..1"),
            ("latency=fast", "invalid duration"),
            ("crash-guest=vm", "NAMESPACE/NAME"),
            ("stuck-image-pull=who", "invalid matcher"),
            ("add-node,x=1", "takes no key"),
        ] {
            let e = parse(rule).unwrap_err();
            assert!(e.contains(says), "{rule}: {e}");
        }
    }
}
