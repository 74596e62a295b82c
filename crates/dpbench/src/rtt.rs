//! Round-trip probes: single UDP packets ping-ponged through the device
//! under test, against echo servers in the sink namespace.
//!
//! - uplink: a G-PDU from gen (the eNB) to the UPF, decapsulated to the
//!   sink's UDP echo; the reply returns by kernel forwarding to the UE
//!   address on gen's loopback. Kernel reference: the same UDP exchange
//!   without the tunnel.
//! - downlink: plain UDP from gen (the data network) to UE 0, encapsulated
//!   by the UPF towards the sink (the eNB), whose GTP-U echo answers with
//!   plain UDP. Kernel reference: UDP to a UE address on sink's loopback.
//!
//! The added round-trip time is the difference of the medians.

use crate::frames::*;
use crate::DpBenchError;
use mobicore_gtp::gtpu;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_millis(200);

/// The two echo servers in the sink namespace; stopped and joined on drop.
pub struct Echo {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<(), mobicore_netns::NetnsError>>>,
}

impl Echo {
    pub fn start(sink_ns: &str) -> Result<Self, DpBenchError> {
        let stop = Arc::new(AtomicBool::new(false));
        // Bind in the namespace first so that failures surface here.
        let (udp, gtp) = mobicore_netns::run_in(sink_ns, || -> std::io::Result<(UdpSocket, UdpSocket)> {
            let u = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, ECHO_PORT))?;
            let g = UdpSocket::bind(SocketAddrV4::new(SINK, GTPU_PORT))?;
            u.set_read_timeout(Some(Duration::from_millis(50)))?;
            g.set_read_timeout(Some(Duration::from_millis(50)))?;
            Ok((u, g))
        })??;
        let mut threads = Vec::new();
        let s = stop.clone();
        threads.push(mobicore_netns::spawn_in(sink_ns, "dpbench-echo", move || serve(&udp, &s, |_, _| None))?);
        let s = stop.clone();
        threads.push(mobicore_netns::spawn_in(sink_ns, "dpbench-gtp-echo", move || serve(&gtp, &s, gtp_reply))?);
        Ok(Echo { stop, threads })
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Echoes every datagram: back to the sender, or where `redirect` says
/// (payload range, destination).
/// Where to answer a datagram: (payload offset, destination), None = as is.
type Redirect = fn(&[u8], SocketAddr) -> Option<(usize, SocketAddr)>;

fn serve(sock: &UdpSocket, stop: &AtomicBool, redirect: Redirect) {
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, from)) = sock.recv_from(&mut buf) else { continue };
        let (at, to) = redirect(&buf[..n], from).unwrap_or((0, from));
        let _ = sock.send_to(&buf[at..n], to);
    }
}

/// A G-PDU (TS 29.281 5.1) with inner IPv4/UDP: answer its payload to the
/// inner source. Anything else is answered as is.
fn gtp_reply(b: &[u8], _from: SocketAddr) -> Option<(usize, SocketAddr)> {
    let g = gtpu::Packet::new_checked(b).ok().filter(|g| g.msg_type() == gtpu::msg::G_PDU)?;
    let hdr = g.payload_offset();
    let ip = g.payload();
    if ip.len() < 28 || ip[0] != 0x45 || ip[9] != 17 {
        return None;
    }
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let sport = u16::from_be_bytes([ip[20], ip[21]]);
    Some((hdr + 28, SocketAddr::V4(SocketAddrV4::new(src, sport))))
}

/// Which path a probe takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    KernelUplink,
    KernelDownlink,
    UpfUplink,
    UpfDownlink,
}

/// Median round trip in microseconds of `samples` probes of an inner
/// packet of `size` bytes, run on a thread in the gen namespace; None if
/// fewer than half came back.
pub fn median_rtt(gen_ns: &str, probe: Probe, size: usize, samples: usize) -> Result<Option<f64>, DpBenchError> {
    let r = mobicore_netns::run_in(gen_ns, move || -> std::io::Result<Option<f64>> {
        let payload = vec![0x42u8; size.saturating_sub(28).max(8)];
        let bind = |a: Ipv4Addr| -> std::io::Result<UdpSocket> {
            let s = UdpSocket::bind(SocketAddrV4::new(a, 0))?;
            s.set_read_timeout(Some(WAIT))?;
            Ok(s)
        };
        let (tx, rx, to, msg) = match probe {
            Probe::KernelUplink => {
                let s = bind(PROBE_UE_UL)?;
                (s.try_clone()?, s, SocketAddrV4::new(SINK, ECHO_PORT), payload)
            }
            Probe::KernelDownlink => {
                let s = bind(GEN)?;
                (s.try_clone()?, s, SocketAddrV4::new(PROBE_UE_DL, ECHO_PORT), payload)
            }
            Probe::UpfDownlink => {
                let s = bind(GEN)?;
                (s.try_clone()?, s, SocketAddrV4::new(UE_BASE, ECHO_PORT), payload)
            }
            Probe::UpfUplink => {
                let rx = bind(PROBE_UE_UL)?;
                let port = rx.local_addr()?.port();
                let inner = ipv4_udp_payload(PROBE_UE_UL, SINK, port, ECHO_PORT, &payload);
                (bind(GEN)?, rx, SocketAddrV4::new(DUT0, GTPU_PORT), gtpu::gpdu(TEID_BASE, &inner))
            }
        };
        let mut rtts = Vec::with_capacity(samples);
        let mut buf = [0u8; 2048];
        for _ in 0..samples {
            let t = Instant::now();
            tx.send_to(&msg, to)?;
            // Skip late replies of earlier probes (they carry the same bytes,
            // so only the timing tells; a late one ends up as a slow sample).
            if rx.recv_from(&mut buf).is_ok() {
                rtts.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        if rtts.len() * 2 < samples.max(1) {
            return Ok(None);
        }
        rtts.sort_by(f64::total_cmp);
        Ok(Some(rtts[rtts.len() / 2]))
    })??;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gtp_echo_answers_the_inner_source() {
        let inner = ipv4_udp_payload(GEN, UE_BASE, 4242, ECHO_PORT, b"ping");
        let g = gtpu::gpdu(7, &inner);
        let (at, to) = gtp_reply(&g, "10.0.0.1:2152".parse().unwrap()).unwrap();
        assert_eq!(&g[at..], b"ping");
        assert_eq!(to, "10.201.1.1:4242".parse::<SocketAddr>().unwrap());
    }

    #[test]
    fn gtp_echo_finds_the_inner_packet_past_extension_headers() {
        let inner = ipv4_udp_payload(GEN, UE_BASE, 4242, ECHO_PORT, b"ping");
        let h = gtpu::HeaderRepr::gpdu(7).with_seq(3).with_extension(gtpu::Extension::pdu_session_container(true, 9));
        let g = gtpu::Repr { header: h, body: gtpu::Body::GPdu(&inner) }.to_vec();
        let (at, to) = gtp_reply(&g, "10.0.0.1:2152".parse().unwrap()).unwrap();
        assert_eq!(&g[at..], b"ping");
        assert_eq!(to, "10.201.1.1:4242".parse::<SocketAddr>().unwrap());
    }

    #[test]
    fn gtp_echo_leaves_other_datagrams_alone() {
        assert_eq!(gtp_reply(b"not gtp", "10.0.0.1:1".parse().unwrap()), None);
        assert_eq!(gtp_reply(&gtpu::gpdu(7, b"short"), "10.0.0.1:1".parse().unwrap()), None);
    }
}
