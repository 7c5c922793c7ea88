//! Building a `kube::Client` from the kubectl-style global flags.

use super::{CliError, GlobalArgs};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// A client for `--kubeconfig` / `$KUBECONFIG` / `~/.kube/config` (or in-cluster config), with
/// `--context` applied. Errors say which file or context failed.
pub async fn client_from_flags(global: &GlobalArgs) -> Result<kube::Client, CliError> {
    let options = KubeConfigOptions {
        context: global.context.clone(),
        ..Default::default()
    };
    let config = match &global.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| CliError::Failed(format!("reading kubeconfig {}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| CliError::Failed(format!("kubeconfig {}: {e}", path.display())))?
        }
        None if global.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| CliError::Failed(format!("kubeconfig context: {e}")))?,
        None => kube::Config::infer().await.map_err(|e| {
            CliError::Failed(format!(
                "no cluster configuration found ({e}); pass --kubeconfig, or use --embedded to run on the embedded simulated cluster"
            ))
        })?,
    };
    kube::Client::try_from(config)
        .map_err(|e| CliError::Failed(format!("cannot build a Kubernetes client: {e}")))
}
