//! The user plane in memory: the UPF's real user-space data path (the
//! sans-I/O [`mobicore_upf::dataplane::UserPlane`] the PFCP node
//! programs, beside the rule table tests inspect), numbered downlink
//! packets from the data network, GTP-U on S1-U as bytes, and what each
//! eNB received per UE, so a scenario can count loss, duplicates and
//! reordering through idle mode, paging and handovers.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use mobicore_common::inet::checksum;
use mobicore_gtp::gtpu::{self, HeaderRepr, Packet};
use mobicore_upf::dataplane::{DatapathConfig, Transmit, UserspacePlane};
use mobicore_upf::rules::{ForwardingPlane, Neighbour, PlaneError, PlaneReport, SessionRules};
use mobicore_upf::urr::UsageCounts;
use mobicore_upf::MemoryPlane;

use crate::network::Network;

/// The data network's server address (source of downlink packets).
pub const DN_SERVER: Ipv4Addr = Ipv4Addr::new(10, 200, 2, 2);
/// UDP port the numbered packets go to.
pub const DN_PORT: u16 = 5001;

/// The UPF's forwarding plane in the harness: every rule goes both to the
/// table tests inspect and to the user-space data path that forwards.
#[derive(Clone)]
pub struct HarnessPlane {
    pub table: MemoryPlane,
    pub user: UserspacePlane,
}

impl HarnessPlane {
    pub fn new(cfg: DatapathConfig) -> Self {
        HarnessPlane { table: MemoryPlane::new(), user: UserspacePlane::new(cfg, Default::default()) }
    }
}

impl ForwardingPlane for HarnessPlane {
    fn install(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        self.table.install(up_seid, rules)?;
        self.user.install(up_seid, rules)
    }
    fn update(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        self.table.update(up_seid, rules)?;
        self.user.update(up_seid, rules)
    }
    fn remove(&mut self, up_seid: u64) -> Result<(), PlaneError> {
        let _ = self.user.remove(up_seid);
        self.table.remove(up_seid)
    }
    fn install_shared(&mut self, up_seid: u64, rules: &Arc<SessionRules>) -> Result<(), PlaneError> {
        self.install(up_seid, rules)
    }
    fn update_shared(&mut self, up_seid: u64, rules: &Arc<SessionRules>) -> Result<(), PlaneError> {
        self.update(up_seid, rules)
    }
    fn poll_report(&mut self) -> Option<PlaneReport> {
        self.user.poll_report()
    }
    fn usage(&self, up_seid: u64, urr_id: u32) -> Option<UsageCounts> {
        self.user.usage(up_seid, urr_id)
    }
    fn set_neighbours(&mut self, _neighbours: &[Neighbour]) {}
}

/// What arrived at the eNBs on S1-U.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct S1uLog {
    /// Per UE, the numbers of the downlink packets it received, in order.
    pub received: HashMap<u64, Vec<u32>>,
    /// End Markers received, per eNB and TEID.
    pub end_markers: Vec<(usize, u32)>,
    /// G-PDUs no UE of the addressed eNB had the TEID of: (eNB, TEID, number).
    pub unknown_teid: Vec<(usize, u32, u32)>,
    /// GTP-U to an address that is no eNB's.
    pub unknown_enb: u64,
    /// Uplink packets the UPF sent to the data network.
    pub to_core: u64,
}

/// Loss, duplicates and reordering of one UE's numbered stream `0..sent`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StreamCheck {
    pub received: usize,
    pub lost: usize,
    pub duplicated: usize,
    pub reordered: usize,
}

impl StreamCheck {
    pub fn of(seqs: &[u32], sent: u32) -> Self {
        let mut seen = std::collections::HashSet::new();
        let (mut duplicated, mut reordered, mut highest) = (0, 0, None::<u32>);
        for &s in seqs {
            if !seen.insert(s) {
                duplicated += 1;
                continue;
            }
            if highest.is_some_and(|h| s < h) {
                reordered += 1;
            }
            highest = highest.max(Some(s));
        }
        let lost = (0..sent).filter(|s| !seen.contains(s)).count();
        StreamCheck { received: seqs.len(), lost, duplicated, reordered }
    }
    pub fn clean(&self) -> bool {
        self.lost == 0 && self.duplicated == 0 && self.reordered == 0
    }
}

/// An IPv4/UDP packet from the data network to `dst` carrying `seq`.
pub fn numbered_packet(dst: Ipv4Addr, seq: u32) -> Vec<u8> {
    let payload = seq.to_be_bytes();
    let total = 20 + 8 + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&DN_SERVER.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&DN_PORT.to_be_bytes());
    p[22..24].copy_from_slice(&DN_PORT.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p[28..].copy_from_slice(&payload);
    p
}

/// The number a packet made by [`numbered_packet`] carries.
fn seq_of(inner: &[u8]) -> Option<u32> {
    let b: [u8; 4] = inner.get(28..32)?.try_into().ok()?;
    (inner.get(9) == Some(&17)).then(|| u32::from_be_bytes(b))
}

impl Network {
    /// A downlink packet numbered `seq` from the data network to UE `ue`'s
    /// address arrives at the UPF (N6/SGi).
    pub fn send_downlink(&mut self, ue: u64, seq: u32) {
        let ip = self.ipv4(ue).expect("the UE has an address");
        let now = self.now;
        let _ = self.plane.user.lock().downlink(now, &numbered_packet(ip, seq));
    }

    /// GTP-U the UPF's data path has sent, queued as S1-U messages; the
    /// data path's reports go to the PFCP node.
    pub(crate) fn collect_user_plane(&mut self) {
        let out: Vec<Transmit> = {
            let mut up = self.plane.user.lock();
            std::iter::from_fn(|| up.poll_transmit()).collect()
        };
        for t in out {
            match t {
                Transmit::Gtpu { to, bytes } | Transmit::GtpuMarked { to, bytes, .. } => {
                    self.queue.push_back(crate::fault::Msg::S1uDownlink { to, bytes: bytes.into() })
                }
                Transmit::Core(_) => self.s1u.to_core += 1,
            }
        }
        self.upf.poll_plane_reports(self.now);
    }

    /// A GTP-U message reaches the eNB at `to`: a G-PDU is the UE's whose
    /// E-RAB has that TEID at that eNB.
    pub(crate) fn s1u_to_enb(&mut self, to: SocketAddrV4, bytes: &[u8]) {
        let Some(enb) = self.enbs.iter().position(|e| e.config().s1u_addr == *to.ip()) else {
            self.s1u.unknown_enb += 1;
            return;
        };
        let Ok(p) = Packet::new_checked(bytes) else { return };
        let Ok(h) = HeaderRepr::parse(&p) else { return };
        match p.msg_type() {
            gtpu::msg::END_MARKER => self.s1u.end_markers.push((enb, h.teid)),
            gtpu::msg::G_PDU => {
                let seq = seq_of(p.payload()).unwrap_or(u32::MAX);
                let owner =
                    self.enbs[enb].ues().find(|(_, c)| c.erabs.iter().any(|e| e.enb.teid.0 == h.teid)).map(|(u, _)| u);
                match owner {
                    Some(u) => self.s1u.received.entry(u).or_default().push(seq),
                    None => self.s1u.unknown_teid.push((enb, h.teid, seq)),
                }
            }
            _ => {}
        }
    }

    /// The downlink numbers UE `ue` received so far, in order.
    pub fn downlink_received(&self, ue: u64) -> &[u32] {
        self.s1u.received.get(&ue).map_or(&[], |v| v.as_slice())
    }
}
