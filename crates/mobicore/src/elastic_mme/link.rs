//! The link between the front end and its hosts (`mme-frontend --hosts`,
//! `mme-host --frontend`): TCP on loopback, or a Unix stream socket
//! (`unix:/path`). The link carries no authentication, so both are for
//! this machine's processes only: TCP binds to loopback, where any local
//! user may connect and pose as a host; the socket file is the owner's
//! alone (mode 0600), so only the front end's user may.
//!
//! A Unix stream wakes a writer's epoll whenever its reader frees what it
//! read (the kernel's `unix_write_space` does not wait for a writer to
//! have found the socket full, as TCP's does). Through tokio's
//! `UnixStream`, which registers both directions, every read of one end
//! would wake the other process for nothing; so a Unix link's halves
//! ([`UnixRead`], [`UnixWrite`]) register only for what they wait on: the
//! reader for input, the writer for room only while a write waits for it.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

/// Where the front end listens for its hosts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl FromStr for LinkAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.strip_prefix("unix:") {
            Some("") => Err("unix: needs a path, e.g. unix:/run/mobicore/hosts.sock".into()),
            Some(p) => Ok(LinkAddr::Unix(p.into())),
            None => s.parse().map(LinkAddr::Tcp).map_err(|e| format!("{s:?}: {e} (an address:port or unix:/path)")),
        }
    }
}

impl fmt::Display for LinkAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkAddr::Tcp(a) => write!(f, "{a}"),
            LinkAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// One end of a link, split.
pub struct Link {
    pub rd: Box<dyn AsyncRead + Send + Unpin>,
    pub wr: Box<dyn AsyncWrite + Send + Unpin>,
}

impl Link {
    fn tcp(s: TcpStream) -> Link {
        // Frames are whole when written: no Nagle delay behind them.
        let _ = s.set_nodelay(true);
        let (rd, wr) = s.into_split();
        Link { rd: Box::new(rd), wr: Box::new(wr) }
    }

    fn unix(s: UnixStream) -> std::io::Result<Link> {
        let s = s.into_std()?;
        let wr = UnixWrite { sock: s.try_clone()?, waiting: None };
        let rd = UnixRead(register(s, Interest::READABLE)?);
        Ok(Link { rd: Box::new(rd), wr: Box::new(wr) })
    }
}

/// `fd` registered with the runtime's reactor for `interest` only.
fn register<T: std::os::fd::AsRawFd>(fd: T, interest: Interest) -> std::io::Result<AsyncFd<T>> {
    // SAFETY: `fd` is an owned socket (a `UnixStream` or an `OwnedFd`),
    // open until the `AsyncFd` that owns it is dropped, and its raw fd
    // never changes while owned.
    unsafe { AsyncFd::register_with_interest(fd, interest) }.map_err(std::io::Error::from)
}

/// A Unix link's reading half: registered for input only.
struct UnixRead(AsyncFd<std::os::unix::net::UnixStream>);

impl AsyncRead for UnixRead {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let asked = unfilled.len();
            match guard.try_io(|s| s.get_ref().read(unfilled)) {
                Ok(Ok(n)) => {
                    // A short read drained the socket: wait for the reactor
                    // rather than read again to find it empty (as tokio's
                    // own streams do).
                    if n > 0 && n < asked {
                        guard.clear_ready();
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

/// A Unix link's writing half (non-blocking, as `into_std` left it):
/// writes straight away, and registers for room only while a write
/// finds the socket full.
struct UnixWrite {
    sock: std::os::unix::net::UnixStream,
    waiting: Option<AsyncFd<OwnedFd>>,
}

impl AsyncWrite for UnixWrite {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        loop {
            match (&self.sock).write(buf) {
                Ok(n) => {
                    self.waiting = None;
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            if self.waiting.is_none() {
                let fd = self.sock.as_fd().try_clone_to_owned()?;
                self.waiting = Some(register(fd, Interest::WRITABLE)?);
            }
            let waiting = self.waiting.as_ref().expect("registered above");
            ready!(waiting.poll_write_ready(cx))?.clear_ready();
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(self.sock.shutdown(std::net::Shutdown::Write))
    }
}

/// The front end's listener; a socket file it created is removed with it.
pub enum LinkListener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl LinkListener {
    /// Binds `a`: a TCP address must be loopback; a Unix socket's file is
    /// replaced if a socket is there already (a previous run's), and is
    /// made the owner's alone.
    pub async fn bind(a: &LinkAddr) -> std::io::Result<LinkListener> {
        use std::io::{Error, ErrorKind};
        match a {
            LinkAddr::Tcp(addr) if !addr.ip().is_loopback() => Err(Error::new(
                ErrorKind::InvalidInput,
                format!("{addr}: the link to the hosts has no authentication and binds to loopback only"),
            )),
            LinkAddr::Tcp(addr) => Ok(LinkListener::Tcp(TcpListener::bind(addr).await?)),
            LinkAddr::Unix(path) => {
                use std::os::unix::fs::{FileTypeExt, PermissionsExt};
                if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
                    std::fs::remove_file(path)?;
                }
                let l = UnixListener::bind(path)?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
                Ok(LinkListener::Unix(l, path.clone()))
            }
        }
    }

    /// The address as bound (TCP port 0: the one chosen).
    pub fn local_addr(&self) -> std::io::Result<LinkAddr> {
        match self {
            LinkListener::Tcp(l) => l.local_addr().map(LinkAddr::Tcp),
            LinkListener::Unix(_, p) => Ok(LinkAddr::Unix(p.clone())),
        }
    }

    pub async fn accept(&self) -> std::io::Result<Link> {
        match self {
            LinkListener::Tcp(l) => l.accept().await.map(|(s, _)| Link::tcp(s)),
            LinkListener::Unix(l, _) => Link::unix(l.accept().await?.0),
        }
    }
}

impl Drop for LinkListener {
    fn drop(&mut self) {
        if let LinkListener::Unix(_, p) = self {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A host's end: connects to the front end at `a`.
pub async fn connect(a: &LinkAddr) -> std::io::Result<Link> {
    match a {
        LinkAddr::Tcp(addr) => TcpStream::connect(addr).await.map(Link::tcp),
        LinkAddr::Unix(p) => Link::unix(UnixStream::connect(p).await?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn addresses_parse_and_print_back() {
        for s in ["127.0.0.1:36420", "[::1]:9", "unix:/tmp/x.sock"] {
            assert_eq!(s.parse::<LinkAddr>().unwrap().to_string(), s);
        }
        for bad in ["unix:", "localhost", "127.0.0.1"] {
            assert!(bad.parse::<LinkAddr>().is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn both_kinds_carry_octets_both_ways_and_a_socket_file_is_the_owners_and_goes_with_its_listener() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("mobicore-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("hosts.sock");
        // A stale socket file from an earlier run is replaced.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        for a in [LinkAddr::Tcp("127.0.0.1:0".parse().unwrap()), LinkAddr::Unix(path.clone())] {
            let l = LinkListener::bind(&a).await.unwrap();
            let at = l.local_addr().unwrap();
            let (mut host, mut fe) =
                tokio::join!(async { connect(&at).await.unwrap() }, async { l.accept().await.unwrap() });
            host.wr.write_all(b"hello").await.unwrap();
            let mut b = [0u8; 5];
            fe.rd.read_exact(&mut b).await.unwrap();
            fe.wr.write_all(b"world").await.unwrap();
            let mut c = [0u8; 5];
            host.rd.read_exact(&mut c).await.unwrap();
            assert_eq!((&b, &c), (b"hello", b"world"));
            if let LinkAddr::Unix(p) = &at {
                assert_eq!(std::fs::metadata(p).unwrap().permissions().mode() & 0o777, 0o600);
            }
        }
        assert!(!path.exists(), "removed with its listener");
        // More than a Unix socket holds: the writer waits for room (its
        // only registration for it) and goes on; the reader gets it all.
        let l = LinkListener::bind(&LinkAddr::Unix(path.clone())).await.unwrap();
        let (mut host, mut fe) = tokio::join!(async { connect(&l.local_addr().unwrap()).await.unwrap() }, async {
            l.accept().await.unwrap()
        });
        let sent: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
        let mut got = Vec::new();
        let ((), r) = tokio::join!(
            async {
                host.wr.write_all(&sent).await.unwrap();
                host.wr.shutdown().await.unwrap();
            },
            fe.rd.read_to_end(&mut got)
        );
        r.unwrap();
        assert!(got == sent, "{} octets of {}", got.len(), sent.len());
        drop(l);
        let err = LinkListener::bind(&LinkAddr::Tcp("192.0.2.1:0".parse().unwrap())).await.err().unwrap();
        assert!(err.to_string().contains("loopback only"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
