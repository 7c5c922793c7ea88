//! `cluster serve`: run the embedded cluster (API server + simulated nodes) in the foreground.

use super::{CliError, GlobalArgs};
use crate::sim::cluster::{EmbeddedCluster, EmbeddedClusterConfig};
use crate::sim::nodes::{NodeCapacity, NodeLabel};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Flags of `cluster`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCommand,
}

/// `cluster` subcommands.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Run an embedded Kubernetes API server with simulated nodes until Ctrl-C / SIGTERM.
    Serve(ServeArgs),
    /// Run simulated nodes (scheduler, kubelet, virt-handler) against the API server of
    /// --kubeconfig / $KUBECONFIG until Ctrl-C / SIGTERM (kwok-style; see docs/simulated-nodes.md).
    Nodes(NodesArgs),
}

/// Flags shaping the simulated nodes, shared by `cluster serve` and `cluster nodes`.
#[derive(Debug, Args)]
pub struct NodeShapeArgs {
    /// Add a label to every simulated node (KEY=VALUE) or to one (NODE=KEY=VALUE), after the
    /// simulator's own (repeatable); e.g. kubevirt.io/cpumanager=true, which the launcher pods
    /// of dedicated-CPU VMs select.
    #[arg(long, value_name = "[NODE=]KEY=VALUE")]
    pub node_label: Vec<String>,
    /// CPUs of every node, capacity = allocatable (default 32).
    #[arg(long, value_name = "QUANTITY")]
    pub node_cpu: Option<String>,
    /// Memory of every node, capacity = allocatable (default 128Gi).
    #[arg(long, value_name = "QUANTITY")]
    pub node_memory: Option<String>,
    /// Capacity (= allocatable) of any resource of every node (repeatable), e.g.
    /// nvidia.com/gpu=2 or hugepages-1Gi=16Gi.
    #[arg(long, value_name = "NAME=QUANTITY")]
    pub node_capacity: Vec<String>,
}

impl NodeShapeArgs {
    /// The nodes' capacity and extra labels, for `nodes` nodes. Errors name the flag and value.
    fn resolve(&self, nodes: usize) -> Result<(NodeCapacity, Vec<NodeLabel>), CliError> {
        let mut capacity = NodeCapacity::default();
        let mut set = |flag: &str, resource: &str, amount: &str, given: &str| {
            capacity
                .set(resource, amount)
                .map_err(|e| CliError::Usage(format!("{flag} {given:?}: {e}")))
        };
        for given in &self.node_capacity {
            let Some((resource, amount)) = given.split_once('=') else {
                return Err(CliError::Usage(format!(
                    "--node-capacity {given:?}: expected NAME=QUANTITY (e.g. nvidia.com/gpu=2)"
                )));
            };
            set("--node-capacity", resource, amount, given)?;
        }
        // The dedicated flags win over --node-capacity cpu=/memory=.
        for (flag, resource, amount) in [
            ("--node-cpu", "cpu", &self.node_cpu),
            ("--node-memory", "memory", &self.node_memory),
        ] {
            if let Some(amount) = amount {
                set(flag, resource, amount, amount)?;
            }
        }
        let labels = self
            .node_label
            .iter()
            .map(|given| {
                NodeLabel::parse(given)
                    .and_then(|l| l.validate_node_count(nodes).map(|()| l))
                    .map_err(|e| CliError::Usage(format!("--node-label {given:?}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((capacity, labels))
    }
}

/// Flags of `cluster nodes`.
#[derive(Debug, Args)]
pub struct NodesArgs {
    /// Number of simulated nodes to register (sim-node-0, sim-node-1, ...).
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    #[command(flatten)]
    pub shape: NodeShapeArgs,
    /// Milliseconds between a pod being bound and it running.
    #[arg(long, default_value_t = 200)]
    pub kubelet_delay_ms: u64,
    /// Factor applied to grace periods (0.01 turns 60 s into 0.6 s).
    #[arg(long, default_value_t = 0.01)]
    pub grace_scale: f64,
    /// Bind the WaitForFirstConsumer claims of each pod the simulated scheduler places, to its
    /// node, as kube-scheduler's volume binding and a provisioner would: for an API server with
    /// no PV controller or provisioner (a bare kube-apiserver).
    #[arg(long)]
    pub bind_claims: bool,
}

impl NodesArgs {
    /// The simulator's settings from these flags.
    fn sim_config(&self) -> Result<crate::sim::nodes::NodeSimConfig, CliError> {
        let (capacity, labels) = self.shape.resolve(self.nodes)?;
        Ok(crate::sim::nodes::NodeSimConfig {
            nodes: self.nodes,
            kubelet_delay: Duration::from_millis(self.kubelet_delay_ms),
            grace_scale: self.grace_scale,
            capacity,
            labels,
            bind_claims: self.bind_claims,
        })
    }
}

/// Flags of `cluster serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Number of simulated nodes (sim-node-0, sim-node-1, ...).
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    #[command(flatten)]
    pub shape: NodeShapeArgs,
    /// Write the kubeconfig to this file (mode 0600) instead of a private temp dir.
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
    /// Apply a YAML file or a directory of YAML files after start (repeatable).
    #[arg(long)]
    pub apply: Vec<PathBuf>,
    /// Milliseconds between a pod being bound and it running.
    #[arg(long, default_value_t = 200)]
    pub kubelet_delay_ms: u64,
    /// Factor applied to grace periods (0.01 turns 60 s into 0.6 s).
    #[arg(long, default_value_t = 0.01)]
    pub grace_scale: f64,
    /// No admission: virt-api's webhooks and Pod Security do not run (a cluster without
    /// virt-api; run the controller with --without-virt-api against it).
    #[arg(long)]
    pub no_admission: bool,
    /// Install a fault at start (repeatable), e.g. `error=503,verbs=create,resource=pods` or
    /// `stuck-image-pull=vmi:NAME`; docs/embedded-cluster.md lists the rules.
    #[arg(long, value_name = "RULE")]
    pub fault: Vec<String>,
    /// Port of the loopback admin endpoint that adds and removes faults at run time (0 = any
    /// free port; its bearer token is written next to the kubeconfig as `<kubeconfig>.admin-token`).
    #[arg(long, default_value_t = 0)]
    pub admin_port: u16,
    /// Append the API server's audit log to this file, one JSON object a line (every request:
    /// verb, resource, name, user agent, code; the leader-election fields of Lease writes).
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// What --audit-log holds: `entries` (the fields above, camelCase) or `events`
    /// (`audit.k8s.io/v1` Events of the writes, with request and response objects for
    /// KubeVirt's kinds, pods, PVCs, ControllerRevisions and Leases, as `replay` reads them).
    #[arg(long, value_enum, default_value = "entries")]
    pub audit_log_format: crate::sim::AuditFormat,
    /// How long a new PersistentVolumeClaim stays Pending before it is Bound (`250ms`, `2s`,
    /// `1m`; `never`: claims stay Pending). Claims of a missing StorageClass, of one with
    /// `volumeBindingMode: WaitForFirstConsumer` until a pod using them is scheduled, and those
    /// annotated `sim.virtctl-rs.io/hold-binding: "true"` stay Pending.
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    pub pvc_bind_delay: String,
}

/// `cluster serve` starts its own cluster: the flags naming an existing one make no sense.
fn reject_cluster_flags(global: &GlobalArgs) -> Result<(), CliError> {
    let given: Vec<&str> = [
        (global.kubeconfig.is_some(), "--kubeconfig"),
        (global.context.is_some(), "--context"),
        (global.namespace.is_some(), "-n/--namespace"),
    ]
    .into_iter()
    .filter_map(|(set, flag)| set.then_some(flag))
    .collect();
    if given.is_empty() {
        return Ok(());
    }
    Err(CliError::Usage(format!(
        "cluster serve starts its own cluster and does not use {} (use --kubeconfig-out to choose where its kubeconfig goes)",
        given.join(", ")
    )))
}

/// Run `cluster ...`.
pub(crate) fn run(global: &GlobalArgs, args: ClusterArgs) -> Result<ExitCode, CliError> {
    match args.command {
        ClusterCommand::Serve(serve_args) => {
            reject_cluster_flags(global)?;
            let runtime = tokio::runtime::Runtime::new()
                .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))?;
            runtime.block_on(serve(serve_args))
        }
        ClusterCommand::Nodes(nodes_args) => {
            if global.namespace.is_some() {
                return Err(CliError::Usage(
                    "cluster nodes runs cluster-wide and does not use -n/--namespace".into(),
                ));
            }
            let runtime = tokio::runtime::Runtime::new()
                .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))?;
            runtime.block_on(nodes(global, nodes_args))
        }
    }
}

async fn nodes(global: &GlobalArgs, args: NodesArgs) -> Result<ExitCode, CliError> {
    let sim_config = args.sim_config()?;
    // Listen before starting so a signal during start-up is kept (src/cli/signals.rs).
    let mut signals = super::signals::ShutdownSignals::listen()?;
    let (config, target) = super::client::load_config(global, "cluster nodes").await?;
    let sim = crate::sim::nodes::NodeSimulator::start(config, sim_config)
        .await
        .map_err(|e| CliError::Failed(format!("simulated nodes against {}: {e}", target.server)))?;
    crate::say!(
        "{} simulated node(s) running against {} (context {}, from {}): {}",
        sim.handle().node_names().len(),
        target.server,
        target.context,
        target.source,
        sim.handle().node_names().join(", ")
    );
    let name = signals.recv().await;
    eprintln!("{name} received, stopping the simulated nodes (their Node objects stay)");
    sim.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

async fn serve(args: ServeArgs) -> Result<ExitCode, CliError> {
    let (capacity, labels) = args.shape.resolve(args.nodes)?;
    let mut config = EmbeddedClusterConfig {
        nodes: args.nodes,
        kubelet_delay: Duration::from_millis(args.kubelet_delay_ms),
        grace_scale: args.grace_scale,
        capacity,
        labels,
        ..Default::default()
    };
    config.api.admission = !args.no_admission;
    config.api.pvc_bind_delay = match args.pvc_bind_delay.as_str() {
        "never" => None,
        d => Some(
            crate::sim::faultspec::parse_duration(d)
                .map_err(|e| CliError::Usage(format!("--pvc-bind-delay: {e}")))?,
        ),
    };
    if let Some(out) = &args.kubeconfig_out {
        let out = std::path::absolute(out).map_err(|e| {
            CliError::Failed(format!("invalid --kubeconfig-out {}: {e}", out.display()))
        })?;
        config.api.kubeconfig_path = Some(out);
    }
    let faults = args
        .fault
        .iter()
        .map(|r| {
            crate::sim::faultspec::parse(r)
                .map_err(|e| CliError::Usage(format!("--fault {r:?}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    for f in &faults {
        if let crate::sim::faultspec::FaultSpec::Api(rule) = f {
            config.api.faults.push(rule.clone());
        }
    }
    config.api.audit_file = args.audit_log.clone();
    config.api.audit_format = args.audit_log_format;
    // Listen before starting so a signal during start-up is kept (src/cli/signals.rs).
    let mut signals = super::signals::ShutdownSignals::listen()?;
    let cluster = EmbeddedCluster::start(config)
        .await
        .map_err(|e| CliError::Failed(e.to_string()))?;
    let path = cluster.kubeconfig_path().to_path_buf();
    let admin = match crate::sim::admin::AdminServer::start(
        cluster.api().faults_handle(),
        cluster.nodes().clone(),
        args.admin_port,
    )
    .await
    {
        Ok(a) => a,
        Err(e) => {
            cluster.shutdown().await;
            return Err(CliError::Failed(format!(
                "admin endpoint on 127.0.0.1:{}: {e}",
                args.admin_port
            )));
        }
    };
    let token_path = std::path::PathBuf::from(format!("{}.admin-token", path.display()));
    let prepared = async {
        crate::sim::kubeconfig::write_private(&token_path, admin.token())
            .map_err(|e| CliError::Failed(format!("writing {}: {e}", token_path.display())))?;
        for f in &faults {
            if let crate::sim::faultspec::FaultSpec::Node(nf) = f {
                nf.apply(cluster.nodes())
                    .await
                    .map_err(|e| CliError::Failed(format!("--fault: {e}")))?;
            }
        }
        for p in &args.apply {
            let summary = cluster
                .apply_path(p)
                .await
                .map_err(|e| CliError::Failed(e.to_string()))?;
            eprintln!(
                "applied {}: {} created, {} replaced, {} skipped",
                p.display(),
                summary.created.len(),
                summary.replaced.len(),
                summary.skipped.len()
            );
        }
        Ok::<(), CliError>(())
    }
    .await;
    let stop = |cluster: EmbeddedCluster, admin: crate::sim::admin::AdminServer| async {
        admin.shutdown().await;
        let _ = std::fs::remove_file(&token_path);
        cluster.shutdown().await;
    };
    if let Err(e) = prepared {
        stop(cluster, admin).await;
        return Err(e);
    }
    crate::say!(
        "embedded cluster at {} with {} simulated node(s): {}",
        cluster.api().url(),
        cluster.nodes().node_names().len(),
        cluster.nodes().node_names().join(", ")
    );
    crate::say!("kubeconfig: {}", path.display());
    crate::say!("export KUBECONFIG={}", path.display());
    crate::say!(
        "admin: {}/faults (bearer token in {})",
        admin.url(),
        token_path.display()
    );
    let name = signals.recv().await;
    eprintln!("{name} received, shutting down");
    stop(cluster, admin).await;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(labels: &[&str], cpu: Option<&str>, capacity: &[&str]) -> NodeShapeArgs {
        NodeShapeArgs {
            node_label: labels.iter().map(|s| s.to_string()).collect(),
            node_cpu: cpu.map(str::to_string),
            node_memory: None,
            node_capacity: capacity.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn usage(r: Result<(NodeCapacity, Vec<NodeLabel>), CliError>) -> String {
        match r {
            Err(CliError::Usage(m)) => m,
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn bind_claims_is_off_unless_asked() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            nodes: NodesArgs,
        }
        let config = |args: &[&str]| {
            let cli = Cli::try_parse_from(args).expect("parses");
            cli.nodes.sim_config().expect("valid")
        };
        assert!(!config(&["x"]).bind_claims);
        let asked = config(&[
            "x",
            "--bind-claims",
            "--nodes",
            "3",
            "--kubelet-delay-ms",
            "10",
        ]);
        assert!(asked.bind_claims);
        assert_eq!((asked.nodes, asked.kubelet_delay.as_millis()), (3, 10));
    }

    #[test]
    fn node_shape_flags_become_labels_and_capacity() {
        let (capacity, labels) = shape(
            &["kubevirt.io/cpumanager=true", "sim-node-1=zone=b"],
            Some("8"),
            &["nvidia.com/gpu=2", "cpu=4"],
        )
        .resolve(2)
        .unwrap();
        let amount = |r: &str| capacity.resources.get(r).map(String::as_str);
        // --node-cpu wins over --node-capacity cpu=.
        assert_eq!(amount("cpu"), Some("8"));
        assert_eq!(amount("nvidia.com/gpu"), Some("2"));
        assert_eq!(amount("memory"), Some("128Gi"));
        assert_eq!(
            labels.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["kubevirt.io/cpumanager=true", "sim-node-1=zone=b"]
        );
    }

    #[test]
    fn bad_node_shape_flags_name_the_flag() {
        for (args, says) in [
            (
                shape(&["cpumanager"], None, &[]),
                "--node-label \"cpumanager\": \"cpumanager\" is not KEY=VALUE or NODE=KEY=VALUE",
            ),
            (
                shape(&["sim-node-2=k=v"], None, &[]),
                "--node-label \"sim-node-2=k=v\": sim-node-2 is not one of the 2 simulated node(s)",
            ),
            (
                shape(&[], Some("many"), &[]),
                "--node-cpu \"many\": \"many\" is not a quantity",
            ),
            (
                shape(&[], None, &["gpu"]),
                "--node-capacity \"gpu\": expected NAME=QUANTITY",
            ),
            (
                shape(&[], None, &["memory=-1Gi"]),
                "--node-capacity \"memory=-1Gi\": \"-1Gi\" is negative",
            ),
        ] {
            let m = usage(args.resolve(2));
            assert!(m.starts_with(says), "{m}");
        }
    }
}
