//! README.md as a newcomer's path (issue 16): every command block marked for it is run from the
//! repository, the way a new user would type it, with the binary this build made.
//!
//! Markers, each on the line before a ```sh block:
//! - `<!-- readme-test -->`: run each command; it must exit 0 and print something.
//! - `<!-- readme-test: main-job -->`: the one long-running command (the main job). It is
//!   started, its output read until the embedded cluster's kubeconfig is printed and every VM
//!   it applied is Running, then the `with-main-job` blocks run against it, then it is stopped
//!   with SIGINT and must exit 0 (the Lease released).
//! - `<!-- readme-test: with-main-job -->`: run while the main job runs; `export KUBECONFIG=…`
//!   lines stand for "the path the main job printed".
//!
//! `cargo run -- ARGS` and `kubectl virtctl-rs ARGS` both stand for the built binary. Commands
//! run under `bash -o pipefail`, so `… | head -c 200` also checks that a closed pipe ends the
//! command with exit 0.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_kubectl-virtctl_rs");

#[derive(Debug, Clone, PartialEq)]
struct Block {
    tag: String,
    /// Line number (1-based) of the marker, for messages.
    line: usize,
    commands: Vec<String>,
}

/// The marked blocks of a README, in order.
fn marked_blocks(readme: &str) -> Result<Vec<Block>, String> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim();
        if let Some(rest) = l.strip_prefix("<!-- readme-test") {
            let tag = rest
                .trim_end_matches("-->")
                .trim()
                .trim_start_matches(':')
                .trim()
                .to_string();
            let fence = lines.get(i + 1).map(|s| s.trim());
            if fence != Some("```sh") {
                return Err(format!(
                    "README.md:{}: a readme-test marker must be followed by a ```sh block",
                    i + 1
                ));
            }
            let mut commands = Vec::new();
            let mut j = i + 2;
            while j < lines.len() && lines[j].trim() != "```" {
                let c = lines[j].trim();
                if !c.is_empty() && !c.starts_with('#') {
                    commands.push(c.to_string());
                }
                j += 1;
            }
            if j == lines.len() {
                return Err(format!("README.md:{}: unterminated block", i + 1));
            }
            blocks.push(Block {
                tag,
                line: i + 1,
                commands,
            });
            i = j;
        }
        i += 1;
    }
    Ok(blocks)
}

/// The command with the plugin's spellings replaced by the built binary; `None` for a line that
/// is not one of ours (the test refuses those, so the README cannot show untested commands).
fn to_shell(command: &str) -> Option<String> {
    let quoted = format!("'{}'", BIN.replace('\'', r"'\''"));
    for prefix in ["cargo run -- ", "kubectl virtctl-rs "] {
        if let Some(rest) = command.strip_prefix(prefix) {
            // Drop a trailing comment.
            let rest = rest.split("  #").next().unwrap_or(rest).trim_end();
            return Some(format!("{quoted} {rest}"));
        }
    }
    None
}

/// How many VirtualMachines the command's `--apply` files and directories hold (top level of a
/// directory, as `--apply` reads it).
fn vms_applied_by(command: &str) -> usize {
    let words: Vec<&str> = command.split_whitespace().collect();
    let mut n = 0;
    for w in words.windows(2).filter(|w| w[0] == "--apply") {
        let p = repo().join(w[1]);
        let files: Vec<PathBuf> = if p.is_dir() {
            std::fs::read_dir(&p)
                .expect("--apply directory")
                .map(|e| e.unwrap().path())
                .filter(|f| f.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .collect()
        } else {
            vec![p]
        };
        for f in files {
            let text = std::fs::read_to_string(&f).expect("--apply file");
            n += text
                .lines()
                .filter(|l| l.trim_end() == "kind: VirtualMachine")
                .count();
        }
    }
    n
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Run one README command to completion; it must exit 0 and print something.
fn run_one(block: &Block, command: &str, kubeconfig: Option<&Path>) {
    let shell = to_shell(command).unwrap_or_else(|| {
        panic!(
            "README.md:{}: `{command}` is neither `cargo run -- …` nor `kubectl virtctl-rs …`",
            block.line
        )
    });
    let mut cmd = Command::new("bash");
    cmd.args(["-o", "pipefail", "-c", &shell])
        .current_dir(repo())
        .env_remove("KUBECONFIG");
    if let Some(k) = kubeconfig {
        cmd.env("KUBECONFIG", k);
    }
    let out = cmd.output().expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "README.md:{}: `{command}` failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        block.line,
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !stdout.trim().is_empty(),
        "README.md:{}: `{command}` printed nothing",
        block.line
    );
}

#[test]
fn the_marker_parser_finds_blocks_and_refuses_a_marker_without_a_block() {
    let text = "a\n<!-- readme-test: main-job -->\n```sh\n# c\ncargo run -- x\n\n```\n\
                <!-- readme-test -->\n```sh\nkubectl virtctl-rs y  # z\n```\n";
    let blocks = marked_blocks(text).unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].tag, "main-job");
    assert_eq!(blocks[0].commands, vec!["cargo run -- x"]);
    assert_eq!(blocks[1].tag, "");
    assert_eq!(blocks[1].line, 8);
    assert!(to_shell(&blocks[1].commands[0]).unwrap().ends_with(" y"));
    assert_eq!(to_shell("ls -l"), None);
    assert!(marked_blocks("<!-- readme-test -->\ntext\n").is_err());
    assert!(marked_blocks("<!-- readme-test -->\n```sh\nx\n").is_err());
}

#[test]
fn the_readme_command_blocks_run_from_the_repository() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let blocks = marked_blocks(&readme).unwrap_or_else(|e| panic!("{e}"));
    let main_jobs: Vec<&Block> = blocks.iter().filter(|b| b.tag == "main-job").collect();
    assert_eq!(main_jobs.len(), 1, "README.md has one main-job block");
    assert_eq!(
        main_jobs[0].commands.len(),
        1,
        "the main job is one command"
    );
    let with_main: Vec<&Block> = blocks.iter().filter(|b| b.tag == "with-main-job").collect();
    assert!(
        !with_main.is_empty(),
        "README.md shows the inspector against the main job"
    );
    let plain: Vec<&Block> = blocks.iter().filter(|b| b.tag.is_empty()).collect();
    for b in &blocks {
        assert!(
            ["", "main-job", "with-main-job"].contains(&b.tag.as_str()),
            "README.md:{}: unknown readme-test tag {:?}",
            b.line,
            b.tag
        );
    }

    for b in &plain {
        for c in &b.commands {
            run_one(b, c, None);
        }
    }

    // The main job, as typed, plus a free port for its endpoints (other tests run beside it).
    let main = &main_jobs[0].commands[0];
    let shell = to_shell(main).expect("the main job is one of our commands");
    let mut child = Command::new("bash")
        .args(["-c", &format!("exec {shell} --listen 127.0.0.1:0")])
        .current_dir(repo())
        .env_remove("KUBECONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the main job starts");
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut kubeconfig = None;
    let mut applied_vms = None;
    let mut running = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(p) = line.strip_prefix("kubeconfig: ") {
                    kubeconfig = Some(PathBuf::from(p.trim()));
                }
                if line.starts_with("applied ") {
                    applied_vms = Some(vms_applied_by(main));
                }
                let words: Vec<&str> = line.split_whitespace().collect();
                if words.len() >= 3 && words[2] == "Running" {
                    running.insert(words[1].to_string());
                }
                seen.push(line);
                if kubeconfig.is_some() && applied_vms.is_some_and(|n| running.len() >= n) {
                    break;
                }
            }
            Err(_) => {
                let _ = child.kill();
                let err = child
                    .stderr
                    .take()
                    .map(|mut e| {
                        let mut s = String::new();
                        let _ = std::io::Read::read_to_string(&mut e, &mut s);
                        s
                    })
                    .unwrap_or_default();
                panic!(
                    "the main job `{main}` did not bring its VMs to Running (running: {running:?}):\n{}\nstderr:\n{err}",
                    seen.join("\n")
                );
            }
        }
    }
    let kubeconfig = kubeconfig.unwrap();

    for b in &with_main {
        for c in &b.commands {
            if let Some(v) = c.strip_prefix("export KUBECONFIG=") {
                assert!(
                    v.contains("kubeconfig"),
                    "README.md:{}: the export names the printed kubeconfig",
                    b.line
                );
                continue;
            }
            run_one(b, c, Some(&kubeconfig));
        }
    }

    // Ctrl-C: the controllers stop, the Lease is released, exit 0.
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    let exit = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        // Drain output while waiting; a closed channel means stdout closed.
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => seen.push(line),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                if let Some(s) = child.wait_timeout_fallback(deadline) {
                    break s;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "the main job did not stop on SIGINT:\n{}",
            seen.join("\n")
        );
    };
    let _ = reader.join();
    seen.extend(rx.try_iter());
    assert!(
        exit.success(),
        "the main job exits 0 on Ctrl-C, got {exit}:\n{}",
        seen.join("\n")
    );
    assert!(
        seen.iter().any(|l| l.contains("SIGINT")),
        "it says why it stops:\n{}",
        seen.join("\n")
    );
}

/// `Child::wait` bounded by a deadline (std has no wait with a timeout).
trait WaitTimeout {
    fn wait_timeout_fallback(&mut self, deadline: Instant) -> Option<std::process::ExitStatus>;
}

impl WaitTimeout for std::process::Child {
    fn wait_timeout_fallback(&mut self, deadline: Instant) -> Option<std::process::ExitStatus> {
        while Instant::now() < deadline {
            if let Some(s) = self.try_wait().ok().flatten() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}
