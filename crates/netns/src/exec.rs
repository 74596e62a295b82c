//! Run code or commands inside a named network namespace
//! (`/run/netns/<name>`, as `ip netns add` creates them).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::{Command, Output};
use std::thread::JoinHandle;

use crate::NetnsError;

/// Move the calling thread into namespace `ns`. Only for threads that this
/// crate spawned: the thread never leaves again.
fn enter(ns: &str) -> Result<(), NetnsError> {
    let path = format!("/run/netns/{ns}");
    let file = File::open(&path).map_err(|source| NetnsError::Enter { ns: ns.into(), source })?;
    // SAFETY: a valid open fd of a network namespace file; setns only
    // changes the calling thread's namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        let source = std::io::Error::last_os_error();
        if source.raw_os_error() == Some(libc::EPERM) {
            return Err(NetnsError::NotRoot);
        }
        return Err(NetnsError::Enter { ns: ns.into(), source });
    }
    Ok(())
}

/// Run `f` on a fresh thread inside namespace `ns` and return its result.
/// Sockets and TUN devices that `f` opens stay in `ns` for their lifetime,
/// whichever thread uses them afterwards.
pub fn run_in<T, F>(ns: &str, f: F) -> Result<T, NetnsError>
where
    T: Send,
    F: FnOnce() -> T + Send,
{
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            enter(ns)?;
            Ok(f())
        });
        h.join().map_err(|_| NetnsError::Panicked(ns.into()))?
    })
}

/// Spawn a long-lived thread inside namespace `ns` (servers of the
/// traffic driver). The handle yields `Err` if the namespace can't be
/// entered.
pub fn spawn_in<T, F>(ns: &str, name: &str, f: F) -> std::io::Result<JoinHandle<Result<T, NetnsError>>>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let ns = ns.to_string();
    std::thread::Builder::new().name(name.into()).spawn(move || {
        enter(&ns)?;
        Ok(f())
    })
}

fn checked(mut cmd: Command) -> Result<Output, NetnsError> {
    let text = format!("{cmd:?}").replace('"', "");
    let out = cmd.output().map_err(|e| NetnsError::Command {
        cmd: text.clone(),
        status: "not started".into(),
        stderr: e.to_string(),
    })?;
    if out.status.success() {
        return Ok(out);
    }
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if stderr.contains("Operation not permitted") {
        return Err(NetnsError::NotRoot);
    }
    Err(NetnsError::Command { cmd: text, status: out.status.to_string(), stderr })
}

/// `ip <args>` in the current namespace; an error carries its stderr.
pub fn ip(args: &[&str]) -> Result<Output, NetnsError> {
    let mut cmd = Command::new("ip");
    cmd.args(args);
    checked(cmd)
}

/// Run a command inside `ns` (`ip netns exec`) and wait for it; a non-zero
/// exit is an error carrying stderr.
pub fn exec_in(ns: &str, cmd: &[&str]) -> Result<Output, NetnsError> {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(cmd);
    checked(c)
}

/// Many `ip` commands in one process (`ip -n <ns> -batch -`), one per line
/// of `lines` (e.g. `addr add 10.45.0.2/32 dev ue0`).
pub fn ip_batch(ns: &str, lines: &[String]) -> Result<(), NetnsError> {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new("ip")
        .args(["-n", ns, "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let text = lines.join("\n") + "\n";
    let write = stdin.write_all(text.as_bytes());
    drop(stdin);
    let out = child.wait_with_output()?;
    write?;
    if !out.status.success() {
        return Err(NetnsError::Command {
            cmd: format!("ip -n {ns} -batch - ({} lines)", lines.len()),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}
