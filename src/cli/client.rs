//! Building a `kube::Client` from the kubectl-style global flags.
//!
//! Kubeconfig lookup follows kubectl (client-go's `clientcmd.ClientConfigLoadingRules`):
//! `--kubeconfig FILE` alone if given; else every file of `$KUBECONFIG` (`:`-separated, `;` on
//! Windows) merged — the first file to set a map key (cluster, user, context) or
//! `current-context` wins, empty entries and missing files are skipped; else `~/.kube/config`;
//! else the in-cluster service account.

use super::{CliError, GlobalArgs};
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Which cluster a client talks to, said before writing to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterTarget {
    /// The API server URL.
    pub server: String,
    /// The kubeconfig context used (`in-cluster` for the service account).
    pub context: String,
    /// Where the configuration came from (`--kubeconfig a.yaml`, `KUBECONFIG=a:b`, ...).
    pub source: String,
}

impl ClusterTarget {
    /// `https://10.0.0.1:6443 (context prod, from KUBECONFIG=a:b)`.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} (context {}, from {})",
            self.server, self.context, self.source
        )
    }
}

/// Read and merge the kubeconfig files of `$KUBECONFIG` (its raw value) as kubectl does;
/// `Ok(None)` when the value names no file. A file that exists but does not parse is an error
/// naming it.
pub(crate) fn merged_kubeconfig(value: &OsStr) -> Result<Option<Kubeconfig>, CliError> {
    let paths: Vec<PathBuf> = std::env::split_paths(value)
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    let mut merged: Option<Kubeconfig> = None;
    for path in &paths {
        if !path.exists() {
            tracing::info!(path = %path.display(), "KUBECONFIG names a missing file; skipped");
            continue;
        }
        let next = read(path)?;
        merged = Some(match merged {
            None => next,
            Some(m) => m.merge(next).map_err(|e| {
                CliError::Failed(format!("merging kubeconfig {}: {e}", path.display()))
            })?,
        });
    }
    Ok(merged)
}

fn read(path: &Path) -> Result<Kubeconfig, CliError> {
    Kubeconfig::read_from(path)
        .map_err(|e| CliError::Failed(format!("reading kubeconfig {}: {e}", path.display())))
}

/// The kubeconfig the flags and environment select, with a description of where it came from;
/// `None` when there is none (the caller then tries the in-cluster configuration).
pub(crate) fn select_kubeconfig(
    explicit: Option<&Path>,
    env: Option<&OsStr>,
    home_config: Option<PathBuf>,
) -> Result<Option<(Kubeconfig, String)>, CliError> {
    if let Some(path) = explicit {
        return Ok(Some((
            read(path)?,
            format!("--kubeconfig {}", path.display()),
        )));
    }
    if let Some(value) = env.filter(|v| !v.is_empty()) {
        if let Some(kc) = merged_kubeconfig(value)? {
            return Ok(Some((
                kc,
                format!("KUBECONFIG={}", value.to_string_lossy()),
            )));
        }
        return Err(CliError::Failed(format!(
            "KUBECONFIG={} names no existing kubeconfig file",
            value.to_string_lossy()
        )));
    }
    match home_config.filter(|p| p.exists()) {
        Some(path) => {
            let source = path.display().to_string();
            Ok(Some((read(&path)?, source)))
        }
        None => Ok(None),
    }
}

fn home_kubeconfig() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .or_else(|| std::env::var_os("USERPROFILE"))
        .map(|h| PathBuf::from(h).join(".kube").join("config"))
}

/// The User-Agent this tool sends for `command` (`run-controller`, `inspect`, …): client-go's
/// shape, `NAME/VERSION (OS/ARCH) COMMAND`, unless `--user-agent` overrides it. kube sends
/// none by default, so an audit log could not tell this tool from any other client.
pub(crate) fn user_agent(global: &GlobalArgs, command: &str) -> String {
    global.user_agent.clone().unwrap_or_else(|| {
        format!(
            "virtctl-rs/{} ({}/{}) {command}",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH
        )
    })
}

/// Add `User-Agent: agent` to `config`; an agent that is not a valid header value is a usage
/// error naming the flag.
pub(crate) fn with_user_agent(
    mut config: kube::Config,
    agent: &str,
) -> Result<kube::Config, CliError> {
    let value = axum::http::HeaderValue::from_str(agent)
        .map_err(|e| CliError::Usage(format!("--user-agent {agent:?}: {e}")))?;
    config
        .headers
        .retain(|(name, _)| name != axum::http::header::USER_AGENT);
    config.headers.push((axum::http::header::USER_AGENT, value));
    Ok(config)
}

/// A client for the selected kubeconfig (see the module docs) with `--context` applied, and the
/// cluster it talks to, sending [`user_agent`] for `command`. Errors say which file or context
/// failed.
pub(crate) async fn connect(
    global: &GlobalArgs,
    command: &str,
) -> Result<(kube::Client, ClusterTarget), CliError> {
    let (config, target) = load_config(global, command).await?;
    let client = kube::Client::try_from(config)
        .map_err(|e| CliError::Failed(format!("cannot build a Kubernetes client: {e}")))?;
    Ok((client, target))
}

/// The client configuration [`connect`] builds its client from (User-Agent set), and the
/// cluster it points at.
pub(crate) async fn load_config(
    global: &GlobalArgs,
    command: &str,
) -> Result<(kube::Config, ClusterTarget), CliError> {
    let options = KubeConfigOptions {
        context: global.context.clone(),
        ..Default::default()
    };
    let env = std::env::var_os("KUBECONFIG");
    let selected = select_kubeconfig(
        global.kubeconfig.as_deref(),
        env.as_deref(),
        home_kubeconfig(),
    )?;
    let (config, context, source) = match selected {
        Some((kubeconfig, source)) => {
            let context = global
                .context
                .clone()
                .or_else(|| kubeconfig.current_context.clone())
                .unwrap_or_else(|| "(none)".into());
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| CliError::Failed(format!("kubeconfig {source}: {e}")))?;
            (config, context, source)
        }
        None => {
            let config = kube::Config::incluster().map_err(|e| {
                let no_cluster = if command == "run-controller" {
                    "or add --embedded to run on the embedded simulated cluster"
                } else {
                    "or start the embedded cluster with `run-controller --embedded` (or `demo`) \
                     and point --kubeconfig at the kubeconfig it prints"
                };
                CliError::Failed(format!(
                    "no cluster configuration found (no --kubeconfig, $KUBECONFIG or ~/.kube/config, and not in a pod: {e}); \
                     pass --kubeconfig, {no_cluster}"
                ))
            })?;
            (
                config,
                "in-cluster".to_string(),
                "the pod's service account".to_string(),
            )
        }
    };
    let target = ClusterTarget {
        server: config.cluster_url.to_string(),
        context,
        source,
    };
    let config = with_user_agent(config, &user_agent(global, command))?;
    let config = with_impersonation(config, global)?;
    Ok((config, target))
}

/// Apply `--as` / `--as-group` as kubectl does (Impersonate-User / Impersonate-Group headers);
/// groups without a user are a usage error, as in kubectl.
fn with_impersonation(
    mut config: kube::Config,
    global: &GlobalArgs,
) -> Result<kube::Config, CliError> {
    if global.as_user.is_none() && !global.as_group.is_empty() {
        return Err(CliError::Usage(
            "--as-group needs --as (a user to impersonate)".into(),
        ));
    }
    if let Some(user) = &global.as_user {
        config.auth_info.impersonate = Some(user.clone());
        if !global.as_group.is_empty() {
            config.auth_info.impersonate_groups = Some(global.as_group.clone());
        }
    }
    Ok(config)
}

/// [`connect`] without the description.
pub(crate) async fn client_from_flags(
    global: &GlobalArgs,
    command: &str,
) -> Result<kube::Client, CliError> {
    connect(global, command).await.map(|(client, _)| client)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn global_for(kubeconfig: &Path, agent: Option<&str>) -> GlobalArgs {
        GlobalArgs {
            kubeconfig: Some(kubeconfig.to_path_buf()),
            context: None,
            namespace: None,
            verbose: 0,
            log_format: crate::cli::LogFormat::Text,
            user_agent: agent.map(str::to_string),
            as_user: None,
            as_group: Vec::new(),
        }
    }

    #[tokio::test]
    async fn as_and_as_group_impersonate_as_kubectl_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            kubeconfig(Some("a"), &[("shared", "https://127.0.0.1:1")], &["a"]),
        )
        .expect("write kubeconfig");
        let mut global = global_for(&path, None);
        let (config, _) = load_config(&global, "inspect").await.expect("config");
        assert_eq!(config.auth_info.impersonate, None);

        global.as_user = Some("system:serviceaccount:virtctl-rs:controller".into());
        global.as_group = vec!["ops".into(), "audit".into()];
        let (config, _) = load_config(&global, "inspect").await.expect("config");
        assert_eq!(
            config.auth_info.impersonate.as_deref(),
            Some("system:serviceaccount:virtctl-rs:controller")
        );
        assert_eq!(
            config.auth_info.impersonate_groups,
            Some(vec!["ops".to_string(), "audit".to_string()])
        );

        global.as_user = None;
        match load_config(&global, "inspect").await {
            Err(CliError::Usage(m)) => assert!(m.contains("--as-group needs --as"), "{m}"),
            other => panic!("expected a usage error, got {:?}", other.map(|_| ())),
        }
    }

    #[tokio::test]
    async fn requests_carry_a_user_agent_naming_the_tool_and_command_or_the_override() {
        use k8s_openapi::api::core::v1::Namespace;
        let server = crate::sim::ApiServer::start(crate::sim::ApiServerConfig::default())
            .await
            .expect("server");
        let path = server.kubeconfig_path().to_path_buf();
        for (flag, expected) in [
            (
                None,
                format!(
                    "virtctl-rs/{} ({}/{}) inspect",
                    env!("CARGO_PKG_VERSION"),
                    std::env::consts::OS,
                    std::env::consts::ARCH
                ),
            ),
            (Some("ops-team-audit/1"), "ops-team-audit/1".to_string()),
        ] {
            let client = client_from_flags(&global_for(&path, flag), "inspect")
                .await
                .expect("client");
            let api: kube::Api<Namespace> = kube::Api::all(client);
            api.list(&Default::default()).await.expect("list");
            let seen = server.audit().by_user_agent(&expected);
            assert!(
                seen.iter().any(|e| e.user_agent == expected),
                "no request with User-Agent {expected:?}: {:?}",
                server
                    .audit()
                    .entries()
                    .iter()
                    .map(|e| e.user_agent.clone())
                    .collect::<Vec<_>>()
            );
        }
        let bad = global_for(&path, Some("bad\nagent"));
        match connect(&bad, "inspect").await {
            Err(CliError::Usage(m)) => assert!(m.contains("--user-agent"), "{m}"),
            other => panic!("expected a usage error, got {:?}", other.map(|_| ())),
        }
    }

    fn kubeconfig(current: Option<&str>, clusters: &[(&str, &str)], contexts: &[&str]) -> String {
        let mut s = String::from("apiVersion: v1\nkind: Config\n");
        if let Some(c) = current {
            s.push_str(&format!("current-context: {c}\n"));
        }
        s.push_str("clusters:\n");
        for (name, server) in clusters {
            s.push_str(&format!(
                "- name: {name}\n  cluster:\n    server: {server}\n"
            ));
        }
        s.push_str("contexts:\n");
        for c in contexts {
            s.push_str(&format!(
                "- name: {c}\n  context:\n    cluster: shared\n    user: u\n"
            ));
        }
        s.push_str("users:\n- name: u\n  user:\n    token: t\n");
        s
    }

    #[test]
    fn kubeconfig_paths_merge_like_kubectl() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        // a sets no current-context; b does, and redefines `shared` (a's wins).
        std::fs::write(
            &a,
            kubeconfig(None, &[("shared", "https://a:6443")], &["ctx-a"]),
        )
        .unwrap();
        std::fs::write(
            &b,
            kubeconfig(
                Some("ctx-b"),
                &[("shared", "https://b:6443"), ("only-b", "https://ob:6443")],
                &["ctx-b", "ctx-a"],
            ),
        )
        .unwrap();
        let missing = dir.path().join("missing");
        let value =
            std::env::join_paths([a.as_path(), missing.as_path(), Path::new(""), b.as_path()])
                .unwrap();
        let kc = merged_kubeconfig(&value).unwrap().expect("two files");
        assert_eq!(kc.current_context.as_deref(), Some("ctx-b"));
        let servers: Vec<(String, Option<String>)> = kc
            .clusters
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    c.cluster.as_ref().and_then(|c| c.server.clone()),
                )
            })
            .collect();
        assert_eq!(
            servers,
            vec![
                ("shared".into(), Some("https://a:6443".into())),
                ("only-b".into(), Some("https://ob:6443".into())),
            ]
        );
        assert_eq!(kc.contexts.len(), 2, "ctx-a once, ctx-b");
        // The first file to set current-context wins.
        let c = dir.path().join("c");
        std::fs::write(&c, kubeconfig(Some("ctx-c"), &[], &[])).unwrap();
        let value = std::env::join_paths([c.as_path(), b.as_path()]).unwrap();
        let kc = merged_kubeconfig(&value).unwrap().unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("ctx-c"));
    }

    #[test]
    fn kubeconfig_selection_order_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(
            &a,
            kubeconfig(Some("ctx-a"), &[("shared", "https://a:6443")], &["ctx-a"]),
        )
        .unwrap();
        let broken = dir.path().join("broken");
        std::fs::write(&broken, "clusters: [[[").unwrap();
        let home = dir.path().join("home-config");
        // --kubeconfig beats KUBECONFIG.
        let (_, source) = select_kubeconfig(Some(&a), Some(broken.as_os_str()), None)
            .unwrap()
            .unwrap();
        assert_eq!(source, format!("--kubeconfig {}", a.display()));
        // A broken file in KUBECONFIG is an error naming it.
        let err = select_kubeconfig(None, Some(broken.as_os_str()), None).unwrap_err();
        assert!(err.to_string().contains("broken"), "{err}");
        // KUBECONFIG naming only missing files is an error, not a silent fallback.
        let err = select_kubeconfig(None, Some(home.as_os_str()), None).unwrap_err();
        assert!(
            err.to_string().contains("names no existing kubeconfig"),
            "{err}"
        );
        // Unset (or empty) KUBECONFIG: ~/.kube/config, then nothing (in-cluster).
        assert!(
            select_kubeconfig(None, Some(OsStr::new("")), Some(home.clone()))
                .unwrap()
                .is_none()
        );
        std::fs::copy(&a, &home).unwrap();
        let (kc, source) = select_kubeconfig(None, None, Some(home.clone()))
            .unwrap()
            .unwrap();
        assert_eq!(source, home.display().to_string());
        assert_eq!(kc.current_context.as_deref(), Some("ctx-a"));
    }
}
