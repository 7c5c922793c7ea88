//! The generated kubeconfig: one cluster (`server: http://127.0.0.1:PORT`), one user with a
//! random bearer token, one context with namespace `default`. Written with mode 0600.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Name used for the cluster, user and context entries.
pub(crate) const CONTEXT_NAME: &str = "virtctl-sim";

/// Render the kubeconfig YAML.
pub(crate) fn render(url: &str, token: &str) -> String {
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT_NAME, "cluster": {"server": url}}],
        "users": [{"name": CONTEXT_NAME, "user": {"token": token}}],
        "contexts": [{"name": CONTEXT_NAME, "context": {"cluster": CONTEXT_NAME, "user": CONTEXT_NAME, "namespace": "default"}}],
        "current-context": CONTEXT_NAME,
        "preferences": {}
    });
    serde_yaml::to_string(&doc).unwrap_or_default()
}

/// Write `contents` to `path` with mode 0600 (replacing any existing file).
///
/// # Errors
/// I/O errors creating or writing the file.
pub(crate) fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    if path.exists() {
        std::fs::remove_file(path)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(contents.as_bytes())?;
    f.flush()
}

/// Create a fresh private (0700) directory under the system temp dir.
///
/// # Errors
/// I/O errors creating the directory.
pub(crate) fn private_temp_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("virtctl-sim-{}", uuid::Uuid::new_v4()));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// A random bearer token (two UUIDv4s, hex).
pub(crate) fn random_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn kubeconfig_parses_and_is_private() {
        let dir = private_temp_dir().unwrap();
        let p = dir.join("kubeconfig");
        write_private(&p, &render("http://127.0.0.1:1", "tok")).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let kc: kube::config::Kubeconfig =
            serde_yaml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some(CONTEXT_NAME));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
