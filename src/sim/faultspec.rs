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
//! | `drop-watch-randomly=MAX` | [`FaultRule::drop_watch_randomly`] |
//! | `tombstone` | [`FaultRule::tombstone_deletes`]: watches end with 410 instead of a `DELETED` |
//! | `stale-list=N` | [`FaultRule::stale_list`]: lists answer the state of N events ago |
//! | `drop-event=N` (`event=ADDED\|MODIFIED\|DELETED`) | [`FaultRule::drop_event`]: the Nth event of a watch is skipped |
//! | `stuck-image-pull=MATCHER` | [`NodeSimHandle::stick_image_pull`] (removed with the rule) |
//! | `fail-before-running=MATCHER,count=N` | [`NodeSimHandle::fail_vmis_before_running`] |
//! | `fail-pod=NS/NAME` | [`NodeSimHandle::fail_pod`] (a failing launcher pod) |
//! | `crash-guest=NS/NAME`, `shutdown-guest=NS/NAME` | guest crash / shutdown of a VMI |
//! | `remove-node=NAME`, `add-node` | node loss, a new node |
//!
//! Keys of API faults: `verbs=create|update|...` (Kubernetes verbs), `resource=PLURAL`,
//! `except=PLURAL|...` (resources it never applies to), `agent=SUBSTRING` (user agent),
//! `probability=0..1`, `times=N`, `retry-after=SECONDS`, and for `drop-event` only
//! `event=KIND`. [`format_rule`] writes an installed rule back in this syntax.
//! Durations are `250ms`, `2s`, `1m`. Matchers: `any`, `vmi:NAME`, `prefix:NAME`,
//! `label:KEY=VALUE`.

use std::time::Duration;

use super::faults::{FaultAction, FaultRule, Verb};
use super::nodes::{Matcher, NodeSimError, NodeSimHandle};
use super::store::EventKind;

/// A parsed rule.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FaultSpec {
    /// A rule of the API server's [`super::Faults`].
    Api(FaultRule),
    /// A fault of the simulated nodes.
    Node(NodeFault),
}

/// A fault of the simulated nodes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NodeFault {
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
    /// Make it happen on `nodes`.
    ///
    /// # Errors
    /// The simulator's error (an unknown pod, VMI or node).
    pub(crate) async fn apply(&self, nodes: &NodeSimHandle) -> Result<(), NodeSimError> {
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
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
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
pub(crate) fn parse(rule: &str) -> Result<FaultSpec, String> {
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
        "drop-watch-randomly" => FaultRule::drop_watch_randomly(num(need("MAX")?, action)?),
        "tombstone" => FaultRule::tombstone_deletes(),
        "stale-list" => FaultRule::stale_list(num(need("N")?, action)?),
        "drop-event" => FaultRule::drop_event(num(need("N")?, action)?, None),
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
                "unknown fault {other:?} (error, too-many-requests, latency, conflict, drop-watch-after, delay-watch, drop-watch-randomly, tombstone, stale-list, drop-event, stuck-image-pull, fail-before-running, fail-pod, crash-guest, shutdown-guest, remove-node, add-node)"
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
            "except" => v.split('|').fold(rule, |r, e| r.except_resource(e)),
            "event" => {
                let FaultAction::DropEvent { nth, .. } = rule.action else {
                    return Err(format!("{action} takes no key \"event\" (drop-event does)"));
                };
                let kind = match v {
                    "ADDED" => EventKind::Added,
                    "MODIFIED" => EventKind::Modified,
                    "DELETED" => EventKind::Deleted,
                    _ => return Err(format!("event: {v:?} is not ADDED, MODIFIED or DELETED")),
                };
                FaultRule {
                    action: FaultAction::DropEvent {
                        nth,
                        kind: Some(kind),
                    },
                    ..rule
                }
            }
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
                    "unknown key {k:?} (verbs, resource, except, agent, probability, times, retry-after, event)"
                ));
            }
        };
    }
    Ok(FaultSpec::Api(rule))
}

/// A duration as [`parse_duration`] reads it (`250ms`, `2s`, `1m`).
fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        _ if ms.is_multiple_of(60_000) && ms > 0 => format!("{}m", ms / 60_000),
        _ if ms.is_multiple_of(1000) && ms > 0 => format!("{}s", ms / 1000),
        _ => format!("{ms}ms"),
    }
}

/// An installed API rule in the syntax [`parse`] reads (what `GET /faults` shows); `times` is
/// what is left of its budget. `parse(&format_rule(r))` gives `r` back.
pub(crate) fn format_rule(rule: &FaultRule) -> String {
    let (head, default) = match &rule.action {
        FaultAction::Error {
            code: 429,
            retry_after_seconds: Some(s),
        } => (
            format!("too-many-requests={s}"),
            FaultRule::too_many_requests(*s),
        ),
        FaultAction::Error {
            code,
            retry_after_seconds,
        } => {
            let mut head = format!("error={code}");
            if let Some(s) = retry_after_seconds {
                head.push_str(&format!(",retry-after={s}"));
            }
            (head, FaultRule::error(*code))
        }
        FaultAction::Latency(d) => (
            format!("latency={}", format_duration(*d)),
            FaultRule::latency(*d),
        ),
        FaultAction::Conflict => ("conflict".into(), FaultRule::conflict()),
        FaultAction::DropWatchAfter(n) => (
            format!("drop-watch-after={n}"),
            FaultRule::drop_watch_after(*n),
        ),
        FaultAction::DelayWatchEvents(d) => (
            format!("delay-watch={}", format_duration(*d)),
            FaultRule::delay_watch_events(*d),
        ),
        FaultAction::DropWatchAfterRandom(n) => (
            format!("drop-watch-randomly={n}"),
            FaultRule::drop_watch_randomly(*n),
        ),
        FaultAction::TombstoneDeletes => ("tombstone".into(), FaultRule::tombstone_deletes()),
        FaultAction::StaleList(n) => (format!("stale-list={n}"), FaultRule::stale_list(*n)),
        FaultAction::DropEvent { nth, kind } => {
            let mut head = format!("drop-event={nth}");
            if let Some(k) = kind {
                head.push_str(&format!(",event={}", k.as_str()));
            }
            (head, FaultRule::drop_event(*nth, *kind))
        }
    };
    let mut out = vec![head];
    if rule.verbs != default.verbs {
        let verbs: Vec<&str> = rule.verbs.iter().map(|v| v.as_str()).collect();
        out.push(format!("verbs={}", verbs.join("|")));
    }
    if let Some(r) = &rule.resource {
        out.push(format!("resource={r}"));
    }
    if !rule.except_resources.is_empty() {
        out.push(format!("except={}", rule.except_resources.join("|")));
    }
    if let Some(a) = &rule.user_agent {
        out.push(format!("agent={a}"));
    }
    if rule.probability < 1.0 {
        out.push(format!("probability={}", rule.probability));
    }
    if let Some(t) = rule.times {
        out.push(format!("times={t}"));
    }
    out.join(",")
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
    fn lost_event_rules() {
        assert_eq!(
            parse("tombstone,resource=virtualmachineinstances,agent=virt-controller").unwrap(),
            FaultSpec::Api(
                FaultRule::tombstone_deletes()
                    .resource("virtualmachineinstances")
                    .user_agent("virt-controller")
            )
        );
        assert_eq!(
            parse("stale-list=5,resource=pods").unwrap(),
            FaultSpec::Api(FaultRule::stale_list(5).resource("pods"))
        );
        assert_eq!(
            parse("drop-event=2,event=DELETED").unwrap(),
            FaultSpec::Api(FaultRule::drop_event(2, Some(EventKind::Deleted)))
        );
        assert_eq!(
            parse("drop-watch-randomly=40,except=leases|events").unwrap(),
            FaultSpec::Api(
                FaultRule::drop_watch_randomly(40)
                    .except_resource("leases")
                    .except_resource("events")
            )
        );
        assert!(
            parse("error=500,event=ADDED")
                .unwrap_err()
                .contains("drop-event does")
        );
        assert!(
            parse("drop-event=1,event=GONE")
                .unwrap_err()
                .contains("GONE")
        );
    }

    /// `GET /faults` shows rules in `--fault` syntax: every rule prints as text that parses
    /// back to the same rule.
    #[test]
    fn rules_print_in_the_syntax_they_parse_from() {
        let rules = [
            FaultRule::error(503)
                .verbs(&[Verb::Create, Verb::Patch])
                .resource("pods")
                .user_agent("virt-controller")
                .probability(0.025)
                .times(3),
            FaultRule::error(500).retry_after(2),
            FaultRule::too_many_requests(4),
            FaultRule::latency(Duration::from_millis(250)),
            FaultRule::latency(Duration::from_secs(120)),
            FaultRule::conflict().except_resource("leases"),
            FaultRule::drop_watch_after(0),
            FaultRule::drop_watch_randomly(40).user_agent("virt-controller"),
            FaultRule::delay_watch_events(Duration::from_secs(2)).probability(0.25),
            FaultRule::tombstone_deletes().resource("pods"),
            FaultRule::stale_list(7).verbs(&[Verb::List, Verb::Get]),
            FaultRule::drop_event(3, Some(EventKind::Modified)),
            FaultRule::drop_event(1, None).times(1),
        ];
        for rule in rules {
            let text = format_rule(&rule);
            assert_eq!(parse(&text), Ok(FaultSpec::Api(rule.clone())), "{text}");
        }
        assert_eq!(
            format_rule(&FaultRule::error(503).resource("pods").probability(0.5)),
            "error=503,resource=pods,probability=0.5"
        );
        assert_eq!(
            format_rule(&FaultRule::drop_event(2, Some(EventKind::Deleted))),
            "drop-event=2,event=DELETED"
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
