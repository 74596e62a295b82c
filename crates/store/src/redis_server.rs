//! A real `redis-server` for tests: started on a UNIX socket in a fresh
//! temporary directory, with no persistence, and stopped (and its directory
//! removed) when dropped.
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
    dir: PathBuf,
    socket: PathBuf,
}

impl RedisServer {
    /// Starts a server and waits until it answers PING.
    pub fn start() -> io::Result<RedisServer> {
        let binary = find_binary().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("redis-server not found in PATH nor /usr/bin; {INSTALL_HINT}"),
            )
        })?;
        let dir = fresh_dir()?;
        let socket = dir.join("redis.sock");
        let log = dir.join("redis.log");
        let spawned = Command::new(&binary)
            .arg("--port")
            .arg("0")
            .arg("--unixsocket")
            .arg(&socket)
            .arg("--unixsocketperm")
            .arg("700")
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(io::Error::new(e.kind(), format!("cannot run {}: {e}; {INSTALL_HINT}", binary.display())));
            }
        };
        // From here on, dropping the server stops the process and removes the directory.
        let mut server = RedisServer { child, dir, socket };
        server.wait_ready()?;
        Ok(server)
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
