//! Child processes of a bench or a system test (`mobicore mme-frontend`,
//! `mme-host`, `mme`, ...): each started with its stdout and stderr read
//! line by line into a channel, all SIGKILLed and reaped when the
//! [`Procs`] is dropped, so an error, a panic or an interrupted run
//! ([`interrupted`]: Ctrl-C or SIGTERM) leaves none behind (nor a killed
//! host's cgroup).

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Child processes by name, killed (SIGKILL) and reaped on drop.
pub struct Procs {
    program: PathBuf,
    /// Print every line as `[name] line` on stderr.
    echo: bool,
    children: Vec<(String, Child)>,
}

impl Procs {
    /// Processes of `program` (e.g. the `mobicore` binary); `echo` prints
    /// their output.
    pub fn new(program: impl Into<PathBuf>, echo: bool) -> Procs {
        Procs { program: program.into(), echo, children: Vec::new() }
    }

    /// Start `program args...` as `name`; its stdout and stderr lines go
    /// to the returned channel.
    pub fn start(&mut self, name: &str, args: &[&str]) -> std::io::Result<mpsc::Receiver<String>> {
        let mut child = Command::new(&self.program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let (tx, rx) = mpsc::channel();
        let out: Box<dyn Read + Send> = Box::new(child.stdout.take().expect("piped"));
        let err: Box<dyn Read + Send> = Box::new(child.stderr.take().expect("piped"));
        for stream in [out, err] {
            let (tx, tag, echo) = (tx.clone(), name.to_string(), self.echo);
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    if echo {
                        eprintln!("[{tag}] {line}");
                    }
                    // Read to the end even if nobody listens: the process's
                    // later lines must not find its pipe closed.
                    let _ = tx.send(line);
                }
            });
        }
        self.children.push((name.to_string(), child));
        Ok(rx)
    }

    /// The process id of `name`, if it runs.
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.children.iter().find(|(n, _)| n == name).map(|(_, c)| c.id())
    }

    /// Every running child's name and process id, in start order.
    pub fn pids(&self) -> impl Iterator<Item = (&str, u32)> + '_ {
        self.children.iter().map(|(n, c)| (n.as_str(), c.id()))
    }

    /// SIGKILL `name` and reap it.
    pub fn kill(&mut self, name: &str) -> std::io::Result<ExitStatus> {
        let i = self.position(name)?;
        let (_, mut child) = self.children.remove(i);
        child.kill()?;
        let status = child.wait();
        crate::elastic_mme::cgroup::remove_leftovers(child.id());
        status
    }

    /// `name`'s exit status if it has exited by itself (then reaped and
    /// forgotten).
    pub fn try_wait(&mut self, name: &str) -> std::io::Result<Option<ExitStatus>> {
        let i = self.position(name)?;
        let status = self.children[i].1.try_wait()?;
        if status.is_some() {
            self.children.remove(i);
        }
        Ok(status)
    }

    fn position(&self, name: &str) -> std::io::Result<usize> {
        self.children
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("no process {name}")))
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
            // A killed `mme-host --cpu-max` leaves its cgroup behind.
            crate::elastic_mme::cgroup::remove_leftovers(child.id());
        }
    }
}

/// A temporary directory of this process, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `$TMPDIR/<prefix>-<pid>-<n>`, made anew.
    pub fn new(prefix: &str) -> std::io::Result<TempDir> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The first line from `rx` for which `pick` gives something, within
/// `limit` (blocking this thread).
pub fn wait_line<T>(
    rx: &mpsc::Receiver<String>,
    what: &str,
    limit: Duration,
    mut pick: impl FnMut(&str) -> Option<T>,
) -> Result<T, String> {
    let end = Instant::now() + limit;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if let Some(v) = scan(rx, what, &mut pick, left, end)? {
            return Ok(v);
        }
    }
}

/// [`wait_line`] that lets the rest of its task (e.g. the RAN) run meanwhile.
pub async fn next_line<T>(
    rx: &mpsc::Receiver<String>,
    what: &str,
    limit: Duration,
    mut pick: impl FnMut(&str) -> Option<T>,
) -> Result<T, String> {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = scan(rx, what, &mut pick, Duration::ZERO, end)? {
            return Ok(v);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The lines waiting in `rx` (the first waited for up to `wait`) until
/// `pick` takes one; none taken yet, or an error once past `end`.
fn scan<T>(
    rx: &mpsc::Receiver<String>,
    what: &str,
    pick: &mut impl FnMut(&str) -> Option<T>,
    wait: Duration,
    end: Instant,
) -> Result<Option<T>, String> {
    let mut next = rx.recv_timeout(wait);
    loop {
        match next {
            Ok(line) => {
                if let Some(v) = pick(&line) {
                    return Ok(Some(v));
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < end => return Ok(None),
            Err(e) => return Err(format!("waiting for {what}: {e}")),
        }
        next = rx.recv_timeout(Duration::ZERO);
    }
}

/// The value of `key=` in a line of `key=value` words.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

/// SIGINT (Ctrl-C) or SIGTERM: how every mobicore process is asked to
/// stop. Whoever awaits it drops what runs, so that the [`Procs`] it holds
/// kill and reap their children (a bench stopped by `kill` leaves no host
/// process or cgroup behind).
pub async fn interrupted() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        },
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// A loopback port number free for TCP (the SCTP port reservation) and
/// UDP (SCTP over UDP) alike, below the kernel's ephemeral range
/// (`ip_local_port_range`, 32768 up by default): for a process that binds
/// it, is killed and binds it again. A port the kernel can hand out to any
/// connection could be taken in between; these are taken only by a bind
/// that names them. Each call in a process starts elsewhere.
pub fn spare_port() -> std::io::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static CALLS: AtomicU32 = AtomicU32::new(0);
    spare_port_from(std::process::id().wrapping_mul(7919).wrapping_add(CALLS.fetch_add(1, Ordering::Relaxed) * 97))
}

const SPARE_FIRST: u32 = 20_000;
const SPARE_SPAN: u32 = 12_000;

/// The first port free for TCP and UDP, searching from `start` (modulo
/// the span) upwards.
fn spare_port_from(start: u32) -> std::io::Result<u16> {
    use std::net::{Ipv4Addr, TcpListener, UdpSocket};
    (0..SPARE_SPAN)
        .map(|i| (SPARE_FIRST + (start.wrapping_add(i)) % SPARE_SPAN) as u16)
        .find(|&p| {
            TcpListener::bind((Ipv4Addr::LOCALHOST, p)).is_ok() && UdpSocket::bind((Ipv4Addr::LOCALHOST, p)).is_ok()
        })
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::AddrInUse, "no free loopback port in 20000-31999"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_of_a_ready_line() {
        let l = "mme-frontend ready: s1ap=127.0.0.1:36412 udp_port=4000 hosts=127.0.0.1:5000";
        assert_eq!(field(l, "udp_port"), Some("4000"));
        assert_eq!(field(l, "s1ap"), Some("127.0.0.1:36412"));
        assert_eq!(field(l, "s11"), None);
    }

    #[test]
    fn spare_ports_lie_below_the_ephemeral_range_differ_call_to_call_and_skip_a_bound_one() {
        let (a, b) = (spare_port().unwrap(), spare_port().unwrap());
        assert!((20_000..32_000).contains(&a) && (20_000..32_000).contains(&b), "{a} {b}");
        assert_ne!(a, b);
        // A port this test holds is never handed out, searching from it.
        // (Re-binding a returned port here would race every other process
        // on the machine: that it was free is only true when it was looked at.)
        let (held, _tcp) = (0..SPARE_SPAN)
            .find_map(|i| {
                let p = (SPARE_FIRST + i) as u16;
                std::net::TcpListener::bind(("127.0.0.1", p)).ok().map(|l| (p, l))
            })
            .unwrap();
        let got = spare_port_from(u32::from(held) - SPARE_FIRST).unwrap();
        assert_ne!(got, held);
        assert!((20_000..32_000).contains(&got), "{got}");
    }

    #[test]
    fn lines_of_both_streams_and_kill_on_drop() {
        let mut p = Procs::new("/bin/sh", false);
        let rx = p.start("sh", &["-c", "echo out; echo err >&2; exec sleep 60"]).unwrap();
        let limit = Duration::from_secs(30);
        let mut seen = Vec::new();
        for _ in 0..2 {
            seen.push(wait_line(&rx, "a line", limit, |l| Some(l.to_string())).unwrap());
        }
        seen.sort();
        assert_eq!(seen, ["err", "out"]);
        let pid = p.pid("sh").unwrap() as i32;
        drop(p);
        // Reaped: no such process any more.
        assert_eq!(unsafe { libc::kill(pid, 0) }, -1);
    }
}
