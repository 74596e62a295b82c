//! The namespaces of `bench divert` (seed 000 Fig. 9, the eNB, the switch
//! and the S/P-GW as separate hosts; here namespaces joined by veths):
//!
//! ```text
//!  ue  u0 ---- e-ue  enb  e-s1 ---- s-enb  steer  s-core ---- c-s1  core  c-dn ---- d0  dn
//!                                          steer  s-edge ---- x-s1  edge  x-mec --- m0  mec
//! ```
//!
//! `dn` and `mec` both hold the server address [`SERVER`] (each anchor has
//! its own data network, as an edge site has its own application server).
//! Fixed MACs and permanent neighbours (no ARP during a run), IPv4
//! forwarding on in `enb`, `steer`, `core` and `edge`, rp_filter off. The
//! traffic ends (`u0`, `d0`, `m0`) have a 1400-octet MTU so that a packet
//! still fits 1500 octets after GTP-U encapsulation, and compute their
//! checksums in software (see [`mobicore_netns::set_tx_checksum`]).
//! Dropping it deletes the namespaces, and with them the veths and every
//! XDP program left on them.

use crate::DpBenchError;
use mobicore_netns::topology::sysctl;
use mobicore_netns::{exec_in, ip, ip_batch, require_root};
use std::net::Ipv4Addr;

/// The UE (on `u0`) and its gateway on the eNB (`e-ue`).
pub const UE: Ipv4Addr = Ipv4Addr::new(10, 45, 0, 2);
pub const UE_GW: Ipv4Addr = Ipv4Addr::new(10, 45, 0, 1);
/// The UE's address at the edge anchor in selective mode (the replica's pool).
pub const REPLICA_UE: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
/// eNB S1-U (`e-s1`) and the switch's side of that link (`s-enb`, also
/// the switch's own address).
pub const ENB: Ipv4Addr = Ipv4Addr::new(10, 211, 1, 2);
pub const STEER_ENB: Ipv4Addr = Ipv4Addr::new(10, 211, 1, 1);
/// The original anchor's S1-U (`c-s1`) and the switch's side (`s-core`).
pub const CORE: Ipv4Addr = Ipv4Addr::new(10, 211, 2, 2);
pub const STEER_CORE: Ipv4Addr = Ipv4Addr::new(10, 211, 2, 1);
/// The edge anchor's S1-U (`x-s1`) and the switch's side (`s-edge`).
pub const EDGE: Ipv4Addr = Ipv4Addr::new(10, 211, 3, 2);
pub const STEER_EDGE: Ipv4Addr = Ipv4Addr::new(10, 211, 3, 1);
/// The anchors' SGi sides and their data networks.
pub const CORE_DN: Ipv4Addr = Ipv4Addr::new(10, 211, 4, 1);
pub const DN: Ipv4Addr = Ipv4Addr::new(10, 211, 4, 2);
pub const EDGE_MEC: Ipv4Addr = Ipv4Addr::new(10, 211, 5, 1);
pub const MEC: Ipv4Addr = Ipv4Addr::new(10, 211, 5, 2);
/// The application server, on the loopback of both `dn` and `mec`.
pub const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
/// MTU of the traffic ends (inner packets).
pub const INNER_MTU: u32 = 1400;

/// A veth end: (device, MAC, address).
pub type End = (&'static str, [u8; 6], Ipv4Addr);

pub const U0: End = ("u0", mac(1, 1), UE);
pub const E_UE: End = ("e-ue", mac(1, 2), UE_GW);
pub const E_S1: End = ("e-s1", mac(2, 1), ENB);
pub const S_ENB: End = ("s-enb", mac(2, 2), STEER_ENB);
pub const S_CORE: End = ("s-core", mac(3, 1), STEER_CORE);
pub const C_S1: End = ("c-s1", mac(3, 2), CORE);
pub const S_EDGE: End = ("s-edge", mac(4, 1), STEER_EDGE);
pub const X_S1: End = ("x-s1", mac(4, 2), EDGE);
pub const C_DN: End = ("c-dn", mac(5, 1), CORE_DN);
pub const D0: End = ("d0", mac(5, 2), DN);
pub const X_MEC: End = ("x-mec", mac(6, 1), EDGE_MEC);
pub const M0: End = ("m0", mac(6, 2), MEC);

const fn mac(link: u8, side: u8) -> [u8; 6] {
    [0x02, 0xd7, 0, 0, link, side]
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

pub struct DivertTopology {
    pub ue: String,
    pub enb: String,
    pub steer: String,
    pub core: String,
    pub edge: String,
    pub dn: String,
    pub mec: String,
    created: Vec<String>,
}

impl DivertTopology {
    /// Creates `<tag>-ue`, `<tag>-enb`, ... ; on error what was created is
    /// deleted again (by drop).
    pub fn create(tag: &str) -> Result<Self, DpBenchError> {
        require_root()?;
        let n = |s: &str| format!("{tag}-{s}");
        let mut t = DivertTopology {
            ue: n("ue"),
            enb: n("enb"),
            steer: n("steer"),
            core: n("core"),
            edge: n("edge"),
            dn: n("dn"),
            mec: n("mec"),
            created: Vec::new(),
        };
        for ns in [&t.ue, &t.enb, &t.steer, &t.core, &t.edge, &t.dn, &t.mec].map(String::clone) {
            ip(&["netns", "add", &ns])?;
            t.created.push(ns.clone());
            sysctl(&ns, "net/ipv4/conf/all/rp_filter", "0")?;
            sysctl(&ns, "net/ipv4/conf/default/rp_filter", "0")?;
        }
        for ns in [&t.enb, &t.steer, &t.core, &t.edge] {
            sysctl(ns, "net/ipv4/ip_forward", "1")?;
        }
        let links = [
            (&t.ue, U0, &t.enb, E_UE),
            (&t.enb, E_S1, &t.steer, S_ENB),
            (&t.steer, S_CORE, &t.core, C_S1),
            (&t.steer, S_EDGE, &t.edge, X_S1),
            (&t.core, C_DN, &t.dn, D0),
            (&t.edge, X_MEC, &t.mec, M0),
        ];
        for (na, a, nb, b) in links {
            ip(&[
                "-n",
                na,
                "link",
                "add",
                a.0,
                "address",
                &mac_text(a.1),
                "type",
                "veth",
                "peer",
                "name",
                b.0,
                "address",
                &mac_text(b.1),
                "netns",
                nb,
            ])?;
        }
        let up = |e: End, mtu: u32| {
            vec![format!("addr add {}/24 dev {}", e.2, e.0), format!("link set {} mtu {mtu} up", e.0)]
        };
        let neigh = |peer: End, dev: End| {
            format!("neigh replace {} lladdr {} dev {} nud permanent", peer.2, mac_text(peer.1), dev.0)
        };
        let mut cfg: Vec<(&String, Vec<String>)> = Vec::new();
        cfg.push((
            &t.ue,
            [up(U0, INNER_MTU), vec![format!("route add default via {UE_GW}"), neigh(E_UE, U0)]].concat(),
        ));
        cfg.push((&t.enb, [up(E_UE, 1500), up(E_S1, 1500)].concat()));
        cfg.push((
            &t.steer,
            [
                up(S_ENB, 1500),
                up(S_CORE, 1500),
                up(S_EDGE, 1500),
                vec![neigh(E_S1, S_ENB), neigh(C_S1, S_CORE), neigh(X_S1, S_EDGE)],
            ]
            .concat(),
        ));
        for (ns, s1, sw, sgi, dn) in [(&t.core, C_S1, S_CORE, C_DN, D0), (&t.edge, X_S1, S_EDGE, X_MEC, M0)] {
            let routes = vec![
                format!("route add {}/24 via {}", Ipv4Addr::from(u32::from(ENB) & !0xff), sw.2),
                format!("route add {SERVER}/32 via {}", dn.2),
                neigh(sw, s1),
                neigh(dn, sgi),
            ];
            cfg.push((ns, [up(s1, 1500), up(sgi, 1500), routes].concat()));
        }
        for (ns, end, anchor) in [(&t.dn, D0, C_DN), (&t.mec, M0, X_MEC)] {
            let rest = vec![
                format!("addr add {SERVER}/32 dev lo"),
                format!("route add default via {}", anchor.2),
                neigh(anchor, end),
            ];
            cfg.push((ns, [up(end, INNER_MTU), rest].concat()));
        }
        for (ns, mut lines) in cfg {
            lines.insert(0, "link set lo up".into());
            ip_batch(ns, &lines)?;
        }
        Ok(t)
    }

    /// Threaded NAPI on `devs` of `ns` (each device's receive path,
    /// its XDP program included, then runs in a kernel thread of its own
    /// whose CPU time is measurable), at real-time priority as a softirq
    /// would run ([`crate::cpus::realtime`]: not behind a shared host's
    /// other processes); the devices must have an XDP program attached.
    /// The ids of the NAPI threads that appeared.
    pub fn threaded_napi(&self, ns: &str, devs: &[&str]) -> Result<Vec<libc::pid_t>, DpBenchError> {
        let before = napi_threads(devs);
        let cmd = devs.iter().map(|d| format!("echo 1 > /sys/class/net/{d}/threaded")).collect::<Vec<_>>().join(" && ");
        // `ip netns exec` mounts the namespace's own /sys.
        exec_in(ns, &["sh", "-c", &cmd])?;
        let new: Vec<libc::pid_t> = napi_threads(devs).into_iter().filter(|p| !before.contains(p)).collect();
        for p in &new {
            crate::cpus::realtime(*p);
        }
        Ok(new)
    }

    pub fn namespaces(&self) -> &[String] {
        &self.created
    }

    /// Deletes every namespace still owned; idempotent.
    pub fn destroy(&mut self) -> Result<(), DpBenchError> {
        Ok(mobicore_netns::topology::delete_all(&mut self.created)?)
    }
}

impl Drop for DivertTopology {
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}

/// Kernel threads `napi/<dev>-<id>` of any of `devs` (in any namespace).
fn napi_threads(devs: &[&str]) -> Vec<libc::pid_t> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<libc::pid_t>().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let c = comm.trim_end().strip_prefix("napi/")?;
            devs.iter().any(|d| c.strip_prefix(d).is_some_and(|r| r.starts_with('-'))).then_some(pid)
        })
        .collect()
}

/// CPU time of threads `pids` so far, ns (`/proc/<pid>/schedstat`: time
/// on a CPU; a thread that is gone counts 0).
pub fn cpu_ns(pids: &[libc::pid_t]) -> u64 {
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}
