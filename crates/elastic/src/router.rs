//! The front end's routing of UE-associated S1AP messages to MME hosts
//! (issue 13 item 1), sans-I/O: the front end's shell decodes the
//! identifiers of a message and asks [`Router::route`] for its host.
//!
//! # Identifiers carry their host
//! Every MME host allocates MME-UE-S1AP-IDs (also its S11 TEIDs) and
//! M-TMSIs with its host number as the top octet (`host_prefix` of the
//! MME core), so that the front end routes by an identifier alone, with no
//! per-UE table: a message that names the UE by MME-UE-S1AP-ID, or an
//! INITIAL UE MESSAGE with an S-TMSI, goes to the host whose prefix it
//! carries ([`owner`]).
//!
//! # New UEs
//! An INITIAL UE MESSAGE with no S-TMSI (an attach by IMSI, or a GUTI of
//! another MME) starts a UE on a host the balancer ([`Frontend`], any
//! [`crate::Scheme`]) picks for the connection's key: the eNB and its
//! eNB-UE-S1AP-ID hashed, in slice [`SliceId::ATTACH`].
//!
//! # A host that is gone
//! All the UEs of a host that left are served by one heir: the primary,
//! on a ring of the live hosts, of a key derived from the dead host's
//! number ([`Router::heir`]). Every identifier of such a UE (its old
//! MME-UE-S1AP-ID, its M-TMSI) thus reaches the same heir, which loads the
//! UE's context from the store at its first message there. The heir is a
//! function of the live hosts only, so that it stays the same until the
//! membership changes again (then the UEs move to the new heir, which
//! loads them likewise). A host number is never given to a new host while
//! UEs may still carry it.

use crate::balancer::{Frontend, Request, RouteError};
use crate::hash::hash64;
use crate::procedure::{HostId, MTmsi, ProcedureKind, SliceId};
use crate::ring::Ring;
use std::collections::BTreeSet;

/// The host number an identifier (MME-UE-S1AP-ID or M-TMSI) carries.
pub fn owner(identifier: u32) -> HostId {
    HostId(identifier >> 24)
}

/// How the front end names a UE-associated uplink message's UE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UeName {
    /// An INITIAL UE MESSAGE: the eNB (the front end's association number)
    /// and its eNB-UE-S1AP-ID, and the M-TMSI of its S-TMSI if it has one.
    Initial { enb: u64, enb_ue_s1ap_id: u32, m_tmsi: Option<u32> },
    /// Any other UE-associated message: its MME-UE-S1AP-ID.
    MmeUeS1apId(u32),
}

/// What the router counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterStats {
    /// Messages routed to the host their identifier names.
    pub by_owner: u64,
    /// Messages of a gone host's UEs, routed to its heir.
    pub to_heir: u64,
    /// New UEs placed by the balancer.
    pub balanced: u64,
    /// Messages with no live host to go to.
    pub no_host: u64,
}

/// The routing state of the front end: the live hosts, their ring for
/// heirs, and the balancer for new UEs.
pub struct Router {
    frontend: Frontend,
    live: BTreeSet<HostId>,
    heirs: Ring,
    pub stats: RouterStats,
}

/// Seed of the key a dead host's heir is found by.
const HEIR_SEED: u64 = 0x6865_6972;

impl Router {
    pub fn new(frontend: Frontend) -> Router {
        Router {
            frontend,
            live: BTreeSet::new(),
            heirs: Ring::new(Ring::DEFAULT_VNODES),
            stats: RouterStats::default(),
        }
    }

    pub fn live(&self) -> impl Iterator<Item = HostId> + '_ {
        self.live.iter().copied()
    }

    pub fn is_live(&self, host: HostId) -> bool {
        self.live.contains(&host)
    }

    /// A host is up (connected to the front end).
    pub fn host_up(&mut self, host: HostId) {
        if self.live.insert(host) {
            self.heirs.add(host);
            self.frontend.add_host(SliceId::ATTACH, host, &[]);
        }
    }

    /// A host is gone (its connection closed: killed, crashed, stopped).
    pub fn host_down(&mut self, host: HostId) {
        if self.live.remove(&host) {
            self.heirs.remove(host);
            self.frontend.remove_host(SliceId::ATTACH, host, &[]);
        }
    }

    /// The live host that serves the UEs of `gone`, if any host is live.
    pub fn heir(&self, gone: HostId) -> Option<HostId> {
        let key = hash64(HEIR_SEED, u64::from(gone.0)) as u32;
        self.heirs.primary(MTmsi(key))
    }

    /// The host that serves identifiers carrying `host`'s number.
    pub fn serving(&self, host: HostId) -> Option<HostId> {
        match self.live.contains(&host) {
            true => Some(host),
            false => self.heir(host),
        }
    }

    /// The host for a UE-associated uplink message.
    pub fn route(&mut self, name: UeName) -> Result<HostId, RouteError> {
        let id = match name {
            UeName::Initial { m_tmsi: Some(m), .. } => m,
            UeName::MmeUeS1apId(id) => id,
            UeName::Initial { enb, enb_ue_s1ap_id, m_tmsi: None } => {
                return self.balance(hash64(enb, u64::from(enb_ue_s1ap_id)) as u32);
            }
        };
        let host = owner(id);
        match self.serving(host) {
            Some(h) if h == host => {
                self.stats.by_owner += 1;
                Ok(h)
            }
            Some(h) => {
                self.stats.to_heir += 1;
                Ok(h)
            }
            // No live host: the balancer says so, and counts it.
            None => self.balance(id),
        }
    }

    fn balance(&mut self, key: u32) -> Result<HostId, RouteError> {
        let req = Request { slice: SliceId::ATTACH, ue: MTmsi(key), kind: ProcedureKind::Attach };
        let r = self.frontend.route(&req);
        // The host keeps the UE from here on: no per-procedure entry.
        self.frontend.end(MTmsi(key));
        match r {
            Ok(r) => {
                self.stats.balanced += 1;
                Ok(r.host)
            }
            Err(e) => {
                self.stats.no_host += 1;
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balancer::{Estimation, Loads};
    use crate::procedure::Profiles;
    use crate::Scheme;

    fn router(scheme: Scheme, hosts: &[u32]) -> Router {
        let fe = Frontend::new(scheme.balancer(2), Loads::new(Profiles::default(), Estimation::default()), 1024);
        let mut r = Router::new(fe);
        for &h in hosts {
            r.host_up(HostId(h));
        }
        r
    }

    #[test]
    fn identifiers_go_to_the_host_they_carry() {
        let mut r = router(Scheme::ConsistentHashing, &[1, 2, 3]);
        assert_eq!(r.route(UeName::MmeUeS1apId(0x0200_1234)), Ok(HostId(2)));
        let initial = UeName::Initial { enb: 7, enb_ue_s1ap_id: 9, m_tmsi: Some(0x03ab_cdef) };
        assert_eq!(r.route(initial), Ok(HostId(3)));
        assert_eq!(r.stats.by_owner, 2);
    }

    #[test]
    fn new_ues_are_spread_by_the_balancer_deterministically() {
        let mut r = router(Scheme::ConsistentHashing, &[1, 2, 3]);
        let mut per_host = [0u32; 4];
        for id in 0..300 {
            let h = r.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: id, m_tmsi: None }).unwrap();
            per_host[h.0 as usize] += 1;
            let again = router(Scheme::ConsistentHashing, &[3, 2, 1])
                .route(UeName::Initial { enb: 1, enb_ue_s1ap_id: id, m_tmsi: None })
                .unwrap();
            assert_eq!(h, again, "the same choice whatever the order hosts came up in");
        }
        assert_eq!(per_host[0], 0);
        assert!(per_host[1..].iter().all(|&n| n > 50), "{per_host:?}");
        assert_eq!(r.stats.balanced, 300);
    }

    #[test]
    fn every_identifier_of_a_gone_host_reaches_one_heir() {
        for scheme in Scheme::ALL {
            let mut r = router(scheme, &[1, 2, 3]);
            r.host_down(HostId(2));
            let heir = r.heir(HostId(2)).unwrap();
            assert_ne!(heir, HostId(2));
            for low in [0u32, 1, 0x1234, 0xff_ffff] {
                let id = 0x0200_0000 | low;
                assert_eq!(r.route(UeName::MmeUeS1apId(id)), Ok(heir));
                let initial = UeName::Initial { enb: 1, enb_ue_s1ap_id: low, m_tmsi: Some(id) };
                assert_eq!(r.route(initial), Ok(heir));
            }
            // The others' UEs stay where they are; new UEs avoid the gone host.
            assert_eq!(r.route(UeName::MmeUeS1apId(0x0100_0001)), Ok(HostId(1)));
            assert_eq!(r.route(UeName::MmeUeS1apId(0x0300_0001)), Ok(HostId(3)));
            for id in 0..100 {
                let h = r.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: id, m_tmsi: None }).unwrap();
                assert_ne!(h, HostId(2), "{scheme}");
            }
            assert_eq!(r.stats.to_heir, 8);
        }
    }

    #[test]
    fn heirs_move_only_when_membership_changes_and_none_without_hosts() {
        let mut r = router(Scheme::ConsistentHashing, &[1, 2, 3, 4]);
        r.host_down(HostId(4));
        let first = r.heir(HostId(4)).unwrap();
        assert_eq!(r.heir(HostId(4)), Some(first), "stable");
        // The heir goes too: both gone hosts' UEs go to live hosts.
        r.host_down(first);
        for gone in [HostId(4), first] {
            let h = r.heir(gone).unwrap();
            assert!(r.is_live(h));
        }
        for h in [1, 2, 3] {
            r.host_down(HostId(h));
        }
        assert_eq!(r.heir(HostId(4)), None);
        assert!(r.route(UeName::MmeUeS1apId(0x0100_0001)).is_err());
        assert!(r.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: 1, m_tmsi: None }).is_err());
        assert_eq!(r.stats.no_host, 2);
    }
}
