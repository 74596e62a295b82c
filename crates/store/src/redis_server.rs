//! A real `redis-server` for tests: started on a UNIX socket in a fresh
//! temporary directory, with no persistence (or an append-only file synced
//! at every write, [`RedisServer::start_persistent`]), and stopped (and its
//! directory removed) when dropped.
//!
//! To test failures, a server can be killed ([`RedisServer::kill`], SIGKILL)
//! and started again on the same socket ([`RedisServer::restart`]), or
//! frozen ([`RedisServer::pause`], SIGSTOP: connections stay open, nothing
//! is answered) and thawed ([`RedisServer::resume`]).
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let server = mobicore_store::redis_server::RedisServer::start()?;
//! let store = mobicore_store::Store::connect_redis(&server.url(), "test").await?;
//! # Ok(()) }
//! ```

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use std::{env, fs, thread};

/// How long a server may take to answer its first PING.
const READY_WITHIN: Duration = Duration::from_secs(10);

const INSTALL_HINT: &str = "install redis-server (apt-get install redis-server, or run scripts/bootstrap.sh)";

/// A running `redis-server`, stopped on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    binary: PathBuf,
    persistent: bool,
    dir: PathBuf,
    socket: PathBuf,
}

impl RedisServer {
    /// Starts a server that keeps nothing on disk, and waits until it
    /// answers PING.
    pub fn start() -> io::Result<RedisServer> {
        RedisServer::start_with(false)
    }

    /// Starts a server that appends every write to a file and syncs it
    /// before answering, so that what it answered survives
    /// [`RedisServer::kill`] and [`RedisServer::restart`].
    pub fn start_persistent() -> io::Result<RedisServer> {
        RedisServer::start_with(true)
    }

    fn start_with(persistent: bool) -> io::Result<RedisServer> {
        let binary = find_binary().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("redis-server not found in PATH nor /usr/bin; {INSTALL_HINT}"),
            )
        })?;
        let dir = fresh_dir()?;
        let socket = dir.join("redis.sock");
        let child = match spawn(&binary, &dir, &socket, persistent) {
            Ok(child) => child,
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        // From here on, dropping the server stops the process and removes the directory.
        let mut server = RedisServer { child, binary, persistent, dir, socket };
        server.wait_ready()?;
        Ok(server)
    }

    /// Kills the server (SIGKILL, as a crash would) and waits until it is
    /// gone; its socket and directory stay, for [`RedisServer::restart`].
    pub fn kill(&mut self) -> io::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// Starts the server again on the same socket and directory (killing it
    /// first if it runs), and waits until it answers PING; a persistent
    /// server comes back with what it had answered.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill()?;
        self.child = spawn(&self.binary, &self.dir, &self.socket, self.persistent)?;
        self.wait_ready()
    }

    /// Freezes the server (SIGSTOP): connections stay open, requests are
    /// taken by the kernel but not answered until [`RedisServer::resume`].
    pub fn pause(&mut self) -> io::Result<()> {
        self.signal(libc::SIGSTOP)
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&mut self) -> io::Result<()> {
        self.signal(libc::SIGCONT)
    }

    /// The process id of the server.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&mut self, signal: libc::c_int) -> io::Result<()> {
        // Never signal a process id that was reaped (and may be reused).
        if let Some(status) = self.child.try_wait()? {
            return Err(io::Error::other(format!("redis-server has exited ({status})")));
        }
        let pid = libc::pid_t::try_from(self.child.id()).map_err(io::Error::other)?;
        // SAFETY: kill(2) with a pid of our own child, not yet reaped.
        if unsafe { libc::kill(pid, signal) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The URL to give [`crate::Store::connect_redis`]: `redis+unix://<socket>`.
    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket.display())
    }

    /// The UNIX socket the server listens on.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Polls PING over the socket until the server answers, it exits, or
    /// [`READY_WITHIN`] passes.
    fn wait_ready(&mut self) -> io::Result<()> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(io::Error::other(format!("redis-server exited ({status}) at start: {}", self.log_tail())));
            }
            if ping(&self.socket).is_ok() {
                return Ok(());
            }
            if started.elapsed() > READY_WITHIN {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("redis-server did not answer PING within {READY_WITHIN:?}: {}", self.log_tail()),
                ));
            }
            thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// The end of the server's log, for error messages.
    fn log_tail(&self) -> String {
        let log = fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Runs `redis-server` on `socket` with its files in `dir`.
fn spawn(binary: &Path, dir: &Path, socket: &Path, persistent: bool) -> io::Result<Child> {
    let mut cmd = Command::new(binary);
    cmd.arg("--port")
        .arg("0")
        .arg("--unixsocket")
        .arg(socket)
        .arg("--unixsocketperm")
        .arg("700")
        .arg("--save")
        .arg("")
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join("redis.log"));
    if persistent {
        cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
    } else {
        cmd.args(["--appendonly", "no"]);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run {}: {e}; {INSTALL_HINT}", binary.display())))
}

fn ping(socket: &Path) -> io::Result<()> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
    let mut answer = [0u8; 7];
    stream.read_exact(&mut answer)?;
    if &answer == b"+PONG\r\n" {
        Ok(())
    } else {
        // Still loading, or something else on the socket.
        Err(io::Error::other(format!("PING answered {:?}", String::from_utf8_lossy(&answer))))
    }
}

fn find_binary() -> Option<PathBuf> {
    let in_path = env::var_os("PATH").into_iter().flat_map(|p| env::split_paths(&p).collect::<Vec<_>>());
    in_path.map(|dir| dir.join("redis-server")).chain([PathBuf::from("/usr/bin/redis-server")]).find(|p| p.is_file())
}

/// A new directory of its own under the temporary directory.
fn fresh_dir() -> io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = env::temp_dir().join(format!("mobicore-redis-{}-{nanos}-{n}", std::process::id()));
        match fs::create_dir(&dir) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            other => return other.map(|()| dir),
        }
    }
}
