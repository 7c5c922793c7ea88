//! `demo`: the whole story with no cluster at hand. Starts the embedded cluster with node
//! delays like a real start (the launcher pod takes `--kubelet-delay-ms` to run, the domain
//! `--virt-handler-delay-ms` to start), the controller under its Lease (what
//! `run-controller --embedded` runs: [`super::run_controller::start_embedded`] and
//! [`super::run_controller::start_manager`]), creates a container-disk VM with
//! `runStrategy: Always`, and opens the inspector on it, the fleet view one Esc away.
//! Quitting stops the controller (releasing the Lease) and the cluster.

use super::run_controller::{Clients, start_embedded, start_manager};
use super::{CliError, GlobalArgs};
use crate::api::VirtualMachine;
use crate::controller::manager::ManagerConfig;
use crate::inspect::GatherOptions;
use crate::inspect::tui::App;
use crate::inspect::tui::cluster::ClusterGather;
use crate::runtime::lease::{LeaderElectionConfig, default_identity};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The demo's VM: a container-disk VM that starts by itself (`runStrategy: Always`).
pub(crate) const DEMO_VM: &str = r#"apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: vm-demo
  namespace: default
  labels:
    kubevirt.io/vm: vm-demo
spec:
  runStrategy: Always
  template:
    metadata:
      labels:
        kubevirt.io/vm: vm-demo
    spec:
      domain:
        cpu:
          cores: 1
        memory:
          guest: 256Mi
        devices:
          disks:
          - name: rootdisk
            disk:
              bus: virtio
      terminationGracePeriodSeconds: 30
      volumes:
      - name: rootdisk
        containerDisk:
          image: quay.io/containerdisks/fedora:41
"#;

/// Flags of `demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Simulated nodes.
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// Milliseconds from the launcher pod being bound to it running.
    #[arg(long, default_value_t = 3000)]
    pub kubelet_delay_ms: u64,
    /// Milliseconds from the VMI being Scheduled to virt-handler reporting it Running.
    #[arg(long, default_value_t = 2000)]
    pub virt_handler_delay_ms: u64,
    /// Also apply these YAML files or directories (repeatable), e.g. docs/examples.
    #[arg(long, value_name = "FILE|DIR")]
    pub apply: Vec<PathBuf>,
}

/// The controller settings of the demo: KubeVirt's Lease and worker counts, endpoints on any
/// free local port (the inspector finds them through the Lease annotation).
fn manager_config() -> ManagerConfig {
    ManagerConfig {
        listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        ..ManagerConfig::new(LeaderElectionConfig::new(default_identity()))
    }
}

/// Run `demo`.
pub(crate) fn run(global: &GlobalArgs, args: DemoArgs) -> Result<ExitCode, CliError> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return Err(CliError::Failed(
            "demo draws a terminal UI: run it in a terminal (for scripts: \
             run-controller --embedded --apply docs/examples --exit-when-ready)"
                .into(),
        ));
    }
    for path in &args.apply {
        if !path.exists() {
            return Err(CliError::Failed(format!(
                "--apply {}: no such file or directory",
                path.display()
            )));
        }
    }
    let runtime = tokio::runtime::Runtime::new()
        .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(run_async(args, super::client::user_agent(global, "demo")))
}

async fn run_async(args: DemoArgs, user_agent: String) -> Result<ExitCode, CliError> {
    let (cluster, clients) = start_embedded(
        crate::sim::cluster::EmbeddedClusterConfig {
            nodes: args.nodes,
            kubelet_delay: Duration::from_millis(args.kubelet_delay_ms),
            ..Default::default()
        },
        &user_agent,
    )
    .await?;
    cluster
        .nodes()
        .set_virt_handler_delay(Duration::from_millis(args.virt_handler_delay_ms));
    let result = demo(&args, &clients).await;
    cluster.shutdown().await;
    if result.is_ok() {
        println!("demo stopped: the Lease was released and the embedded cluster shut down");
    }
    result
}

async fn demo(args: &DemoArgs, clients: &Clients) -> Result<ExitCode, CliError> {
    let client = &clients.controllers;
    for path in &args.apply {
        crate::api::apply::apply_path(client, path)
            .await
            .map_err(|e| CliError::Failed(format!("--apply {}: {e}", path.display())))?;
    }
    let config = manager_config();
    let manager = start_manager(clients, &config).await?;
    let vm: VirtualMachine = serde_yaml::from_str(DEMO_VM)
        .map_err(|e| CliError::Failed(format!("the demo VM manifest: {e}")))?;
    let vms: kube::Api<VirtualMachine> = kube::Api::namespaced(client.clone(), "default");
    vms.create(&Default::default(), &vm)
        .await
        .map_err(|e| CliError::Failed(format!("creating VirtualMachine default/vm-demo: {e}")))?;

    let gather = ClusterGather {
        client: client.clone(),
        namespace: None,
        options: GatherOptions {
            lease_namespace: config.lease.namespace.clone(),
            lease_name: config.lease.lease_name.clone(),
            kubevirt_namespace: config
                .kubevirt_namespace
                .clone()
                .unwrap_or_else(|| GatherOptions::default().kubevirt_namespace),
            ..GatherOptions::default()
        },
        shadow: None,
    };
    let cancel = CancellationToken::new();
    let run = manager.run(cancel.clone());
    tokio::pin!(run);
    let ui = crate::inspect::tui::run(&gather, App::vm_in_fleet("default", "vm-demo"));
    tokio::pin!(ui);
    // The UI ends on q, Esc in the fleet view, Ctrl-C, SIGINT or SIGTERM.
    let outcome = tokio::select! {
        r = &mut ui => r.map_err(|e| CliError::Failed(format!("terminal: {e}"))),
        r = &mut run => {
            // The controller stopped on its own (lost Lease, error): the UI's guard restores
            // the terminal when it is dropped on the way out.
            return Err(CliError::Failed(match r {
                Ok(()) => "the controller stopped".to_string(),
                Err(e) => format!("the controller stopped: {e}"),
            }));
        }
    };
    cancel.cancel();
    (&mut run)
        .await
        .map_err(|e| CliError::Failed(format!("stopping the controller: {e}")))?;
    outcome.map(|()| ExitCode::SUCCESS)
}
