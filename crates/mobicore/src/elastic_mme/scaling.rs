//! The EPS controller's shell in the front end (issue 13 item 5, seed 004
//! 5.2 "Scaling"): the operator's requests (a small HTTP API on
//! `--admin`) and the processes of the hosts the front end starts. What
//! to do is decided elsewhere: by the operator, or by
//! [`mobicore_elastic::controller::EpsController`] on the hosts' load
//! reports; how a drain runs is the router's and the front end's.
//!
//! # Operator API (HTTP/1.0, JSON; loopback: it is not protected)
//! - `GET /v1/hosts`: the hosts and their state;
//! - `POST /v1/hosts`: start a host (its number: one never used here);
//! - `POST /v1/hosts/<n>/drain`: drain host `n`, then stop it.

use mobicore_elastic::HostId;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

/// How long a drained host's process may take to exit after the front
/// end told it to before it is killed.
const EXIT_WITHIN: Duration = Duration::from_secs(10);

/// An operator's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Hosts,
    StartHost,
    Drain(HostId),
}

/// A request and where its answer goes: an HTTP status and a JSON body.
pub struct Request {
    pub command: Command,
    pub reply: oneshot::Sender<(u16, String)>,
}

/// The request line's method and path as a [`Command`].
pub fn parse(method: &str, path: &str) -> Result<Command, (u16, &'static str)> {
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        ("GET", ["", "v1", "hosts"]) => Ok(Command::Hosts),
        ("POST", ["", "v1", "hosts"]) => Ok(Command::StartHost),
        ("POST", ["", "v1", "hosts", n, "drain"]) => match n.parse::<u8>() {
            Ok(n @ 1..=254) => Ok(Command::Drain(HostId(u32::from(n)))),
            _ => Err((404, "no such host number (1..=254)")),
        },
        (_, ["", "v1", "hosts", ..]) => Err((405, "GET /v1/hosts, POST /v1/hosts, POST /v1/hosts/<n>/drain")),
        _ => Err((404, "not found")),
    }
}

/// A JSON error body.
pub fn error(message: &str) -> String {
    serde_json::json!({ "error": message }).to_string()
}

/// Serve the operator API on `listener`, handing requests to `requests`.
pub async fn serve_admin(listener: TcpListener, requests: mpsc::Sender<Request>) {
    while let Ok((mut conn, _)) = listener.accept().await {
        let requests = requests.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 2048];
            let mut n = 0;
            // The request head only (no request here has a body).
            while n < buf.len() && !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                match tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf[n..])).await {
                    Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                    Ok(Ok(k)) => n += k,
                }
            }
            let head = String::from_utf8_lossy(&buf[..n]);
            let mut words = head.split_whitespace();
            let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            let (status, body) = match parse(method, path) {
                Ok(command) => {
                    let (reply, answer) = oneshot::channel();
                    match requests.send(Request { command, reply }).await {
                        Ok(()) => answer.await.unwrap_or((503, error("the front end is stopping"))),
                        Err(_) => (503, error("the front end is stopping")),
                    }
                }
                Err((status, message)) => (status, error(message)),
            };
            let reason = match status {
                200 => "OK",
                202 => "Accepted",
                404 => "Not Found",
                405 => "Method Not Allowed",
                409 => "Conflict",
                _ => "Service Unavailable",
            };
            let head = format!(
                "HTTP/1.0 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(body.as_bytes()).await;
        });
    }
}

/// Starts `mobicore mme-host` processes for the front end: `--id`,
/// `--frontend` and `--frontend-s11` from here, the rest (`args`: config,
/// store, replication...) as the operator gave them.
pub struct Launcher {
    exe: PathBuf,
    args: Vec<String>,
    hosts: super::link::LinkAddr,
    s11: SocketAddr,
    /// The running processes this front end started, by host: what tells
    /// a drained one's reaper that it was told to exit.
    running: HashMap<HostId, oneshot::Sender<()>>,
    /// The pids of those not reaped yet (drained ones too): killed,
    /// reaped and their cgroups removed if the front end goes first.
    live: Arc<Mutex<HashSet<u32>>>,
}

impl Drop for Launcher {
    /// The front end is going (stopped, Ctrl-C, SIGTERM): the hosts it
    /// started go with it, and leave no cgroup behind.
    fn drop(&mut self) {
        let live = std::mem::take(&mut *self.live.lock().unwrap_or_else(|e| e.into_inner()));
        for pid in live {
            // Its own child: killed, then reaped here (the runtime that
            // would reap it is going), which empties its cgroup.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
                libc::waitpid(pid as i32, std::ptr::null_mut(), 0);
            }
            super::cgroup::remove_leftovers(pid);
        }
    }
}

impl Launcher {
    pub fn new(exe: PathBuf, args: Vec<String>, hosts: super::link::LinkAddr, s11: SocketAddr) -> Launcher {
        Launcher { exe, args, hosts, s11, running: HashMap::new(), live: Arc::default() }
    }

    /// Start host `id`; its process id. Its output goes to the front end's;
    /// it is reaped when it exits, and killed if the front end goes.
    pub fn start(&mut self, id: HostId) -> std::io::Result<u32> {
        let mut child = tokio::process::Command::new(&self.exe)
            .arg("mme-host")
            .args(["--id", &id.0.to_string(), "--frontend", &self.hosts.to_string()])
            .args(["--frontend-s11", &self.s11.to_string()])
            .args(&self.args)
            .stdin(std::process::Stdio::null())
            .spawn()?;
        let pid = child.id().unwrap_or(0);
        let (stopping, stopped) = oneshot::channel::<()>();
        self.running.insert(id, stopping);
        self.live.lock().unwrap_or_else(|e| e.into_inner()).insert(pid);
        let live = self.live.clone();
        tokio::spawn(async move {
            let status = tokio::select! {
                s = child.wait() => s,
                Ok(()) = stopped => match tokio::time::timeout(EXIT_WITHIN, child.wait()).await {
                    Ok(s) => s,
                    Err(_) => {
                        println!("mme-frontend: {id} (pid {pid}) did not exit: killed");
                        let _ = child.kill().await;
                        child.wait().await
                    }
                },
            };
            live.lock().unwrap_or_else(|e| e.into_inner()).remove(&pid);
            // Killed (or dead), a host with --cpu-max leaves its cgroup.
            super::cgroup::remove_leftovers(pid);
            let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
            println!("mme-frontend: {id} process {pid} exited ({status})");
        });
        Ok(pid)
    }

    /// Host `id` was told to exit: killed if it has not within a bound.
    pub fn stopping(&mut self, id: HostId) {
        if let Some(s) = self.running.remove(&id) {
            let _ = s.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_requests_parse() {
        assert_eq!(parse("GET", "/v1/hosts"), Ok(Command::Hosts));
        assert_eq!(parse("POST", "/v1/hosts/"), Ok(Command::StartHost));
        assert_eq!(parse("POST", "/v1/hosts/7/drain"), Ok(Command::Drain(HostId(7))));
        assert_eq!(parse("POST", "/v1/hosts/0/drain").unwrap_err().0, 404);
        assert_eq!(parse("POST", "/v1/hosts/255/drain").unwrap_err().0, 404);
        assert_eq!(parse("DELETE", "/v1/hosts").unwrap_err().0, 405);
        assert_eq!(parse("GET", "/metrics").unwrap_err().0, 404);
        assert_eq!(parse("", "").unwrap_err().0, 404);
    }
}
