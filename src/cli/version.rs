//! `version`: what this build is — the crate version, the git commit it was built from, the
//! Kubernetes API level of its typed client (k8s-openapi's enabled feature) and the KubeVirt
//! release whose virt-controller behaviour it reproduces. Exit code 0 (2 for a bad `-o`).

use super::CliError;
use clap::Args;
use serde::Serialize;
use std::process::ExitCode;

/// The KubeVirt release whose virt-controller this build re-implements.
pub(crate) const KUBEVIRT_BEHAVIOUR_VERSION: &str = "v1.9.0";

/// Flags of `version`.
#[derive(Debug, Args)]
pub struct VersionArgs {
    /// Print the version as JSON or YAML.
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<Format>,
}

/// `-o` formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Json,
    Yaml,
}

/// The facts `version` prints (`-o json` shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VersionInfo {
    /// The crate version (`Cargo.toml`).
    pub version: String,
    /// `git rev-parse HEAD` at build time, or `unknown` when built outside a git checkout.
    pub git_commit: String,
    /// The Kubernetes API level of the typed client (k8s-openapi feature), e.g. `1.33`.
    pub kubernetes_api_level: String,
    /// The KubeVirt release reproduced.
    pub kubevirt_version: String,
}

impl VersionInfo {
    /// This build's facts.
    pub(crate) fn current() -> Self {
        VersionInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            git_commit: env!("VIRTCTL_GIT_COMMIT").to_string(),
            kubernetes_api_level: env!("VIRTCTL_K8S_API_LEVEL").to_string(),
            kubevirt_version: KUBEVIRT_BEHAVIOUR_VERSION.to_string(),
        }
    }

    /// The plain-text form.
    pub(crate) fn text(&self) -> String {
        format!(
            "virtctl-rs {}\ngit commit: {}\nKubernetes API level (k8s-openapi): {}\nKubeVirt behaviour: virt-controller {}\n",
            self.version, self.git_commit, self.kubernetes_api_level, self.kubevirt_version
        )
    }
}

/// Run `version`.
pub(crate) fn run(args: VersionArgs) -> Result<ExitCode, CliError> {
    let info = VersionInfo::current();
    let text = match args.output {
        None => info.text(),
        Some(Format::Json) => {
            serde_json::to_string_pretty(&info).map_err(|e| CliError::Failed(e.to_string()))? + "\n"
        }
        Some(Format::Yaml) => {
            serde_yaml::to_string(&info).map_err(|e| CliError::Failed(e.to_string()))?
        }
    };
    super::output::out(&text);
    Ok(ExitCode::SUCCESS)
}
