//! External tools the tests and `mobicore demo --pcap` run (tshark,
//! text2pcap), and the one rule for a check that needs one: where the
//! check can run, it must run.
//!
//! As root (CI and the development machines, where tshark is installed and
//! may capture) a tool that is missing, does not start or fails makes the
//! test fail: a check that silently skips there proves nothing. Without
//! root (no capture, no namespaces, no raw sockets) the check is skipped
//! with a printed note.

use std::io;
use std::process::{Command, ExitStatus, Output, Stdio};

/// Whether this process runs as root (effective UID 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether `tool --version` starts and exits successfully.
pub fn runs(tool: &str) -> bool {
    Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Why an external tool did not do its job.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("{tool} cannot start: {source}")]
    Start { tool: String, source: io::Error },
    #[error("{tool} failed ({status}): {stderr}")]
    Failed { tool: String, status: ExitStatus, stderr: String },
}

/// Runs `cmd` to completion and returns its output if it exited
/// successfully; a tool that cannot start or exits with an error is an
/// error carrying its stderr (never an empty output to check).
pub fn run(cmd: &mut Command) -> Result<Output, ToolError> {
    let tool = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd.output().map_err(|source| ToolError::Start { tool: tool.clone(), source })?;
    if !out.status.success() {
        return Err(ToolError::Failed {
            tool,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(out)
}

/// A check cannot have what it needs (a tool, a capture), for `why`. As
/// root this fails the test (panics); otherwise it prints a note and
/// returns, and the caller skips the check.
#[track_caller]
pub fn cannot_check(why: &str) {
    if is_root() {
        panic!("{why}: running as root, the check must run (install the tool, or fix what stops it)");
    }
    eprintln!("note: skipped, {why} (not root)");
}

/// For a test that needs `tools`: `true` when every one of them runs.
/// Otherwise see [`cannot_check`]: the test fails as root, and gets
/// `false` (skip, with a note) without root.
#[track_caller]
pub fn require(tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !runs(t)).collect();
    if missing.is_empty() {
        return true;
    }
    cannot_check(&format!("{} cannot run", missing.join(", ")));
    false
}

/// A tshark capture on lo for a test that checks what went on the wire:
/// the one implementation every crate's capture tests use.
pub struct LoCapture {
    child: std::process::Child,
    /// The pcapng file it writes.
    pub file: std::path::PathBuf,
}

impl LoCapture {
    /// Captures `filter` (a capture filter) on lo into a temp file named by
    /// `tag`, and returns once tshark says "Capture started". `None` where
    /// tshark cannot run (as root the test fails instead, [`cannot_check`]).
    #[track_caller]
    pub fn start(tag: &str, filter: &str) -> Option<LoCapture> {
        if !require(&["tshark"]) {
            return None;
        }
        let file = std::env::temp_dir().join(format!("mobicore-{tag}-{}.pcapng", std::process::id()));
        let _ = std::fs::remove_file(&file);
        let spawned = Command::new("tshark")
            .args(["-i", "lo", "-f", filter, "-w"])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                cannot_check(&format!("tshark cannot start ({e})"));
                return None;
            }
        };
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            // "Capturing on" comes before dumpcap runs; wait for the start.
            for line in io::BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("Capture started") {
                    let _ = tx.send(true);
                }
            }
            let _ = tx.send(false);
        });
        if matches!(rx.recv_timeout(std::time::Duration::from_secs(20)), Ok(true)) {
            return Some(LoCapture { child, file });
        }
        let _ = child.kill();
        let _ = child.wait();
        cannot_check("tshark could not capture on lo");
        None
    }

    /// Waits (20 s at most) until the file holds a packet: tshark reports
    /// the start a moment before packets reach the file. Traffic matching
    /// the filter must be flowing (heartbeats, a probe).
    pub fn wait_for_packets(&self) {
        let size = || std::fs::metadata(&self.file).map(|m| m.len()).unwrap_or(0);
        let header = size();
        for _ in 0..400 {
            if size() > header.max(1) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("tshark wrote no packet in 20 s");
    }

    /// Gives packets already sent a moment to reach the file, stops tshark
    /// with SIGINT (it flushes the file) and returns the file.
    pub fn stop(mut self) -> std::path::PathBuf {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
        std::mem::take(&mut self.file)
    }
}

impl LoCapture {
    /// Stops the capture and checks the packets `display_filter` selects:
    /// each of `expected` appears in the dissection, nothing is malformed
    /// and tshark reports no expert error. Returns the dissection.
    pub fn check(self, display_filter: &str, expected: &[&str]) -> String {
        let file = self.stop();
        let verbose =
            run(Command::new("tshark").args(["-r"]).arg(&file).args(["-Y", display_filter, "-V"])).expect("tshark -r");
        let text = String::from_utf8_lossy(&verbose.stdout).into_owned();
        for e in expected {
            let summary: Vec<&str> =
                text.lines().filter(|l| l.starts_with("Frame ") || l.contains("Message Type")).collect();
            assert!(text.contains(e), "capture has {e:?}; it has:\n{}", summary.join("\n"));
        }
        assert!(!text.contains("Malformed"), "tshark found a malformed packet:\n{text}");
        let expert = run(Command::new("tshark").args(["-r"]).arg(&file).args([
            "-q",
            "-z",
            &format!("expert,error,{display_filter}"),
        ]))
        .expect("tshark expert");
        let e = String::from_utf8_lossy(&expert.stdout);
        assert!(!e.lines().any(|l| l.trim_start().starts_with("Error")), "tshark expert errors:\n{e}");
        let _ = std::fs::remove_file(&file);
        text
    }
}

impl Drop for LoCapture {
    /// A test that panics before `stop` leaves no tshark behind.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_SUCH_TOOL: &str = "mobicore-no-such-tool";

    #[test]
    fn a_missing_tool_fails_as_root_and_skips_otherwise() {
        let r = std::panic::catch_unwind(|| require(&[NO_SUCH_TOOL]));
        if is_root() {
            let e = r.expect_err("as root a missing tool fails the test");
            let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(msg.contains(NO_SUCH_TOOL), "{msg}");
        } else {
            assert!(!r.expect("without root a missing tool skips"));
        }
        assert!(!runs(NO_SUCH_TOOL));
    }

    #[test]
    fn run_returns_output_only_on_success() {
        let out = run(Command::new("sh").args(["-c", "echo out; echo err >&2"])).unwrap();
        assert_eq!(out.stdout, b"out\n");
        match run(Command::new("sh").args(["-c", "echo why >&2; exit 3"])) {
            Err(ToolError::Failed { tool, status, stderr }) => {
                assert_eq!((tool.as_str(), status.code(), stderr.as_str()), ("sh", Some(3), "why\n"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(run(&mut Command::new(NO_SUCH_TOOL)), Err(ToolError::Start { .. })));
    }
}
