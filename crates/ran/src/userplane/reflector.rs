//! TEST-ONLY stand-in for the UPF: a tiny GTP-U reflector in the `core`
//! namespace, so the eNB user plane and the topology can be tested before
//! (and independently of) the real UPF datapath. It decapsulates uplink
//! G-PDUs into a TUN device (`gtp0`) for the kernel to forward to `dn`,
//! and encapsulates what the kernel routes back to the UE pool onto the
//! eNB F-TEID of the destination UE. No rules, no PFCP: never use it
//! outside tests.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use mobicore_gtp::gtpu::{self, Body, HeaderRepr};
use mobicore_netns::{ip_batch, run_in, Tun};
use tokio::io::unix::AsyncFd;
use tokio::net::UdpSocket;
use tokio::sync::oneshot;

use super::UeTunnel;

/// Packets the reflector moved, per direction.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReflectorStats {
    pub uplink: u64,
    pub downlink: u64,
    pub dropped: u64,
}

pub struct Reflector {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<ReflectorStats>,
}

impl Reflector {
    /// Start in `ns`, listening on `s1u:2152`, routing `10.44.0.0/14` into
    /// its TUN.
    pub async fn start(ns: &str, s1u: Ipv4Addr, tunnels: &[UeTunnel]) -> Reflector {
        let (tun, sock) = run_in(ns, move || {
            let tun = Tun::create("gtp0").unwrap();
            let sock = mobicore_netns::sock::udp_bind(SocketAddrV4::new(s1u, gtpu::PORT), 4 << 20).unwrap();
            sock.set_nonblocking(true).unwrap();
            (tun, sock)
        })
        .unwrap();
        let _ = mobicore_netns::topology::sysctl(ns, "net/ipv6/conf/gtp0/disable_ipv6", "1");
        ip_batch(ns, &["link set gtp0 up mtu 1464".into(), "route add 10.44.0.0/14 dev gtp0".into()]).unwrap();
        #[allow(deprecated)]
        let tun = AsyncFd::new(tun).unwrap();
        let sock = UdpSocket::from_std(sock).unwrap();
        let by_ue: HashMap<Ipv4Addr, UeTunnel> = tunnels.iter().map(|t| (t.ue_ip, *t)).collect();
        let (stop, rx) = oneshot::channel();
        let task = tokio::spawn(run(tun, sock, by_ue, rx));
        Reflector { stop, task }
    }

    pub async fn stop(self) -> ReflectorStats {
        let _ = self.stop.send(());
        self.task.await.unwrap()
    }
}

async fn run(
    tun: AsyncFd<Tun>,
    sock: UdpSocket,
    by_ue: HashMap<Ipv4Addr, UeTunnel>,
    mut stop: oneshot::Receiver<()>,
) -> ReflectorStats {
    let mut s = ReflectorStats::default();
    let (mut rx, mut pkt) = (vec![0u8; 65536], vec![0u8; 65536]);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            got = sock.recv_from(&mut rx) => {
                let Ok((n, _)) = got else { continue };
                match gtpu::parse(&rx[..n]) {
                    Ok(gtpu::Repr { header, body: Body::GPdu(ip) })
                        if ip.len() >= 20
                            && by_ue.values().any(|t| t.sgw.teid.0 == header.teid
                                && ip[12..16] == t.ue_ip.octets()) =>
                    {
                        let _ = tun.get_ref().send(ip);
                        s.uplink += 1;
                    }
                    _ => s.dropped += 1,
                }
            }
            ready = tun.readable() => {
                let Ok(mut g) = ready else { break };
                while let Ok(Ok(n)) = g.try_io(|i| i.get_ref().recv(&mut pkt)) {
                    let ip = &pkt[..n];
                    let dst = (n >= 20).then(|| Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]));
                    let Some(t) = dst.and_then(|d| by_ue.get(&d)) else { s.dropped += 1; continue };
                    let mut out = vec![0u8; 8 + n];
                    HeaderRepr::gpdu(t.enb.teid.0).emit(&mut out[..8], n);
                    out[8..].copy_from_slice(ip);
                    let to = SocketAddr::V4(SocketAddrV4::new(t.enb.ipv4, gtpu::PORT));
                    let _ = sock.send_to(&out, to).await;
                    s.downlink += 1;
                }
            }
        }
    }
    s
}
