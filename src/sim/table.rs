//! Server-side printing: `meta.k8s.io` `Table` responses for `kubectl get`.
//!
//! kubectl asks for `Accept: application/json;as=Table;v=v1;g=meta.k8s.io, ...`. Columns follow
//! the real printers (`pkg/printers/internalversion/printers.go`) for the core kinds and the
//! `additionalPrinterColumns` of the KubeVirt / CDI CRDs (VirtualMachine: Age, Status, Ready;
//! VirtualMachineInstance: Age, Phase, IP, NodeName, Ready, Live-Migratable, Paused; DataVolume:
//! Phase, Progress, Restarts, Age). Other kinds get Name and Age.

use serde_json::{Map, Value, json};

use super::object;
use super::resources::ResourceDef;

/// `includeObject` of a Table request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    /// No object in the rows.
    None,
    /// `PartialObjectMetadata` (the default).
    Metadata,
    /// The full object.
    Object,
}

impl IncludeObject {
    /// Parse the `includeObject` query parameter.
    pub(crate) fn parse(v: Option<&str>) -> Self {
        match v {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

/// Whether an `Accept` header asks for a Table, and which `meta.k8s.io` version.
pub(crate) fn wants_table(accept: &str) -> Option<&'static str> {
    let mut best = None;
    for part in accept.split(',') {
        let p = part.replace(' ', "");
        if p.contains("as=Table") && p.contains("g=meta.k8s.io") {
            if p.contains("v=v1;") || p.ends_with("v=v1") {
                return Some("meta.k8s.io/v1");
            }
            if p.contains("v=v1beta1") {
                best = Some("meta.k8s.io/v1beta1");
            }
        } else if p.starts_with("application/json") && best.is_none() {
            // Plain JSON listed before any Table: the client prefers JSON.
            return None;
        }
    }
    best
}

#[derive(Debug, Clone, Copy)]
enum Cell {
    Name,
    Age,
    Path(&'static str),
    Cond(&'static str),
    PodReady,
    PodStatus,
    PodRestarts,
    NodeStatus,
    DataCount,
    EventObject,
    EventLastSeen,
    Literal(&'static str),
}

struct Col {
    name: &'static str,
    ty: &'static str,
    priority: u8,
    cell: Cell,
}

const fn col(name: &'static str, cell: Cell) -> Col {
    Col {
        name,
        ty: "string",
        priority: 0,
        cell,
    }
}

/// A column of type `integer`.
const fn integer(name: &'static str, cell: Cell) -> Col {
    Col {
        ty: "integer",
        ..col(name, cell)
    }
}

/// A column shown only with `-o wide` (priority 1).
const fn wide(name: &'static str, cell: Cell) -> Col {
    Col {
        priority: 1,
        ..col(name, cell)
    }
}

fn columns(def: &ResourceDef) -> Vec<Col> {
    use Cell::*;
    let name = col("Name", Name);
    let age = col("Age", Age);
    match (def.group, def.plural) {
        ("", "pods") => vec![
            name,
            col("Ready", PodReady),
            col("Status", PodStatus),
            integer("Restarts", PodRestarts),
            age,
            wide("IP", Path("status.podIP")),
            wide("Node", Path("spec.nodeName")),
        ],
        ("", "namespaces") => vec![name, col("Status", Path("status.phase")), age],
        ("", "nodes") => vec![
            name,
            col("Status", NodeStatus),
            col("Roles", Literal("<none>")),
            age,
            col("Version", Path("status.nodeInfo.kubeletVersion")),
        ],
        ("", "configmaps") => vec![name, integer("Data", DataCount), age],
        ("", "secrets") => vec![
            name,
            col("Type", Path("type")),
            integer("Data", DataCount),
            age,
        ],
        ("", "persistentvolumeclaims") => vec![
            name,
            col("Status", Path("status.phase")),
            col("Volume", Path("spec.volumeName")),
            col("Capacity", Path("status.capacity.storage")),
            col("StorageClass", Path("spec.storageClassName")),
            age,
        ],
        ("", "events") => vec![
            col("Last Seen", EventLastSeen),
            col("Type", Path("type")),
            col("Reason", Path("reason")),
            col("Object", EventObject),
            col("Message", Path("message")),
            wide("Name", Name),
        ],
        ("coordination.k8s.io", "leases") => {
            vec![name, col("Holder", Path("spec.holderIdentity")), age]
        }
        ("kubevirt.io", "virtualmachines") => vec![
            name,
            age,
            col("Status", Path("status.printableStatus")),
            col("Ready", Cond("Ready")),
        ],
        ("kubevirt.io", "virtualmachineinstances") => vec![
            name,
            age,
            col("Phase", Path("status.phase")),
            col("IP", Path("status.interfaces.0.ipAddress")),
            col("NodeName", Path("status.nodeName")),
            col("Ready", Cond("Ready")),
            wide("Live-Migratable", Cond("LiveMigratable")),
            wide("Paused", Cond("Paused")),
        ],
        ("kubevirt.io", "virtualmachineinstancemigrations") => vec![
            name,
            col("Phase", Path("status.phase")),
            col("VMI", Path("spec.vmiName")),
        ],
        ("cdi.kubevirt.io", "datavolumes") => vec![
            name,
            col("Phase", Path("status.phase")),
            col("Progress", Path("status.progress")),
            integer("Restarts", Path("status.restartCount")),
            age,
        ],
        _ => vec![name, age],
    }
}

fn path<'a>(obj: &'a Value, p: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for seg in p.split('.') {
        cur = match seg.parse::<usize>() {
            Ok(i) => cur.get(i)?,
            Err(_) => cur.get(seg)?,
        };
    }
    Some(cur)
}

fn condition(obj: &Value, ty: &str) -> Value {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
        })
        .and_then(|c| c.get("status").cloned())
        .unwrap_or(Value::Null)
}

/// `duration.HumanDuration` (`k8s.io/apimachinery/pkg/util/duration`).
pub(crate) fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    // `<n><unit>`, then `<rest><smaller unit>` unless the rest is zero.
    let two_units = |n: i64, unit: &str, rest: i64, smaller: &str| {
        if rest == 0 {
            format!("{n}{unit}")
        } else {
            format!("{n}{unit}{rest}{smaller}")
        }
    };
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        two_units(m, "m", s % 60, "s")
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        two_units(h, "h", m % 60, "m")
    } else if h < 48 {
        format!("{h}h")
    } else if h < 192 {
        two_units(d, "d", h % 24, "h")
    } else if d < 365 * 2 {
        format!("{d}d")
    } else if d < 365 * 8 {
        format!("{}y{}d", d / 365, d % 365)
    } else {
        format!("{}y", d / 365)
    }
}

fn age_of(ts: Option<&str>) -> Value {
    let Some(ts) = ts else {
        return json!("<unknown>");
    };
    match chrono::DateTime::parse_from_rfc3339(ts) {
        Ok(t) => json!(human_duration(
            (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds()
        )),
        Err(_) => json!("<unknown>"),
    }
}

fn pod_status(obj: &Value) -> Value {
    if object::is_deleting(obj) {
        return json!("Terminating");
    }
    let statuses = obj
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    if let Some(reason) = statuses.and_then(|cs| {
        cs.iter().find_map(|c| {
            c.pointer("/state/waiting/reason")
                .or_else(|| c.pointer("/state/terminated/reason"))
                .and_then(Value::as_str)
        })
    }) {
        return json!(reason);
    }
    obj.pointer("/status/reason")
        .or_else(|| obj.pointer("/status/phase"))
        .cloned()
        .unwrap_or(json!("Unknown"))
}

fn cell(obj: &Value, c: Cell) -> Value {
    match c {
        Cell::Name => json!(object::name(obj)),
        Cell::Age => age_of(
            object::meta(obj)
                .and_then(|m| m.get("creationTimestamp"))
                .and_then(Value::as_str),
        ),
        Cell::Path(p) => path(obj, p).cloned().unwrap_or(Value::Null),
        Cell::Cond(t) => condition(obj, t),
        Cell::PodReady => {
            let total = obj
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let ready = obj
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .map_or(0, |cs| {
                    cs.iter()
                        .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
                        .count()
                });
            json!(format!("{ready}/{total}"))
        }
        Cell::PodStatus => pod_status(obj),
        Cell::PodRestarts => json!(
            obj.pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .map_or(0, |cs| cs
                    .iter()
                    .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                    .sum::<i64>())
        ),
        Cell::NodeStatus => match condition(obj, "Ready").as_str() {
            Some("True") => json!("Ready"),
            Some(_) => json!("NotReady"),
            None => json!("Unknown"),
        },
        Cell::DataCount => {
            let n = |k: &str| obj.get(k).and_then(Value::as_object).map_or(0, Map::len);
            json!(n("data") + n("binaryData"))
        }
        Cell::EventObject => {
            let kind = object::str_at(obj, "/involvedObject/kind");
            let name = object::str_at(obj, "/involvedObject/name");
            json!(format!("{}/{name}", kind.to_lowercase()))
        }
        Cell::EventLastSeen => age_of(
            obj.get("lastTimestamp")
                .and_then(Value::as_str)
                .or_else(|| obj.get("eventTime").and_then(Value::as_str))
                .or_else(|| {
                    object::meta(obj)
                        .and_then(|m| m.get("creationTimestamp"))
                        .and_then(Value::as_str)
                }),
        ),
        Cell::Literal(s) => json!(s),
    }
}

fn row(def: &ResourceDef, cols: &[Col], obj: &Value, include: IncludeObject) -> Value {
    let cells: Vec<Value> = cols.iter().map(|c| cell(obj, c.cell)).collect();
    let mut r = json!({"cells": cells});
    match include {
        IncludeObject::None => {}
        IncludeObject::Object => r["object"] = obj.clone(),
        IncludeObject::Metadata => {
            r["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
            })
        }
    }
    let _ = def;
    r
}

/// A `Table` for `items` (already in the served form).
pub(crate) fn table(
    def: &ResourceDef,
    api_version: &str,
    items: &[&Value],
    resource_version: Option<String>,
    continue_token: Option<String>,
    include: IncludeObject,
) -> Value {
    let cols = columns(def);
    let defs: Vec<Value> = cols
        .iter()
        .map(|c| {
            let mut d = json!({"name": c.name, "type": c.ty, "format": "", "description": c.name, "priority": c.priority});
            if matches!(c.cell, Cell::Name) {
                d["format"] = json!("name");
            }
            d
        })
        .collect();
    let rows: Vec<Value> = items.iter().map(|o| row(def, &cols, o, include)).collect();
    let mut meta = Map::new();
    if let Some(rv) = resource_version {
        meta.insert("resourceVersion".into(), json!(rv));
    }
    if let Some(c) = continue_token {
        meta.insert("continue".into(), json!(c));
    }
    json!({
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": meta,
        "columnDefinitions": defs,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::{Registry, builtin_resources};

    #[test]
    fn accept_parsing() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(wants_table(kubectl), Some("meta.k8s.io/v1"));
        assert_eq!(wants_table("application/json"), None);
        assert_eq!(wants_table("application/json, */*"), None);
        assert_eq!(
            wants_table("application/json;as=Table;v=v1beta1;g=meta.k8s.io"),
            Some("meta.k8s.io/v1beta1")
        );
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(125), "2m5s");
        assert_eq!(human_duration(900), "15m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400), "3d");
    }

    #[test]
    fn vmi_columns() {
        let reg = Registry::new(builtin_resources());
        let def = reg.get(
            reg.find("kubevirt.io", "v1", "virtualmachineinstances")
                .unwrap(),
        );
        let vmi = json!({"metadata": {"name": "v", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "status": {"phase": "Running", "nodeName": "n1", "interfaces": [{"ipAddress": "10.0.0.1"}],
                       "conditions": [{"type": "Ready", "status": "True"}]}});
        let t = table(
            def,
            "meta.k8s.io/v1",
            &[&vmi],
            Some("5".into()),
            None,
            IncludeObject::Metadata,
        );
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            &names[..6],
            ["Name", "Age", "Phase", "IP", "NodeName", "Ready"]
        );
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[0], "v");
        assert_eq!(cells[2], "Running");
        assert_eq!(cells[3], "10.0.0.1");
        assert_eq!(cells[4], "n1");
        assert_eq!(cells[5], "True");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }
}
