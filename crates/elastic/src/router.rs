//! The front end's routing of UE-associated S1AP messages to MME hosts
//! (issue 13 item 1), and of S11 between the hosts and the S-GW, sans-I/O:
//! the front end's shell decodes the identifiers of a message and asks
//! [`Router::route`] (S1AP) or [`Router::route_s11`] (GTPv2-C) where it goes.
//!
//! # Identifiers carry their host and replica group
//! Every MME host allocates MME-UE-S1AP-IDs (also its S11 TEIDs) and
//! M-TMSIs with its host number as the top octet (`host_prefix` of the
//! MME core) and the UE's replica group as the second
//! ([`imsi_group`] of its IMSI), so that the front end
//! routes by an identifier alone, with no per-UE table: a message that
//! names the UE by MME-UE-S1AP-ID, or an INITIAL UE MESSAGE with an
//! S-TMSI, goes to the host whose prefix it carries ([`owner`]).
//!
//! # New UEs
//! An INITIAL UE MESSAGE with no S-TMSI (an attach by IMSI, or a GUTI of
//! another MME) starts a UE on a host the balancer ([`Frontend`], any
//! [`crate::Scheme`]) picks for the connection's key: the eNB and its
//! eNB-UE-S1AP-ID hashed, in slice [`SliceId::ATTACH`].
//!
//! # A host that is gone
//! The UEs of a host that left are served group by group: those of each
//! replica group by one heir, the primary, on a ring of the live hosts,
//! of a key derived from the dead host's number and the group, the host
//! itself left out ([`Router::heir`]). So a dead host's UEs spread over
//! the live hosts (seed 004 4.3 keeps replicas per UE), while every
//! identifier of one UE (its old MME-UE-S1AP-ID, its M-TMSI, both with
//! the same host and group) reaches the same heir, which loads the UE's
//! context from the store at its first message there. The heirs are
//! fixed when the host goes (a host joining later does not move them:
//! with host-local stores only the heir holds the dead host's records of
//! its groups); when an heir goes too, its own heir of the group serves
//! both ([`Router::host_down`] says who takes what: [`Handover`]). A host
//! number is never taken again: [`Router::host_up`] refuses a gone one.
//!
//! # Replica hosts
//! With host-local stores (seed 004 4.3) each live host replicates its
//! records of each group to the host that would be their heir if it went
//! now ([`Router::replica_hosts`]; [`Router::replica_changes`] says whom
//! to tell when that changes), so that each heir holds a copy when it
//! takes the UEs over.
//!
//! # Scaling
//! A host that comes up at run time joins the balancer's ring and the
//! heirs' ([`Router::host_up`]): new UEs are placed on it too, the others'
//! UEs stay where their identifiers route. A host being drained
//! ([`Router::drain`], seed 004 5.2 "Scaling") leaves both rings at once
//! (no new UE, no gone host's UEs), goes on serving the procedures of its
//! S1 connections (messages by MME-UE-S1AP-ID, the S-GW's requests), and
//! the INITIAL UE MESSAGEs of its UEs, which would start new procedures
//! there, are held ([`Dest::Hold`]) until it says it has none running;
//! then it is gone as any gone host ([`Router::host_down`]): its UEs,
//! with their identifiers unchanged, go to their heirs, which load them
//! from the store, and the held messages go there too.
//!
//! # Per-procedure placement
//! With a store every host reads (Redis, [`Router::placing_procedures`]),
//! a procedure of a UE that has an identifier is placed by the balancer
//! too, as seed 004 Algorithm 1 places every procedure, not only the
//! attach: an INITIAL UE MESSAGE with an S-TMSI goes to the host the
//! balancer picks for its M-TMSI, which loads the UE from the store if
//! it is not its owner. So that one host at a time serves a UE, the
//! front end tracks each UE some host holds in a procedure or an S1
//! connection, from the host's word ([`Router::holding`],
//! [`Router::released`]): its messages (by M-TMSI, by MME-UE-S1AP-ID, the
//! S-GW's requests by S11 TEID) go to that host until it is at rest there
//! again. The owner's host is told when a UE is placed away
//! ([`Lend::Lent`]) and drops its copy if the UE is at rest there, so
//! that no timer of a stale copy fires while another host holds it. When
//! a UE comes to rest away from its owner, or the host it was at goes,
//! the owner's host is told to read it again, as another host wrote it
//! ([`Router::take_refreshes`]); so it is when a placement ends with no
//! host having said it holds the UE ([`Lend::Returned`], bounded by
//! [`MAX_UNCONFIRMED`]: an S-TMSI no host knows leaves no entry for
//! good). Between procedures nothing is tracked.
//!
//! With host-local stores ([`Router::local_stores`]) only the hosts that
//! hold the UE's record are candidates: its owner's host and that host's
//! replica hosts of the UE's group, which hold a copy of its records of
//! that group; and only procedures
//! that keep the UE's identifiers or end them are placed
//! ([`LOCALLY_PLACED`]). The visitor hands the record back to the owner's
//! host when the UE is at rest (the front end relays it ahead of the
//! refresh), or its keys as deletes after a detach; a visitor whose
//! copy lacks the UE gives the message back ([`Router::bounced`]), and
//! it goes home ([`Router::route_home`]).
//!
//! # Load reports
//! Hosts report their moving averages periodically ([`Router::report`]);
//! skewed consistent hashing picks new UEs' hosts by them (seed 004
//! Algorithm 1, Eq. 1). A host that reported once and then not for longer
//! than `report_stale_after` ([`Router::expire_reports`]) is stale: never
//! viable, taken only when every host is stale or over its SLO, until it
//! reports again.
//!
//! # S11
//! The front end also owns the MME's one S11 address: the S/P-GW-C sees
//! it as the MME's (the source of every request, and the address of the
//! Sender F-TEID for Control Plane). [`Router::route_s11`] routes each
//! GTPv2-C message (TS 29.274 5.5.1 header: TEID, sequence number) with no
//! per-UE table:
//! - a request of the S-GW (a Downlink Data Notification, TS 29.274
//!   7.2.11.1, or any other) names the UE by the MME's S11 TEID in its
//!   header, which is the UE's MME-UE-S1AP-ID: to the host serving its
//!   owner, the heir of a gone host. Each is held (at most `max`, for
//!   `hold`) until that host answers, so that only an answer to a request
//!   it was given goes back to the S-GW;
//! - a host's request goes to the S-GW renumbered from the front end's
//!   own 24-bit space, which all hosts share (a host's retransmission
//!   keeps the number its first try got: TS 29.274 7.6), and the S-GW's
//!   response goes back to that host under the host's number (to no
//!   other: only the sender holds the transaction). Each is kept (at most
//!   `max`) for `hold` after its last try, beyond the S-GW's duplicate
//!   cache, so that a late retransmission still reads as one there.

use crate::balancer::{Frontend, Request, RouteError};
use crate::hash::hash64;
use crate::procedure::{HostId, MTmsi, ProcedureKind, SliceId};
use crate::report::HostReport;
use crate::ring::Ring;
use mobicore_common::Groups;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

/// The host number an identifier (MME-UE-S1AP-ID or M-TMSI) carries.
pub fn owner(identifier: u32) -> HostId {
    HostId(identifier >> 24)
}

/// The replica group an identifier carries (its second octet).
pub fn replica_group(identifier: u32) -> u8 {
    (identifier >> 16) as u8
}

/// The replica group of the UE with IMSI `imsi` (its digits, with their
/// count, hashed): every identifier a host allocates it carries this
/// group, so every key of its record names it.
pub fn imsi_group(imsi: &str) -> u8 {
    let digits = imsi.bytes().take(18).fold(0u64, |v, b| v * 10 + u64::from(b.wrapping_sub(b'0') % 10));
    hash64(crate::hash::seed::GROUP, digits | (imsi.len() as u64) << 60) as u8
}

/// `(group, host)` pairs as each host with its groups, in host order.
fn by_host(pairs: impl IntoIterator<Item = (u8, HostId)>) -> Vec<(HostId, Groups)> {
    let mut out: BTreeMap<HostId, Groups> = BTreeMap::new();
    for (g, h) in pairs {
        out.entry(h).or_default().insert(g);
    }
    out.into_iter().collect()
}

/// A gone host's UEs of `groups` are served by `heir` from now on (see
/// "A host that is gone"): it inherits them (`inherit`: the host that
/// went, its records from the copy replicated to it) or adopts them (a
/// host gone before, whose heir for these groups it was).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handover {
    pub gone: HostId,
    pub heir: HostId,
    pub groups: Groups,
    pub inherit: bool,
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

/// Where a UE-associated uplink message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    Host(HostId),
    /// Held until the draining host it names is gone (the message starts
    /// a procedure of one of its UEs), then routed again.
    Hold(HostId),
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
    /// INITIAL UE MESSAGEs of a draining host's UEs, held.
    pub held: u64,
    /// S11 messages relayed to a host, and to the S-GW.
    pub s11_to_host: u64,
    pub s11_to_sgw: u64,
    /// S11 messages dropped ([`S11Drop`] says why; the shell counts each).
    pub s11_dropped: u64,
    /// Procedures placed on a host other than the UE's owner's, and
    /// messages routed to the host holding the UE.
    pub placed_away: u64,
    pub to_holder: u64,
    /// UEs not tracked: the table was full.
    pub holds_full: u64,
    /// Placements no host confirmed in time (see [`Lend::Returned`]).
    pub placements_returned: u64,
    /// Placements whose host could not load the UE ([`Router::bounced`]).
    pub placements_bounced: u64,
    /// A host said it holds a UE another host held already (see
    /// [`Router::holding`]).
    pub holds_contested: u64,
}

/// What the owner's host of a UE placed away is told (see "Per-procedure
/// placement"), by the UE's M-TMSI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lend {
    /// A procedure of the UE went to another host: the owner's host drops
    /// its copy if the UE is at rest there, so that no timer of a stale
    /// copy runs while another host holds it.
    Lent(u32),
    /// The placement ended with no host saying it holds the UE (the host
    /// went first, or the oldest of [`MAX_UNCONFIRMED`]): the owner's host
    /// reads it again, its timers running there.
    Returned(u32),
}

/// The UEs hosts hold in a procedure or an S1 connection (see
/// "Per-procedure placement"): by M-TMSI (from placement, then the
/// host's word) and by MME-UE-S1AP-ID (the host's word, with the M-TMSI
/// it named).
#[derive(Debug, Default)]
struct Holds {
    by_mtmsi: HashMap<u32, HostId>,
    /// The hosts holding it, in the order they said so (its messages go
    /// to [`Held::holder`]), with every M-TMSI named while held.
    by_id: HashMap<u32, Held>,
    /// MME-UE-S1AP-IDs whose host went while it held them: their owner's
    /// host reads them again.
    refresh: Vec<u32>,
    /// Placements no host has said it holds yet, by M-TMSI, numbered in
    /// the order placed; that order (with stale entries: confirmed since,
    /// or placed again).
    unconfirmed: HashMap<u32, u64>,
    placed_order: VecDeque<(u64, u32)>,
    placed_seq: u64,
    /// What owners' hosts are to be told.
    lends: Vec<(HostId, Lend)>,
    /// UEs tracked at most (none: per-procedure placement is off).
    max: usize,
}

/// M-TMSIs followed per held UE at most (a GUTI reallocated while held).
const MAX_NAMES: usize = 4;
/// Hosts holding one UE at once at most (see [`Router::holding`]).
const MAX_HOLDERS: usize = 4;

/// A UE held: its hosts (in the order they said so) and its names.
#[derive(Debug, Default)]
struct Held {
    hosts: Vec<HostId>,
    names: Vec<u32>,
}

impl Held {
    /// Where the messages of UE `id` go: the first host holding it other
    /// than its owner's, else the owner's. Two hold it when a timer of the
    /// owner's host's copy fired as the UE was placed away: the host it
    /// was placed at has its S1 connection, the owner's only a timer's
    /// work (a guard's S11 request), and one of them lets go when the
    /// store's compare-and-set settles it.
    fn holder(&self, id: u32) -> Option<HostId> {
        let owner = owner(id);
        self.hosts.iter().copied().find(|&h| h != owner).or_else(|| self.hosts.first().copied())
    }

    /// Its names lead to [`Held::holder`], if it has one.
    fn name_holder(&self, id: u32, by_mtmsi: &mut HashMap<u32, HostId>) {
        if let Some(h) = self.holder(id) {
            for m in &self.names {
                by_mtmsi.insert(*m, h);
            }
        }
    }
}

/// The procedures placed away from the UE's owner's host with host-local
/// stores: those that keep the UE's identifiers there (a visitor keeps
/// the GUTI in a TAU), so that its record goes back to the host its
/// identifiers name, and the detach, which ends them (its keys go back
/// as deletes). An attach (a new context under the visitor's
/// identifiers) goes to the owner's host.
pub const LOCALLY_PLACED: [ProcedureKind; 3] =
    [ProcedureKind::ServiceRequest, ProcedureKind::Tau, ProcedureKind::Detach];

/// Placements not yet confirmed by the host's Holding at most, and half
/// the table (beyond what the hosts' round trip leaves in flight at any
/// rate measured): an
/// INITIAL UE MESSAGE naming an unknown S-TMSI leaves one for good, and
/// must not fill the table.
pub const MAX_UNCONFIRMED: usize = 1 << 16;

/// What the front end reads of an S11 message's GTPv2-C header (TS 29.274
/// 5.1, 5.5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct S11Header {
    /// A request or a message without response; otherwise a response.
    pub initial: bool,
    /// The header's TEID (none when the T flag is 0).
    pub teid: Option<u32>,
    pub seq: u32,
}

/// Where an S11 message came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum S11From {
    Sgw,
    Host(HostId),
}

/// Where an S11 message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum S11Route {
    Host(HostId),
    Sgw,
    /// A host's request, with this sequence number written in.
    SgwAs(u32),
    /// The S-GW's response, to this host with its own number written back.
    HostAs(HostId, u32),
}

/// Why an S11 message goes nowhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum S11Drop {
    #[error("an S-GW request without an MME TEID")]
    NoTeid,
    #[error("no live host for the TEID's owner")]
    NoHost,
    #[error("too many S-GW requests waiting for a host's answer")]
    Full,
    #[error("the response's host is gone")]
    HostGone,
    #[error("too many hosts' requests relayed within the hold")]
    RelayFull,
    #[error("a response to no request relayed")]
    UnknownResponse,
    #[error("a host's answer to no request it was given")]
    Unsolicited,
}

impl S11Drop {
    /// The front end's counter of these.
    pub fn counter(self) -> &'static str {
        match self {
            S11Drop::NoTeid => "frontend_s11_no_teid",
            S11Drop::NoHost => "frontend_s11_no_host",
            S11Drop::Full => "frontend_s11_pending_full",
            S11Drop::HostGone => "frontend_s11_response_host_gone",
            S11Drop::RelayFull => "frontend_s11_relay_full",
            S11Drop::UnknownResponse => "frontend_s11_unknown_response",
            S11Drop::Unsolicited => "frontend_s11_unsolicited_answer",
        }
    }
}

/// The S-GW's requests given to a host and not answered yet, by sequence
/// number (one S-GW): bounded in number and in time.
struct S11Pending {
    max: usize,
    hold: Duration,
    by_seq: HashMap<u32, (HostId, Instant)>,
    /// (expiry, seq) in the order given; an entry whose expiry the map no
    /// longer has (answered, or given again) is stale and skipped.
    order: VecDeque<(Instant, u32)>,
}

/// The hosts' requests relayed to the S-GW, by the number the front end
/// gave each (24 bits, TS 29.274 5.5.1), and that number by the host's:
/// bounded in number and in time.
struct S11Relayed {
    max: usize,
    hold: Duration,
    /// The last number given.
    last: u32,
    by_seq: HashMap<u32, (HostId, u32, Instant)>,
    by_host: HashMap<(HostId, u32), u32>,
    /// (expiry, number) in the order given or tried again; stale as in
    /// [`S11Pending`].
    order: VecDeque<(Instant, u32)>,
}

impl S11Relayed {
    fn new(max: usize, hold: Duration) -> S11Relayed {
        S11Relayed { max, hold, last: 0, by_seq: HashMap::new(), by_host: HashMap::new(), order: VecDeque::new() }
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&(at, seq)) = self.order.front() {
            if at > now && self.order.len() <= 2 * self.max {
                break;
            }
            self.order.pop_front();
            if let Some(&(host, theirs, _)) = self.by_seq.get(&seq).filter(|e| e.2 == at) {
                self.by_seq.remove(&seq);
                self.by_host.remove(&(host, theirs));
            }
        }
    }

    /// The number host `host`'s request `theirs` goes under: the one it
    /// got if tried before, else the next free one.
    fn number(&mut self, now: Instant, host: HostId, theirs: u32) -> Option<u32> {
        let at = now + self.hold;
        let seq = match self.by_host.get(&(host, theirs)) {
            Some(&seq) => seq,
            None if self.by_seq.len() >= self.max => return None,
            None => loop {
                self.last = (self.last + 1) & 0xff_ffff;
                if !self.by_seq.contains_key(&self.last) {
                    self.by_host.insert((host, theirs), self.last);
                    break self.last;
                }
            },
        };
        self.by_seq.insert(seq, (host, theirs, at));
        self.order.push_back((at, seq));
        Some(seq)
    }
}

impl S11Pending {
    /// Forgets what expired; also the oldest entries while the order
    /// holds over twice `max` (answered and retransmitted requests leave
    /// stale entries there), so that it stays bounded too.
    fn expire(&mut self, now: Instant) {
        while let Some(&(at, seq)) = self.order.front() {
            if at > now && self.order.len() <= 2 * self.max {
                break;
            }
            self.order.pop_front();
            if self.by_seq.get(&seq).is_some_and(|&(_, e)| e == at) {
                self.by_seq.remove(&seq);
            }
        }
    }
}

/// The routing state of the front end: the live hosts, their ring for
/// heirs, and the balancer for new UEs.
pub struct Router {
    frontend: Frontend,
    live: BTreeSet<HostId>,
    /// Live hosts being drained (in neither ring).
    draining: BTreeSet<HostId>,
    heirs: Ring,
    /// Gone hosts and the heir each of their groups had when it went.
    gone: HashMap<HostId, Vec<Option<HostId>>>,
    /// The replica hosts each live host was last told of.
    replicas_told: HashMap<HostId, Vec<(HostId, Groups)>>,
    s11: S11Pending,
    s11_relayed: S11Relayed,
    /// Per host: when its last load report came.
    reported: HashMap<HostId, Instant>,
    report_stale_after: Duration,
    holds: Holds,
    /// Replica hosts per host.
    replicas: usize,
    /// The hosts' stores are their own ([`Router::local_stores`]).
    local: bool,
    pub stats: RouterStats,
}

/// How long a host's last load report counts, by default: ten of the
/// hosts' default report periods.
pub const REPORT_STALE_AFTER: Duration = Duration::from_secs(1);

/// The S-GW's requests waiting for a host's answer at most, by default.
pub const S11_MAX_PENDING: usize = 4096;
/// How long one waits at most, by default: beyond the S-GW's last
/// retransmission (T3 x N3, TS 29.274 7.6; 3 s x 3 by default). Also how
/// long a host's relayed request keeps its number after its last try.
pub const S11_HOLD: Duration = Duration::from_secs(20);
/// The hosts' requests relayed within [`S11_HOLD`] at most, by default:
/// over 13,000 a second; a 24-bit number is not given again within it.
pub const S11_MAX_RELAYED: usize = 1 << 18;

/// Seed of the key a dead host's heir is found by.
const HEIR_SEED: u64 = 0x6865_6972;

impl Router {
    pub fn new(frontend: Frontend) -> Router {
        Router {
            frontend,
            live: BTreeSet::new(),
            draining: BTreeSet::new(),
            heirs: Ring::new(Ring::DEFAULT_VNODES),
            gone: HashMap::new(),
            replicas_told: HashMap::new(),
            s11: S11Pending { max: S11_MAX_PENDING, hold: S11_HOLD, by_seq: HashMap::new(), order: VecDeque::new() },
            s11_relayed: S11Relayed::new(S11_MAX_RELAYED, S11_HOLD),
            reported: HashMap::new(),
            report_stale_after: REPORT_STALE_AFTER,
            holds: Holds::default(),
            replicas: 1,
            local: false,
            stats: RouterStats::default(),
        }
    }

    pub fn live(&self) -> impl Iterator<Item = HostId> + '_ {
        self.live.iter().copied()
    }

    pub fn is_live(&self, host: HostId) -> bool {
        self.live.contains(&host)
    }

    /// A host is up (connected to the front end); false, and nothing
    /// changes, if its number is one of a host that went ([`Router::is_gone`]).
    pub fn host_up(&mut self, host: HostId) -> bool {
        if self.is_gone(host) {
            return false;
        }
        if self.live.insert(host) {
            self.heirs.add(host);
            self.frontend.add_host(SliceId::ATTACH, host, &[]);
        }
        true
    }

    /// Whether `host` is the number of a host that went: its heirs serve
    /// the UEs whose identifiers carry it, so no host may take it again
    /// (a new one would allocate identifiers those UEs hold, and receive
    /// their messages without their records).
    pub fn is_gone(&self, host: HostId) -> bool {
        self.gone.contains_key(&host)
    }

    /// A host is gone (its connection closed: killed, crashed, stopped;
    /// or drained). Returns who serves the UEs that move with it, group
    /// by group ([`Router::heir`] now): `host`'s first (inherited), then
    /// those of hosts gone before whose heir it was (adopted in turn).
    pub fn host_down(&mut self, host: HostId) -> Vec<Handover> {
        if !self.live.contains(&host) {
            return Vec::new();
        }
        let mut gone: Vec<HostId> = self.gone.keys().copied().collect();
        gone.sort();
        let before: Vec<(HostId, Groups)> = gone
            .into_iter()
            .map(|g| (g, (0..=255u8).filter(|&grp| self.heir(g, grp) == Some(host)).collect::<Groups>()))
            .filter(|(_, groups)| !groups.is_empty())
            .collect();
        // Whether UE identifier `id` moves with `host` to an heir.
        let moves = |id: u32| {
            let o = owner(id);
            o == host || before.iter().any(|(g, groups)| *g == o && groups.contains(replica_group(id)))
        };
        self.live.remove(&host);
        if !self.draining.remove(&host) {
            self.leave_rings(host);
        }
        self.frontend.forget(host);
        self.reported.remove(&host);
        // What it held: its own UEs and those of hosts gone before go to
        // the heirs, which load them all; the others' owners read them again.
        let v = &mut self.holds;
        let mut unheld: Vec<u32> = v
            .by_mtmsi
            .iter()
            .filter(|(m, h)| **h == host && v.unconfirmed.contains_key(m) && !moves(**m))
            .map(|(&m, _)| m)
            .collect();
        unheld.sort_unstable();
        for m in &unheld {
            v.unconfirmed.remove(m);
        }
        v.by_mtmsi.retain(|_, h| *h != host);
        let mut ended: Vec<u32> =
            v.by_id.iter().filter(|(&id, held)| held.hosts == [host] && !moves(id)).map(|(&id, _)| id).collect();
        ended.sort_unstable();
        for (&id, held) in v.by_id.iter_mut() {
            held.hosts.retain(|&h| h != host);
            // Another host holds it too: its names go there now.
            held.name_holder(id, &mut v.by_mtmsi);
        }
        v.by_id.retain(|_, held| !held.hosts.is_empty());
        v.refresh.extend(ended);
        // Its heirs from now on (see "A host that is gone").
        let heirs = (0..=255u8).map(|g| self.ring_heir(host, g)).collect();
        self.gone.insert(host, heirs);
        self.return_placements(unheld);
        let mut out = self.handovers(host, Groups::ALL, true);
        for (g, groups) in before {
            out.extend(self.handovers(g, groups, false));
        }
        out
    }

    /// Who serves gone host `gone`'s UEs of `groups` now, one entry per heir.
    fn handovers(&self, gone: HostId, groups: Groups, inherit: bool) -> Vec<Handover> {
        self.heirs_of(gone, groups).into_iter().map(|(heir, groups)| Handover { gone, heir, groups, inherit }).collect()
    }

    /// The live hosts serving gone host `gone`'s UEs of `groups`, each
    /// with its groups, in host order.
    pub fn heirs_of(&self, gone: HostId, groups: Groups) -> Vec<(HostId, Groups)> {
        by_host(groups.iter().filter_map(|g| Some((g, self.heir(gone, g)?))))
    }

    fn leave_rings(&mut self, host: HostId) {
        self.heirs.remove(host);
        self.frontend.remove_host(SliceId::ATTACH, host, &[]);
    }

    /// Start draining a live host (see "Scaling"); false if it is not
    /// live, already draining, or the only host serving new UEs.
    pub fn drain(&mut self, host: HostId) -> bool {
        if !self.live.contains(&host) || self.draining.contains(&host) || self.serving_new().count() < 2 {
            return false;
        }
        self.draining.insert(host);
        self.leave_rings(host);
        true
    }

    pub fn is_draining(&self, host: HostId) -> bool {
        self.draining.contains(&host)
    }

    /// The live hosts that take new UEs (not draining).
    pub fn serving_new(&self) -> impl Iterator<Item = HostId> + '_ {
        self.live.difference(&self.draining).copied()
    }

    /// The SLO violations the balancer has reported so far (seed 004
    /// Algorithm 1: no viable host), for the EPS controller.
    pub fn violations(&self) -> u64 {
        self.frontend.stats.violations
    }

    /// A live host's load report, received at `now`.
    pub fn report(&mut self, now: Instant, host: HostId, report: HostReport) {
        if self.live.contains(&host) {
            self.reported.insert(host, now);
            self.frontend.report(host, report);
        }
    }

    /// A host's last report counts for `after` (see "Load reports").
    pub fn with_report_staleness(mut self, after: Duration) -> Router {
        self.report_stale_after = after;
        self
    }

    /// Marks stale the hosts whose last report is older than
    /// `report_stale_after` at `now`; returns them (once each).
    pub fn expire_reports(&mut self, now: Instant) -> Vec<HostId> {
        let after = self.report_stale_after;
        let gone: Vec<HostId> = self
            .reported
            .iter()
            .filter(|(_, &at)| now.saturating_duration_since(at) > after)
            .map(|(&h, _)| h)
            .collect();
        for &h in &gone {
            self.reported.remove(&h);
            self.frontend.stale(h);
        }
        gone
    }

    /// The live host that serves the UEs of `gone` in replica group
    /// `group`, if any host is live: the heir it had when it went, or that
    /// heir's if gone too.
    pub fn heir(&self, gone: HostId, group: u8) -> Option<HostId> {
        let mut h = gone;
        // Each step goes to a host that went later: at most one per gone host.
        for _ in 0..=self.gone.len() {
            match self.gone.get(&h).and_then(|heirs| heirs[usize::from(group)]) {
                Some(next) if self.live.contains(&next) => return Some(next),
                Some(next) => h = next,
                None => return self.ring_heir(h, group),
            }
        }
        None
    }

    /// The host of the heirs' ring, other than `host`, that takes its UEs
    /// of `group` if it goes now.
    fn ring_heir(&self, host: HostId, group: u8) -> Option<HostId> {
        self.ring_heir_without(host, group, &[])
    }

    /// The host of the heirs' ring that would take `host`'s UEs of `group`
    /// if it went with the hosts of `without` (none of them).
    fn ring_heir_without(&self, host: HostId, group: u8, without: &[HostId]) -> Option<HostId> {
        let key = MTmsi(hash64(HEIR_SEED, u64::from(host.0) << 8 | u64::from(group)) as u32);
        let n = 2 + without.len();
        self.heirs.candidates(key, n).into_iter().find(|&h| h != host && !without.contains(&h))
    }

    /// The hosts `host` replicates its records of `group` to (seed 004
    /// 4.3): the one that would be their heir if it went now; with two
    /// failures survived ([`Router::with_replicas`]), also every host that
    /// would serve them if that heir went too, in either order: the heir's
    /// heir (the host first), and the host's next candidate (the heir
    /// first: the host's heir then). At most three hosts.
    pub fn replica_hosts_of(&self, host: HostId, group: u8) -> Vec<HostId> {
        let Some(first) = self.ring_heir(host, group) else { return Vec::new() };
        let mut out = vec![first];
        if self.replicas > 1 {
            let then = [self.ring_heir_without(first, group, &[host]), self.ring_heir_without(host, group, &[first])];
            for h in then.into_iter().flatten() {
                if !out.contains(&h) {
                    out.push(h);
                }
            }
        }
        out
    }

    /// Every replica host of `host` ([`Router::replica_hosts_of`]), each
    /// with the groups it holds a copy of, in host order.
    pub fn replica_hosts(&self, host: HostId) -> Vec<(HostId, Groups)> {
        by_host((0..=255u8).flat_map(|g| self.replica_hosts_of(host, g).into_iter().map(move |r| (g, r))))
    }

    /// Each host's records survive `n` failures (1 or 2; see
    /// [`Router::replica_hosts_of`]).
    pub fn with_replicas(mut self, n: usize) -> Router {
        self.replicas = n.clamp(1, 2);
        self
    }

    /// The live hosts whose replica hosts changed since they were last
    /// told (each joining host once), with their replica hosts now.
    pub fn replica_changes(&mut self) -> Vec<(HostId, Vec<(HostId, Groups)>)> {
        let live = &self.live;
        self.replicas_told.retain(|h, _| live.contains(h));
        let mut out = Vec::new();
        for h in self.live.iter().copied() {
            let targets = self.replica_hosts(h);
            if self.replicas_told.get(&h) != Some(&targets) {
                self.replicas_told.insert(h, targets.clone());
                out.push((h, targets));
            }
        }
        out
    }

    /// The host that serves identifiers carrying `host`'s number and
    /// replica group `group`.
    pub fn serving(&self, host: HostId, group: u8) -> Option<HostId> {
        match self.live.contains(&host) {
            true => Some(host),
            false => self.heir(host, group),
        }
    }

    /// The host that serves UE identifier `id` (MME-UE-S1AP-ID, M-TMSI,
    /// S11 TEID): [`Router::serving`] of the host and group it carries.
    pub fn serving_id(&self, id: u32) -> Option<HostId> {
        self.serving(owner(id), replica_group(id))
    }

    /// Where a UE-associated uplink message goes.
    pub fn route(&mut self, name: UeName) -> Result<Dest, RouteError> {
        self.route_as(name, None)
    }

    /// [`Router::route`] of a message that starts a procedure of `kind`
    /// (the NAS of an INITIAL UE MESSAGE; none: not known), for the
    /// balancer's Eq. 1 and, with host-local stores, whether it may be
    /// placed away at all.
    pub fn route_as(&mut self, name: UeName, kind: Option<ProcedureKind>) -> Result<Dest, RouteError> {
        self.route_placing(name, kind, true)
    }

    /// Where a UE-associated uplink that host `gone` took before it went,
    /// and had not handled, goes again. An INITIAL UE MESSAGE naming no
    /// M-TMSI (an attach by IMSI, or by another MME's GUTI) goes to the
    /// heir of `group`, the replica group the dead host drew the UE's
    /// identifiers in (`mobicore_mme::routing::initial_ue_group`): with
    /// its record written, that heir took the UE over and carries on
    /// (TS 24.301 5.5.1.2.7 e: the same ATTACH REQUEST again continues
    /// the attach), where a new host would start a second context for the
    /// IMSI and the two collide in the store. Any other as [`Router::route`].
    pub fn route_again(&mut self, gone: HostId, name: UeName, group: u8) -> Result<Dest, RouteError> {
        match name {
            UeName::Initial { m_tmsi: None, .. } => match self.serving(gone, group) {
                Some(h) => {
                    self.stats.to_heir += 1;
                    Ok(Dest::Host(h))
                }
                None => Err(RouteError::NoHost(SliceId::ATTACH)),
            },
            _ => self.route(name),
        }
    }

    /// [`Router::route`], never placed away: a message a visitor gave
    /// back ([`Router::bounced`]).
    pub fn route_home(&mut self, name: UeName) -> Result<Dest, RouteError> {
        self.route_placing(name, None, false)
    }

    fn route_placing(&mut self, name: UeName, kind: Option<ProcedureKind>, place: bool) -> Result<Dest, RouteError> {
        let holder = match name {
            UeName::Initial { m_tmsi: Some(m), .. } => self.holds.by_mtmsi.get(&m).copied(),
            UeName::MmeUeS1apId(id) => self.holds.by_id.get(&id).and_then(|h| h.holder(id)),
            UeName::Initial { m_tmsi: None, .. } => None,
        };
        if let Some(h) = holder {
            self.stats.to_holder += 1;
            return Ok(Dest::Host(h));
        }
        if let (UeName::Initial { m_tmsi: Some(m), .. }, true) = (name, place) {
            if let Some(h) = self.place(m, kind) {
                return Ok(Dest::Host(h));
            }
        }
        let id = match name {
            UeName::Initial { m_tmsi: Some(m), .. } => m,
            UeName::MmeUeS1apId(id) => id,
            UeName::Initial { enb, enb_ue_s1ap_id, m_tmsi: None } => {
                return self.balance(hash64(enb, u64::from(enb_ue_s1ap_id)) as u32).map(Dest::Host);
            }
        };
        let host = owner(id);
        match self.serving_id(id) {
            Some(h) if h == host && self.draining.contains(&h) && matches!(name, UeName::Initial { .. }) => {
                self.stats.held += 1;
                Ok(Dest::Hold(h))
            }
            Some(h) if h == host => {
                self.stats.by_owner += 1;
                Ok(Dest::Host(h))
            }
            Some(h) => {
                self.stats.to_heir += 1;
                Ok(Dest::Host(h))
            }
            // No live host: the balancer says so, and counts it.
            None => self.balance(id).map(Dest::Host),
        }
    }

    /// Per-procedure placement: a host other than the owner's the
    /// balancer picks for a procedure of the UE with M-TMSI `m`, now
    /// tracked; `None` to route by the identifier (placement off, the
    /// owner's host picked, no host, the table full).
    fn place(&mut self, m: u32, kind: Option<ProcedureKind>) -> Option<HostId> {
        if self.holds.max == 0 || (self.local && !kind.is_some_and(|k| LOCALLY_PLACED.contains(&k))) {
            return None;
        }
        let home = self.serving_id(m)?;
        if self.holds.by_mtmsi.len() >= self.holds.max {
            self.stats.holds_full += 1;
            return None;
        }
        let req = Request { slice: SliceId::ATTACH, ue: MTmsi(m), kind: kind.unwrap_or(ProcedureKind::ServiceRequest) };
        let r = match self.local {
            true => {
                let mut candidates = vec![home];
                candidates.extend(self.replica_hosts_of(home, replica_group(m)));
                self.frontend.route_among(&req, &candidates).ok()?
            }
            false => self.frontend.route(&req).ok()?,
        };
        if r.host == home {
            // Not tracked until the host says it holds the UE; counted on
            // the host until its next report (Eq. 1's correction).
            self.frontend.untrack(MTmsi(m));
            return None;
        }
        let v = &mut self.holds;
        v.by_mtmsi.insert(m, r.host);
        v.lends.push((home, Lend::Lent(m)));
        v.placed_seq += 1;
        v.unconfirmed.insert(m, v.placed_seq);
        v.placed_order.push_back((v.placed_seq, m));
        self.stats.placed_away += 1;
        self.expire_unconfirmed();
        Some(r.host)
    }

    /// Forgets the oldest placements beyond [`MAX_UNCONFIRMED`] (and
    /// stale order entries beyond twice that): their owners' hosts read
    /// them again.
    fn expire_unconfirmed(&mut self) {
        let bound = MAX_UNCONFIRMED.min(self.holds.max / 2).max(1);
        let mut returned = Vec::new();
        let v = &mut self.holds;
        while v.unconfirmed.len() > bound || v.placed_order.len() > 2 * bound {
            let Some((seq, m)) = v.placed_order.pop_front() else { break };
            if v.unconfirmed.get(&m) == Some(&seq) {
                v.unconfirmed.remove(&m);
                v.by_mtmsi.remove(&m);
                returned.push(m);
            }
        }
        self.return_placements(returned);
    }

    /// Placements of `ms` ended with no holder: their owners' hosts are told.
    fn return_placements(&mut self, ms: Vec<u32>) {
        for m in ms {
            self.stats.placements_returned += 1;
            self.frontend.end(MTmsi(m));
            if let Some(home) = self.serving_id(m) {
                self.holds.lends.push((home, Lend::Returned(m)));
            }
        }
    }

    /// What owners' hosts of UEs placed away are to be told, in order.
    pub fn take_lends(&mut self) -> Vec<(HostId, Lend)> {
        std::mem::take(&mut self.holds.lends)
    }

    /// Place every procedure (see "Per-procedure placement"), tracking at
    /// most `max` UEs held; only with a store every host reads.
    pub fn placing_procedures(mut self, max: usize) -> Router {
        self.holds.max = max;
        self
    }

    /// The hosts' stores are host-local (seed 004 4.3): a procedure is
    /// placed only among the hosts that hold the UE's record, its owner's
    /// and the replica hosts holding a copy of that host's store
    /// ([`Router::replica_hosts`]), and only if it keeps the UE's
    /// identifiers or ends them ([`LOCALLY_PLACED`]: the visitor writes
    /// the record back to the owner's host when it is done, or deletes it
    /// there). See "Per-procedure
    /// placement".
    pub fn local_stores(&mut self) {
        self.local = true;
    }

    pub fn has_local_stores(&self) -> bool {
        self.local
    }

    /// A host a procedure was placed at could not load the UE (with
    /// host-local stores: its copy of the owner's store lacks it yet, a
    /// replica host just named) and gave its first message back: the
    /// placement ends, and the message goes to the owner's host, which
    /// holds the record. False if the UE was not placed at `host`.
    pub fn bounced(&mut self, host: HostId, m: u32) -> bool {
        let v = &mut self.holds;
        if v.by_mtmsi.get(&m) != Some(&host) || v.unconfirmed.remove(&m).is_none() {
            return false;
        }
        v.by_mtmsi.remove(&m);
        self.frontend.end(MTmsi(m));
        self.stats.placements_bounced += 1;
        true
    }

    /// Whether procedures are placed (and held UEs tracked).
    pub fn places_procedures(&self) -> bool {
        self.holds.max > 0
    }

    /// Host `host` holds UE `id` (MME-UE-S1AP-ID) in a procedure or an S1
    /// connection, known by M-TMSI `m_tmsi` if it has one (said again when
    /// a GUTI reallocation gives it another: both are followed): its
    /// messages go there until [`Router::released`]. False (not tracked)
    /// if placement is off or the table is full.
    ///
    /// A second host may say so while the first holds it (a timer of the
    /// owner's host's copy fired as the UE was placed away): the store's
    /// compare-and-set keeps one, the other lets it go. Its messages go to
    /// the host it was placed at ([`Held::holder`]); one host's release
    /// leaves the UE held by the other (counted: `holds_contested`).
    pub fn holding(&mut self, host: HostId, id: u32, m_tmsi: Option<u32>) -> bool {
        let v = &mut self.holds;
        if v.max == 0 {
            return false;
        }
        if !v.by_id.contains_key(&id) && (v.by_id.len() >= v.max || v.by_mtmsi.len() >= v.max) {
            self.stats.holds_full += 1;
            return false;
        }
        if let Some(m) = m_tmsi {
            v.unconfirmed.remove(&m);
        }
        let held = v.by_id.entry(id).or_default();
        if !held.hosts.contains(&host) && held.hosts.len() < MAX_HOLDERS {
            if !held.hosts.is_empty() {
                self.stats.holds_contested += 1;
            }
            held.hosts.push(host);
        }
        if let Some(m) = m_tmsi.filter(|m| !held.names.contains(m) && held.names.len() < MAX_NAMES) {
            held.names.push(m);
        }
        held.name_holder(id, &mut v.by_mtmsi);
        true
    }

    /// Host `host` is done with UE `id`: at rest, its record written. Its
    /// messages go by its identifiers again. Returns the host that is to
    /// read the UE again: its owner's, if that is another.
    pub fn released(&mut self, host: HostId, id: u32) -> Option<HostId> {
        let held = self.holds.by_id.get_mut(&id)?;
        if !held.hosts.contains(&host) {
            return None;
        }
        held.hosts.retain(|&h| h != host);
        if !held.hosts.is_empty() {
            // Held by another host still: its messages go there.
            held.name_holder(id, &mut self.holds.by_mtmsi);
            return None;
        }
        let Held { names, .. } = self.holds.by_id.remove(&id)?;
        for m in names {
            self.holds.unconfirmed.remove(&m);
            if self.holds.by_mtmsi.get(&m) == Some(&host) {
                self.holds.by_mtmsi.remove(&m);
            }
            self.frontend.end(MTmsi(m));
        }
        self.serving_id(id).filter(|&o| o != host)
    }

    /// The UEs whose host went while it held them (in
    /// [`Router::host_down`]), each with the host that is to read it
    /// again now.
    pub fn take_refreshes(&mut self) -> Vec<(HostId, u32)> {
        let ids = std::mem::take(&mut self.holds.refresh);
        ids.into_iter().filter_map(|id| Some((self.serving_id(id)?, id))).collect()
    }

    /// The UEs of host `owner_host` in `groups` another host holds now, in
    /// order: an heir taking those UEs leaves them to that host.
    pub fn held_away(&self, owner_host: HostId, groups: Groups) -> Vec<u32> {
        let mut ids: Vec<u32> = self
            .holds
            .by_id
            .keys()
            .copied()
            .filter(|&id| owner(id) == owner_host && groups.contains(replica_group(id)))
            .collect();
        ids.sort_unstable();
        ids
    }

    /// The UEs of host `owner_host` in `groups` whose procedure was placed
    /// on another host that has not said it holds them yet, by M-TMSI, in
    /// order: an heir taking those UEs leaves them too (that host reads
    /// them from the store; their release or return brings them back).
    pub fn placed_away(&self, owner_host: HostId, groups: Groups) -> Vec<u32> {
        let v = &self.holds;
        let mut ms: Vec<u32> = v
            .unconfirmed
            .keys()
            .copied()
            .filter(|&m| owner(m) == owner_host && groups.contains(replica_group(m)))
            .filter(|m| v.by_mtmsi.get(m).is_some_and(|&h| h != owner_host))
            .collect();
        ms.sort_unstable();
        ms
    }

    /// UEs tracked now.
    pub fn holds(&self) -> usize {
        self.holds.by_mtmsi.len().max(self.holds.by_id.len())
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

    /// Bounds the S-GW's requests waiting for a host's answer: at most
    /// `max` (at least 1), each for `hold`.
    pub fn with_s11_pending(mut self, max: usize, hold: Duration) -> Router {
        self.s11.max = max.max(1);
        self.s11.hold = hold;
        self
    }

    /// At most `max` of the hosts' requests relayed within `hold`.
    pub fn with_s11_relayed(mut self, max: usize, hold: Duration) -> Router {
        self.s11_relayed = S11Relayed::new(max.clamp(1, 1 << 23), hold);
        self
    }

    /// The S-GW's requests waiting for a host's answer now.
    pub fn s11_pending(&self) -> usize {
        self.s11.by_seq.len()
    }

    /// Where an S11 message from `from` goes (see the module's "S11").
    pub fn route_s11(&mut self, now: Instant, from: S11From, h: S11Header) -> Result<S11Route, S11Drop> {
        self.s11.expire(now);
        self.s11_relayed.expire(now);
        let r = self.s11_route(now, from, h);
        match r {
            Ok(S11Route::Host(_) | S11Route::HostAs(..)) => self.stats.s11_to_host += 1,
            Ok(S11Route::Sgw | S11Route::SgwAs(_)) => self.stats.s11_to_sgw += 1,
            Err(_) => self.stats.s11_dropped += 1,
        }
        r
    }

    fn s11_route(&mut self, now: Instant, from: S11From, h: S11Header) -> Result<S11Route, S11Drop> {
        match (from, h.initial) {
            (S11From::Sgw, true) => {
                let teid = h.teid.filter(|&t| t != 0).ok_or(S11Drop::NoTeid)?;
                let holder = self.holds.by_id.get(&teid).and_then(|h| h.holder(teid));
                let host = holder.or_else(|| self.serving_id(teid)).ok_or(S11Drop::NoHost)?;
                let p = &mut self.s11;
                if !p.by_seq.contains_key(&h.seq) && p.by_seq.len() >= p.max {
                    return Err(S11Drop::Full);
                }
                // A retransmission goes where the UE is served now.
                let at = now + p.hold;
                p.by_seq.insert(h.seq, (host, at));
                p.order.push_back((at, h.seq));
                Ok(S11Route::Host(host))
            }
            (S11From::Sgw, false) => {
                // Kept: the S-GW answers a late retransmission again.
                let &(host, theirs, _) = self.s11_relayed.by_seq.get(&h.seq).ok_or(S11Drop::UnknownResponse)?;
                self.is_live(host).then_some(S11Route::HostAs(host, theirs)).ok_or(S11Drop::HostGone)
            }
            (S11From::Host(host), true) => {
                self.s11_relayed.number(now, host, h.seq).map(S11Route::SgwAs).ok_or(S11Drop::RelayFull)
            }
            (S11From::Host(host), false) => match self.s11.by_seq.get(&h.seq) {
                Some(&(to, _)) if to == host => {
                    self.s11.by_seq.remove(&h.seq);
                    Ok(S11Route::Sgw)
                }
                _ => Err(S11Drop::Unsolicited),
            },
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
        let balancer: Box<dyn crate::balancer::Balancer> = match scheme {
            Scheme::SkewedCh => Box::new(crate::balancer::SkewedCh::new(Ring::DEFAULT_VNODES, 2).placing_attaches()),
            s => s.balancer(2),
        };
        let fe = Frontend::new(balancer, Loads::new(Profiles::default(), Estimation::default()), 1024);
        let mut r = Router::new(fe);
        for &h in hosts {
            r.host_up(HostId(h));
        }
        r
    }

    fn report(q: f64) -> HostReport {
        let nfs = ProcedureKind::ALL.iter().map(|&kind| crate::report::NfLoad { kind, q, c: 1.0 }).collect();
        HostReport { cpu: q.min(1.0), nfs }
    }

    fn to_host(d: Result<Dest, RouteError>) -> HostId {
        match d {
            Ok(Dest::Host(h)) => h,
            other => panic!("{other:?}"),
        }
    }

    fn attaches(r: &mut Router, n: u32) -> [u32; 4] {
        let mut per_host = [0u32; 4];
        for id in 0..n {
            let h = to_host(r.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: id, m_tmsi: None }));
            per_host[h.0 as usize] += 1;
        }
        per_host
    }

    #[test]
    fn skewed_ch_avoids_a_host_that_reports_overload() {
        let t0 = Instant::now();
        let mut r = router(Scheme::SkewedCh, &[1, 2, 3]);
        // Host 1 reports a queue far beyond any SLO (Eq. 1), 2 and 3 some load.
        r.report(t0, HostId(1), report(1e6));
        r.report(t0, HostId(2), report(0.0));
        r.report(t0, HostId(3), report(0.0));
        let per_host = attaches(&mut r, 300);
        assert_eq!(per_host[1], 0, "{per_host:?}");
        assert_eq!(per_host[2] + per_host[3], 300);
        // The same reports under plain CH change nothing.
        let mut ch = router(Scheme::ConsistentHashing, &[1, 2, 3]);
        ch.report(t0, HostId(1), report(1e6));
        assert!(attaches(&mut ch, 300)[1] > 0);
    }

    #[test]
    fn a_host_whose_reports_stop_is_stale_until_it_reports_again() {
        let t0 = Instant::now();
        let mut r = router(Scheme::SkewedCh, &[1, 2]).with_report_staleness(Duration::from_secs(1));
        r.report(t0, HostId(1), report(0.0));
        r.report(t0, HostId(2), report(0.0));
        assert!(r.expire_reports(t0 + Duration::from_millis(900)).is_empty());
        // Host 2 goes on reporting; host 1 stops.
        r.report(t0 + Duration::from_millis(900), HostId(2), report(0.0));
        assert_eq!(r.expire_reports(t0 + Duration::from_millis(1500)), vec![HostId(1)]);
        assert!(r.expire_reports(t0 + Duration::from_millis(1600)).is_empty(), "once");
        assert_eq!(attaches(&mut r, 200)[1], 0, "a stale host is not viable");
        // Every host stale: the least q/c is still a host (Algorithm 1's fallback).
        assert_eq!(r.expire_reports(t0 + Duration::from_secs(3)), vec![HostId(2)]);
        let all = attaches(&mut r, 10);
        assert_eq!(all[1] + all[2], 10);
        // Reporting again makes it viable again.
        r.report(t0 + Duration::from_secs(3), HostId(1), report(0.0));
        assert!(attaches(&mut r, 200)[1] > 0);
        // A host that never reported is not stale: it counts as idle.
        let mut fresh = router(Scheme::SkewedCh, &[1, 2]);
        assert!(fresh.expire_reports(t0 + Duration::from_secs(60)).is_empty());
    }

    #[test]
    fn identifiers_go_to_the_host_they_carry() {
        let mut r = router(Scheme::ConsistentHashing, &[1, 2, 3]);
        assert_eq!(r.route(UeName::MmeUeS1apId(0x0200_1234)), Ok(Dest::Host(HostId(2))));
        let initial = UeName::Initial { enb: 7, enb_ue_s1ap_id: 9, m_tmsi: Some(0x03ab_cdef) };
        assert_eq!(r.route(initial), Ok(Dest::Host(HostId(3))));
        assert_eq!(r.stats.by_owner, 2);
    }

    #[test]
    fn new_ues_are_spread_by_the_balancer_deterministically() {
        let mut r = router(Scheme::ConsistentHashing, &[1, 2, 3]);
        let mut per_host = [0u32; 4];
        for id in 0..300 {
            let h = to_host(r.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: id, m_tmsi: None }));
            per_host[h.0 as usize] += 1;
            let again = to_host(router(Scheme::ConsistentHashing, &[3, 2, 1]).route(UeName::Initial {
                enb: 1,
                enb_ue_s1ap_id: id,
                m_tmsi: None,
            }));
            assert_eq!(h, again, "the same choice whatever the order hosts came up in");
        }
        assert_eq!(per_host[0], 0);
        assert!(per_host[1..].iter().all(|&n| n > 50), "{per_host:?}");
        assert_eq!(r.stats.balanced, 300);
    }

    /// Identifier `low` of host `host`, replica group `group`.
    fn ident(host: u32, group: u8, low: u16) -> u32 {
        host << 24 | u32::from(group) << 16 | u32::from(low)
    }

    #[test]
    fn every_identifier_of_a_gone_hosts_ue_reaches_its_groups_heir_and_the_groups_spread() {
        for scheme in Scheme::ALL {
            let mut r = router(scheme, &[1, 2, 3]);
            let handovers = r.host_down(HostId(2));
            let heirs = r.heirs_of(HostId(2), Groups::ALL);
            assert_eq!(heirs.iter().map(|h| h.0).collect::<Vec<_>>(), [HostId(1), HostId(3)], "{scheme}");
            // The dead host's UEs spread: about half the groups each.
            assert!(heirs.iter().all(|(_, g)| g.len() > 80), "{scheme}: {heirs:?}");
            let inherited: Vec<_> = handovers.iter().map(|h| (h.heir, h.groups)).collect();
            assert_eq!(inherited, heirs);
            assert!(handovers.iter().all(|h| h.gone == HostId(2) && h.inherit));
            for g in 0..=255u8 {
                let heir = r.heir(HostId(2), g).unwrap();
                assert_ne!(heir, HostId(2));
                for low in [0u16, 1, 0x1234, 0xffff] {
                    let id = ident(2, g, low);
                    assert_eq!(r.route(UeName::MmeUeS1apId(id)), Ok(Dest::Host(heir)));
                    let initial = UeName::Initial { enb: 1, enb_ue_s1ap_id: 7, m_tmsi: Some(id) };
                    assert_eq!(r.route(initial), Ok(Dest::Host(heir)), "both names of one UE, one heir");
                }
            }
            // The others' UEs stay where they are; new UEs avoid the gone host.
            assert_eq!(r.route(UeName::MmeUeS1apId(0x0100_0001)), Ok(Dest::Host(HostId(1))));
            assert_eq!(r.route(UeName::MmeUeS1apId(0x0300_0001)), Ok(Dest::Host(HostId(3))));
            for id in 0..100 {
                let h = to_host(r.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: id, m_tmsi: None }));
                assert_ne!(h, HostId(2), "{scheme}");
            }
            assert_eq!(r.stats.to_heir, 256 * 8);
        }
    }

    #[test]
    fn imsis_spread_over_the_groups_and_identifiers_carry_theirs() {
        let mut per_group = [0u32; 256];
        for i in 0..25_600u64 {
            per_group[usize::from(imsi_group(&format!("00101{i:010}")))] += 1;
        }
        // 100 per group on average: none empty, none far beyond.
        assert!(per_group.iter().all(|&n| (40..=180).contains(&n)), "{per_group:?}");
        assert_ne!(imsi_group("001010000000001"), imsi_group("00101000000001"), "lengths apart");
        assert_eq!((owner(0x07ab_1234), replica_group(0x07ab_1234)), (HostId(7), 0xab));
    }

    #[test]
    fn gone_hosts_heirs_are_live_hosts_and_none_without_hosts() {
        let mut r = router(Scheme::ConsistentHashing, &[1, 2, 3, 4]);
        r.host_down(HostId(4));
        let first = r.heir(HostId(4), 9).unwrap();
        assert_eq!(r.heir(HostId(4), 9), Some(first), "stable");
        // That heir goes too: both gone hosts' UEs go to live hosts.
        r.host_down(first);
        for gone in [HostId(4), first] {
            for g in 0..=255u8 {
                assert!(r.is_live(r.heir(gone, g).unwrap()));
            }
        }
        for h in [1, 2, 3] {
            r.host_down(HostId(h));
        }
        assert_eq!(r.heir(HostId(4), 9), None);
        assert!(r.route(UeName::MmeUeS1apId(0x0100_0001)).is_err());
        assert!(r.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: 1, m_tmsi: None }).is_err());
        assert_eq!(r.stats.no_host, 2);
    }

    #[test]
    fn each_host_replicates_each_group_to_the_host_that_would_be_its_heir() {
        let mut r = router(Scheme::ConsistentHashing, &[1, 2, 3]);
        type Told = BTreeMap<HostId, Vec<(HostId, Groups)>>;
        let told: Told = r.replica_changes().into_iter().collect();
        assert_eq!(told.len(), 3, "every host is told once");
        for (&h, targets) in &told {
            // Both other hosts, every group at exactly one of them.
            assert_eq!(targets.len(), 2, "{h}: {targets:?}");
            assert!(targets.iter().all(|(t, _)| *t != h), "never itself");
            assert_eq!(targets.iter().map(|(_, g)| g.len()).sum::<usize>(), 256);
            assert_eq!(targets.iter().flat_map(|(_, g)| g.iter()).collect::<Groups>(), Groups::ALL);
        }
        assert!(r.replica_changes().is_empty(), "nothing changed");
        // Whichever host goes, each group's heir is the host it replicated
        // that group to.
        for gone in [1, 2, 3] {
            let mut r2 = router(Scheme::ConsistentHashing, &[1, 2, 3]);
            r2.host_down(HostId(gone));
            for (t, groups) in &told[&HostId(gone)] {
                assert!(groups.iter().all(|g| r2.heir(HostId(gone), g) == Some(*t)));
            }
        }
        // A host goes: those that replicated to it are told their new
        // replica hosts (seeded with a full copy then).
        r.host_down(HostId(2));
        let changed: Told = r.replica_changes().into_iter().collect();
        assert_eq!(changed[&HostId(1)], [(HostId(3), Groups::ALL)]);
        assert_eq!(changed[&HostId(3)], [(HostId(1), Groups::ALL)]);
        // A host joins: it is told, and so is any host some of whose
        // groups now go to it.
        r.host_up(HostId(4));
        let changed: Told = r.replica_changes().into_iter().collect();
        assert!(changed.contains_key(&HostId(4)));
        for (h, t) in &changed {
            assert_eq!(&r.replica_hosts(*h), t);
        }
        // A lone host replicates to none.
        let mut lone = router(Scheme::ConsistentHashing, &[5]);
        assert_eq!(lone.replica_changes(), [(HostId(5), vec![])]);
    }

    #[test]
    fn with_two_failures_survived_a_host_and_its_heir_going_leave_its_ues_where_a_copy_is() {
        for n in 3..12u32 {
            let hosts: Vec<u32> = (1..=n).collect();
            let r = router(Scheme::ConsistentHashing, &hosts).with_replicas(2);
            let single = router(Scheme::ConsistentHashing, &hosts);
            for &h in &hosts {
                for g in (0..=255u8).step_by(37) {
                    let t = r.replica_hosts_of(HostId(h), g);
                    assert!((2..=3).contains(&t.len()) && !t.contains(&HostId(h)), "{t:?}");
                    assert_eq!(t[..1], single.replica_hosts_of(HostId(h), g), "the heir first");
                    // The host and its heir go, in either order: the host
                    // serving the host's UEs then holds a copy of its records.
                    for host_first in [true, false] {
                        let mut r2 = router(Scheme::ConsistentHashing, &hosts).with_replicas(2);
                        let order = if host_first { [HostId(h), t[0]] } else { [t[0], HostId(h)] };
                        for gone in order {
                            r2.host_down(gone);
                        }
                        let serving = r2.heir(HostId(h), g).unwrap();
                        assert!(t.contains(&serving), "{n} hosts, {order:?} gone: {serving:?} not in {t:?}");
                    }
                }
            }
        }
        let two = router(Scheme::ConsistentHashing, &[1, 2]).with_replicas(2);
        assert_eq!(two.replica_hosts(HostId(1)), [(HostId(2), Groups::ALL)]);
        let one = router(Scheme::ConsistentHashing, &[1, 2, 3]);
        assert_eq!(one.replica_hosts_of(HostId(1), 0).len(), 1);
    }

    #[test]
    fn a_gone_hosts_heirs_stay_when_hosts_join_and_an_heirs_own_heirs_follow_it() {
        // Over several seeds of membership, the heirs of a gone host are
        // fixed when it goes, whatever joins later.
        for extra in 4..40u32 {
            let mut r = router(Scheme::ConsistentHashing, &[1, 2, 3]);
            r.host_down(HostId(2));
            let before: Vec<HostId> = (0..=255u8).map(|g| r.heir(HostId(2), g).unwrap()).collect();
            r.host_up(HostId(extra));
            for g in 0..=255u8 {
                assert_eq!(r.heir(HostId(2), g), Some(before[usize::from(g)]), "joining {extra} moves nothing");
            }
            let g = (extra * 7) as u8;
            let heir = before[usize::from(g)];
            assert_eq!(r.route(UeName::MmeUeS1apId(ident(2, g, 1))), Ok(Dest::Host(heir)));
            // That heir goes: for each group, its heir serves both hosts'
            // UEs, inheriting its own and adopting the others'.
            let theirs: Groups = (0..=255u8).filter(|&g| before[usize::from(g)] == heir).collect();
            let handovers = r.host_down(heir);
            assert!(handovers.iter().all(|h| h.gone == heir || h.gone == HostId(2)));
            assert_eq!(handovers.iter().filter(|h| h.inherit).map(|h| h.groups.len()).sum::<usize>(), 256);
            let adopted: Vec<&Handover> = handovers.iter().filter(|h| !h.inherit).collect();
            assert!(adopted.iter().all(|h| h.gone == HostId(2)));
            assert_eq!(adopted.iter().flat_map(|h| h.groups.iter()).collect::<Groups>(), theirs);
            for g in theirs.iter() {
                assert_eq!(r.heir(HostId(2), g), r.heir(heir, g));
                assert!(r.is_live(r.heir(heir, g).unwrap()));
            }
        }
    }

    #[test]
    fn a_dead_hosts_unhandled_initial_ue_message_goes_again_to_the_heir_of_its_group() {
        let mut r = router(Scheme::ConsistentHashing, &[1, 2, 3]);
        r.host_down(HostId(2));
        for g in [0u8, 9, 200] {
            let attach = UeName::Initial { enb: 1, enb_ue_s1ap_id: 7, m_tmsi: None };
            assert_eq!(r.route_again(HostId(2), attach, g), Ok(Dest::Host(r.heir(HostId(2), g).unwrap())));
        }
        // Any other message by its identifiers, as ever.
        let by_id = UeName::MmeUeS1apId(ident(3, 9, 1));
        assert_eq!(r.route_again(HostId(2), by_id, 200), Ok(Dest::Host(HostId(3))));
        let idle = UeName::Initial { enb: 1, enb_ue_s1ap_id: 8, m_tmsi: Some(ident(2, 9, 4)) };
        assert_eq!(r.route_again(HostId(2), idle, 200), Ok(Dest::Host(r.heir(HostId(2), 9).unwrap())));
    }

    #[test]
    fn a_gone_hosts_number_is_refused_and_its_ues_stay_with_their_heirs() {
        let mut r = router(Scheme::ConsistentHashing, &[1, 2, 3]);
        r.host_down(HostId(2));
        let heirs: Vec<Option<HostId>> = (0..=255u8).map(|g| r.heir(HostId(2), g)).collect();
        assert!(r.is_gone(HostId(2)) && !r.is_gone(HostId(1)) && !r.is_gone(HostId(4)));
        // A process restarted under the dead host's number.
        assert!(!r.host_up(HostId(2)));
        assert!(!r.is_live(HostId(2)));
        assert_eq!((0..=255u8).map(|g| r.heir(HostId(2), g)).collect::<Vec<_>>(), heirs);
        for g in [0u8, 77, 255] {
            assert_eq!(r.serving_id(ident(2, g, 1)), heirs[usize::from(g)]);
        }
        assert_eq!(attaches(&mut r, 100)[2], 0, "no new UE on it");
        // A new number is welcome; a live one again changes nothing.
        assert!(r.host_up(HostId(4)) && r.is_live(HostId(4)));
        assert!(r.host_up(HostId(4)));
    }

    #[test]
    fn a_host_that_comes_up_later_takes_new_ues_and_the_others_keep_theirs() {
        let mut r = router(Scheme::ConsistentHashing, &[1, 2]);
        assert_eq!(attaches(&mut r, 300)[3], 0);
        r.host_up(HostId(3));
        assert!(attaches(&mut r, 300)[3] > 50, "new UEs on the new host");
        assert_eq!(r.route(UeName::MmeUeS1apId(0x0100_0001)), Ok(Dest::Host(HostId(1))));
        let idle = UeName::Initial { enb: 1, enb_ue_s1ap_id: 5, m_tmsi: Some(0x0200_0009) };
        assert_eq!(r.route(idle), Ok(Dest::Host(HostId(2))));
    }

    #[test]
    fn a_draining_host_finishes_its_connections_holds_new_procedures_then_hands_its_ues_to_its_heir() {
        let mut r = router(Scheme::ConsistentHashing, &[1, 2, 3]);
        assert!(r.drain(HostId(2)));
        assert!(!r.drain(HostId(2)), "once");
        assert!(r.is_draining(HostId(2)) && r.is_live(HostId(2)));
        // No new UE on it.
        assert_eq!(attaches(&mut r, 300)[2], 0);
        // Its S1 connections' messages and the S-GW's requests still go there.
        assert_eq!(r.route(UeName::MmeUeS1apId(0x0200_0001)), Ok(Dest::Host(HostId(2))));
        let now = Instant::now();
        assert_eq!(r.route_s11(now, S11From::Sgw, request(0x0200_0001, 1)), Ok(S11Route::Host(HostId(2))));
        // A new procedure of its UEs waits.
        let idle = UeName::Initial { enb: 1, enb_ue_s1ap_id: 5, m_tmsi: Some(0x0200_0009) };
        assert_eq!(r.route(idle), Ok(Dest::Hold(HostId(2))));
        assert_eq!(r.stats.held, 1);
        // Drained: every identifier of it goes to one heir, a live host.
        r.host_down(HostId(2));
        let heir = r.heir(HostId(2), 0).unwrap();
        assert_ne!(heir, HostId(2));
        assert_eq!(r.route(idle), Ok(Dest::Host(heir)));
        assert_eq!(r.route(UeName::MmeUeS1apId(0x0200_0001)), Ok(Dest::Host(heir)));
        // The last host serving new UEs is not drained.
        assert!(r.drain(HostId(1)));
        assert!(!r.drain(HostId(3)), "the only one left for new UEs");
        assert!(!r.drain(HostId(9)), "not a host");
    }

    fn request(teid: u32, seq: u32) -> S11Header {
        S11Header { initial: true, teid: Some(teid), seq }
    }

    fn response(teid: u32, seq: u32) -> S11Header {
        S11Header { initial: false, teid: Some(teid), seq }
    }

    #[test]
    fn s11_requests_of_the_sgw_go_to_the_teids_host_or_its_heir_and_answers_back() {
        let mut r = router(Scheme::ConsistentHashing, &[1, 2, 3]);
        let now = Instant::now();
        // A DDN for a UE of host 2 (TEID = its MME-UE-S1AP-ID).
        assert_eq!(r.route_s11(now, S11From::Sgw, request(0x0200_0007, 40)), Ok(S11Route::Host(HostId(2))));
        // Only host 2's answer goes back, once.
        let ack = response(0x0300_0001, 40);
        assert_eq!(r.route_s11(now, S11From::Host(HostId(3)), ack), Err(S11Drop::Unsolicited));
        assert_eq!(r.route_s11(now, S11From::Host(HostId(2)), ack), Ok(S11Route::Sgw));
        assert_eq!(r.route_s11(now, S11From::Host(HostId(2)), ack), Err(S11Drop::Unsolicited));
        assert_eq!(r.s11_pending(), 0);

        // Host 2 gone: its UEs' DDNs (and a retransmission) go to its heir.
        r.host_down(HostId(2));
        let heir = r.heir(HostId(2), 0).unwrap();
        assert_eq!(r.route_s11(now, S11From::Sgw, request(0x0200_0007, 41)), Ok(S11Route::Host(heir)));
        assert_eq!(r.route_s11(now, S11From::Sgw, request(0x0200_0007, 41)), Ok(S11Route::Host(heir)));
        assert_eq!(r.route_s11(now, S11From::Host(heir), response(0x0200_0007, 41)), Ok(S11Route::Sgw));
        // No TEID, or TEID 0: nobody's.
        let no_teid = S11Header { initial: true, teid: None, seq: 42 };
        assert_eq!(r.route_s11(now, S11From::Sgw, no_teid), Err(S11Drop::NoTeid));
        assert_eq!(r.route_s11(now, S11From::Sgw, request(0, 42)), Err(S11Drop::NoTeid));
        assert_eq!((r.stats.s11_to_host, r.stats.s11_to_sgw, r.stats.s11_dropped), (3, 2, 4));
    }

    #[test]
    fn s11_requests_of_hosts_are_renumbered_and_responses_go_back_under_the_hosts_numbers() {
        use S11Route::{HostAs, SgwAs};
        let hold = Duration::from_secs(20);
        let mut r = router(Scheme::ConsistentHashing, &[1, 2, 3]).with_s11_relayed(3, hold);
        let t0 = Instant::now();
        let number = |r: &mut Router, at, host, h| match r.route_s11(at, S11From::Host(HostId(host)), h) {
            Ok(SgwAs(seq)) => seq,
            other => panic!("{other:?}"),
        };
        // Two hosts' requests under the same number of theirs: two numbers.
        let a = number(&mut r, t0, 3, request(0x8000_0001, 7));
        let b = number(&mut r, t0, 1, request(0x8000_0002, 7));
        assert!(a != b && a <= 0xff_ffff && b <= 0xff_ffff);
        // A retransmission keeps its number.
        assert_eq!(number(&mut r, t0, 3, request(0x8000_0001, 7)), a);
        // The response goes to the host that sent the request, under its
        // number, whatever the TEID (Context Not Found comes on TEID 0, TS
        // 29.274 5.5.2); so does the S-GW's answer to a late retransmission.
        assert_eq!(r.route_s11(t0, S11From::Sgw, response(0, a)), Ok(HostAs(HostId(3), 7)));
        assert_eq!(r.route_s11(t0, S11From::Sgw, response(0x0300_0001, a)), Ok(HostAs(HostId(3), 7)));
        assert_eq!(r.route_s11(t0, S11From::Sgw, response(0, b)), Ok(HostAs(HostId(1), 7)));
        assert_eq!(r.route_s11(t0, S11From::Sgw, response(0, b + 1000)), Err(S11Drop::UnknownResponse));
        // Bounded: a third is relayed, a fourth not until the first expire.
        number(&mut r, t0, 2, request(1, 9));
        assert_eq!(r.route_s11(t0, S11From::Host(HostId(2)), request(1, 10)), Err(S11Drop::RelayFull));
        let later = t0 + hold + Duration::from_millis(1);
        assert_eq!(r.route_s11(later, S11From::Sgw, response(0, a)), Err(S11Drop::UnknownResponse));
        let d = number(&mut r, later, 3, request(1, 10));
        // Not to an heir: only the sender holds the transaction.
        r.host_down(HostId(3));
        assert_eq!(r.route_s11(later, S11From::Sgw, response(0, d)), Err(S11Drop::HostGone));
        // Numbers come round within 24 bits, past those in use.
        r.s11_relayed.max = 8;
        r.s11_relayed.last = 0xff_fffe;
        assert_eq!(number(&mut r, later, 1, request(1, 11)), 0xff_ffff);
        assert_eq!(number(&mut r, later, 1, request(1, 12)), 0);
        r.s11_relayed.last = d - 1;
        assert_eq!(number(&mut r, later, 1, request(1, 13)), d + 1);
    }

    #[test]
    fn s11_pending_requests_are_bounded_in_number_and_time() {
        let hold = Duration::from_secs(20);
        let mut r = router(Scheme::ConsistentHashing, &[1, 2]).with_s11_pending(2, hold);
        let t0 = Instant::now();
        for seq in 1..=2 {
            assert_eq!(r.route_s11(t0, S11From::Sgw, request(0x0100_0001, seq)), Ok(S11Route::Host(HostId(1))));
        }
        assert_eq!(r.route_s11(t0, S11From::Sgw, request(0x0100_0001, 3)), Err(S11Drop::Full));
        // A retransmission of one held is no new entry.
        assert_eq!(r.route_s11(t0, S11From::Sgw, request(0x0100_0001, 2)), Ok(S11Route::Host(HostId(1))));
        assert_eq!(r.s11_pending(), 2);
        // Unanswered past the hold: forgotten, a late answer goes nowhere.
        let later = t0 + hold + Duration::from_secs(1);
        assert_eq!(r.route_s11(later, S11From::Sgw, request(0x0100_0001, 3)), Ok(S11Route::Host(HostId(1))));
        assert_eq!(r.s11_pending(), 1);
        assert_eq!(r.route_s11(later, S11From::Host(HostId(1)), response(1, 1)), Err(S11Drop::Unsolicited));
        // Answered ones and retransmissions leave stale entries: bounded too.
        for seq in 10..1000 {
            r.route_s11(later, S11From::Sgw, request(0x0100_0001, seq)).ok();
            r.route_s11(later, S11From::Host(HostId(1)), response(1, seq)).ok();
        }
        assert!(r.s11.order.len() <= 5, "{}", r.s11.order.len());
        assert!(r.s11_pending() <= 2);
    }

    /// Routes UE `m`'s INITIAL UE MESSAGEs until one is placed away from
    /// its owner's host (round robin binds the UE to its first pick: host
    /// 1 on a fresh router).
    fn placed_away(r: &mut Router, m: u32) -> HostId {
        for e in 0..8 {
            let h = to_host(r.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: e, m_tmsi: Some(m) }));
            if h != owner(m) {
                return h;
            }
        }
        panic!("never placed away from {:?}", owner(m));
    }

    /// A UE whose procedure was placed on another host, which has not
    /// said it holds it yet, is named to the heirs of its group when its
    /// owner's host goes, so that none loads it: it is the other host's.
    #[test]
    fn an_unconfirmed_placement_is_named_to_the_heirs_of_a_gone_owner() {
        let mut r = router(Scheme::RoundRobin, &[1, 2, 3]).placing_procedures(16);
        let m = ident(2, 0x34, 5);
        let x = placed_away(&mut r, m);
        assert!(r.held_away(HostId(2), Groups::ALL).is_empty(), "not held yet");
        assert_eq!(r.placed_away(HostId(2), Groups::one(0x34)), [m]);
        assert!(r.placed_away(HostId(2), Groups::one(0x35)).is_empty(), "another group's heirs");
        r.host_down(HostId(2));
        assert_eq!(r.placed_away(HostId(2), Groups::ALL), [m], "its heirs are told after it went");
        // Confirmed: named by its MME-UE-S1AP-ID instead.
        let id = ident(2, 0x34, 9);
        assert!(r.holding(x, id, Some(m)));
        assert!(r.placed_away(HostId(2), Groups::ALL).is_empty());
        assert_eq!(r.held_away(HostId(2), Groups::ALL), [id]);
    }

    #[test]
    fn a_procedure_placed_away_from_the_owner_is_followed_until_released() {
        let mut r = router(Scheme::RoundRobin, &[1, 2, 3]).placing_procedures(16);
        let (id, m) = (0x0200_0007, 0x0200_0005);
        let x = placed_away(&mut r, m);
        assert_eq!(r.stats.placed_away, 1);
        // Until the host names the UE's MME-UE-S1AP-ID, by M-TMSI only.
        assert_eq!(to_host(r.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: 9, m_tmsi: Some(m) })), x);
        assert_eq!(to_host(r.route(UeName::MmeUeS1apId(id))), HostId(2));
        assert!(r.holding(x, id, Some(m)));
        assert_eq!(to_host(r.route(UeName::MmeUeS1apId(id))), x);
        // The S-GW's request for it, by its S11 TEID, goes there too.
        let now = Instant::now();
        assert_eq!(r.route_s11(now, S11From::Sgw, request(id, 0x10)), Ok(S11Route::Host(x)));
        assert_eq!(r.route_s11(now, S11From::Host(x), response(0, 0x10)), Ok(S11Route::Sgw));
        assert_eq!(r.holds(), 1);
        // Done: the owner's host reads it again, and has its messages.
        let other = [1, 3].map(HostId).into_iter().find(|&h| h != x).unwrap();
        assert_eq!(r.released(other, id), None);
        assert_eq!(r.released(x, id), Some(HostId(2)));
        assert_eq!(r.holds(), 0);
        assert_eq!(to_host(r.route(UeName::MmeUeS1apId(id))), HostId(2));
        assert_eq!(r.frontend.in_progress(), 0);
    }

    /// Two hosts hold one UE at once (the owner's host's timer fired as
    /// the UE was placed away; the store keeps one of them): its messages
    /// go to the host it was placed at, whichever said so first, and the
    /// release of either leaves it held by the other, with no refresh
    /// until the last.
    #[test]
    fn a_ue_two_hosts_hold_goes_to_the_host_it_was_placed_at() {
        let by_id = |r: &mut Router, id| to_host(r.route(UeName::MmeUeS1apId(id)));
        let by_m = |r: &mut Router, m| to_host(r.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: 9, m_tmsi: Some(m) }));
        let mut r = router(Scheme::RoundRobin, &[1, 2, 3]).placing_procedures(16);
        let (id, m, home) = (0x0200_0007, 0x0200_0005, HostId(2));
        // The visitor holds it first; the owner's copy lost, and lets go.
        let x = placed_away(&mut r, m);
        assert!(r.holding(x, id, Some(m)));
        assert!(r.holding(home, id, Some(m)));
        assert_eq!(r.stats.holds_contested, 1);
        assert_eq!((by_id(&mut r, id), by_m(&mut r, m)), (x, x));
        assert_eq!(r.released(home, id), None, "still held");
        assert_eq!((by_id(&mut r, id), by_m(&mut r, m)), (x, x));
        assert_eq!(r.released(x, id), Some(home));
        assert_eq!(r.holds(), 0);
        // The owner's host first; the visitor's claim won, the owner lets go.
        let x = placed_away(&mut r, m);
        assert!(r.holding(home, id, Some(m)));
        assert_eq!(by_id(&mut r, id), home);
        assert!(r.holding(x, id, Some(m)));
        assert_eq!((by_id(&mut r, id), by_m(&mut r, m)), (x, x), "the S1 connection is there");
        assert_eq!(r.released(home, id), None);
        assert_eq!((by_id(&mut r, id), by_m(&mut r, m)), (x, x), "the visitor's now");
        // The visitor goes while holding it: its owner's host reads it again.
        r.host_down(x);
        assert_eq!(r.take_refreshes(), [(home, id)]);
        assert_eq!(r.holds(), 0);
    }

    #[test]
    fn the_owners_host_is_told_of_a_placement_away_and_of_one_no_host_took() {
        let mut r = router(Scheme::RoundRobin, &[1, 2, 3]).placing_procedures(1 << 20);
        let (id, m) = (0x0200_0007, 0x0200_0005);
        // Placed at home: nothing to tell.
        assert_eq!(to_host(r.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: 0, m_tmsi: Some(m) })), HostId(1));
        let x = placed_away(&mut r, m);
        assert_eq!(r.take_lends(), vec![(HostId(2), Lend::Lent(m))]);
        assert!(r.take_lends().is_empty());
        // Confirmed by the host: its end is a refresh, not a return.
        assert!(r.holding(x, id, Some(m)));
        assert_eq!(r.released(x, id), Some(HostId(2)));

        // Placed again; its host goes before saying it holds the UE: the
        // owner's host reads it again.
        let y = placed_away(&mut r, m);
        assert_eq!(r.take_lends(), vec![(HostId(2), Lend::Lent(m))]);
        r.host_down(y);
        assert_eq!(r.take_lends(), vec![(HostId(2), Lend::Returned(m))]);
        assert!(r.take_refreshes().is_empty());
        assert_eq!(r.holds(), 0);
        assert_eq!(r.stats.placements_returned, 1);

        // S-TMSIs no host knows (never confirmed): the oldest are returned
        // beyond the bound, so the table never fills with them.
        let mut r = router(Scheme::RoundRobin, &[1, 2, 3]).placing_procedures(64);
        for m in 1..=100 {
            r.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: m, m_tmsi: Some(0x0200_0000 | m) }).unwrap();
        }
        // Round robin: 2 in 3 away from host 2.
        assert_eq!(r.stats.placed_away, 67);
        assert_eq!(r.holds(), 32);
        assert!(r.frontend.in_progress() <= 32);
        assert_eq!(r.stats.placements_returned, 35);
        let lends = r.take_lends();
        assert!(lends.iter().all(|(h, _)| *h == HostId(2)));
        let returned: Vec<Lend> =
            lends.into_iter().map(|(_, l)| l).filter(|l| matches!(l, Lend::Returned(_))).collect();
        assert_eq!(returned.len(), 35);
        assert_eq!(returned[0], Lend::Returned(0x0200_0001));
    }

    #[test]
    fn with_local_stores_only_procedures_keeping_identifiers_are_placed_and_only_on_copies() {
        let mut r = router(Scheme::RoundRobin, &[1, 2, 3, 4]).placing_procedures(1 << 10);
        r.local_stores();
        // Host 2's copies of group 0 (every identifier below is of it).
        let copies = r.replica_hosts_of(HostId(2), 0);
        assert_eq!(copies.len(), 1);
        let allowed = [HostId(2), copies[0]];
        let initial = |e: u32, m: u32| UeName::Initial { enb: 1, enb_ue_s1ap_id: e, m_tmsi: Some(m) };
        let mut away = 0;
        for e in 0..24 {
            let m = 0x0200_0000 | e;
            let kind = LOCALLY_PLACED[e as usize % 3];
            let h = to_host(r.route_as(initial(e, m), Some(kind)));
            assert!(allowed.contains(&h), "{h:?} holds no copy of host 2's store");
            away += u32::from(h != HostId(2));
        }
        assert!(away > 0, "round robin reaches the replica host");
        assert_eq!(r.stats.placed_away, u64::from(away));
        // An attach by S-TMSI, or a procedure not known, goes home.
        let m = 0x0200_1000;
        for kind in [Some(ProcedureKind::Attach), None] {
            for e in 0..4 {
                assert_eq!(to_host(r.route_as(initial(e, m), kind)), HostId(2));
            }
        }
        assert_eq!(r.stats.placed_away, u64::from(away));

        // A visitor without the UE in its copy gives it back: home.
        let m = 0x0200_2000;
        let x = (0..8)
            .map(|e| to_host(r.route_as(initial(e, m), Some(ProcedureKind::ServiceRequest))))
            .find(|&h| h != HostId(2))
            .unwrap();
        assert!(!r.bounced(HostId(2), m), "not placed there");
        let before = r.frontend.in_progress();
        assert!(r.bounced(x, m));
        assert_eq!(r.frontend.in_progress(), before - 1);
        for e in 9..13 {
            assert_eq!(to_host(r.route_home(initial(e, m))), HostId(2), "not placed again");
        }
        assert!(!r.bounced(x, m), "once");
        assert_eq!(r.stats.placements_bounced, 1);
    }

    #[test]
    fn a_ue_held_at_its_owners_host_is_not_placed_elsewhere_until_released() {
        // Its release not yet done there, the UE's next procedure starts.
        let mut r = router(Scheme::RoundRobin, &[1, 2, 3]).placing_procedures(16);
        let (id, m) = (0x0200_0007, 0x0200_0005);
        assert!(r.holding(HostId(2), id, Some(m)));
        for e in 0..6 {
            assert_eq!(to_host(r.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: e, m_tmsi: Some(m) })), HostId(2));
        }
        assert_eq!(r.stats.placed_away, 0);
        // At rest at home: nothing to read again.
        assert_eq!(r.released(HostId(2), id), None);
        assert_ne!(placed_away(&mut r, m), HostId(2));
    }

    #[test]
    fn a_hosts_held_ues_go_back_to_their_owners_host_when_it_goes() {
        let mut r = router(Scheme::RoundRobin, &[1, 2, 3]).placing_procedures(16);
        let (id, m) = (0x0200_0007, 0x0200_0005);
        let x = placed_away(&mut r, m);
        assert!(r.holding(x, id, Some(m)));
        // A UE of x's own held there: its heir adopts it, no refresh.
        let own = (x.0 << 24) | 1;
        assert!(r.holding(x, own, None));
        assert_eq!(r.held_away(HostId(2), Groups::ALL), vec![id]);
        assert!(r.held_away(HostId(2), Groups::one(1)).is_empty(), "of group 0");
        assert!(r.host_down(x).iter().all(|h| h.gone == x && h.inherit));
        assert_eq!(r.take_refreshes(), vec![(HostId(2), id)]);
        assert!(r.take_refreshes().is_empty());
        assert!(r.held_away(HostId(2), Groups::ALL).is_empty());
        assert_eq!(to_host(r.route(UeName::MmeUeS1apId(id))), HostId(2));
        assert_eq!(Some(to_host(r.route(UeName::MmeUeS1apId(own)))), r.heir(x, 0));
    }

    #[test]
    fn a_host_holding_a_ue_it_was_not_placed_at_is_followed() {
        // A visited host reallocated the UE's GUTI: its next procedure
        // comes by that host's M-TMSI, its messages by its owner's ID.
        let mut r = router(Scheme::ConsistentHashing, &[1, 2, 3]).placing_procedures(16);
        let (id, m) = (0x0100_0007, 0x0300_0005);
        assert!(r.holding(HostId(3), id, Some(m)));
        assert_eq!(to_host(r.route(UeName::MmeUeS1apId(id))), HostId(3));
        assert_eq!(to_host(r.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: 1, m_tmsi: Some(m) })), HostId(3));
        // Held, its GUTI reallocated again: either M-TMSI reaches it.
        let m2 = 0x0300_0099;
        assert!(r.holding(HostId(3), id, Some(m2)));
        for mm in [m, m2] {
            assert_eq!(to_host(r.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: 2, m_tmsi: Some(mm) })), HostId(3));
        }
        assert_eq!(r.released(HostId(3), id), Some(HostId(1)));
        assert_eq!(r.holds(), 0);
        assert_eq!(to_host(r.route(UeName::MmeUeS1apId(id))), HostId(1));
        // Placement off: nothing is tracked.
        let mut off = router(Scheme::ConsistentHashing, &[1, 2, 3]);
        assert!(!off.holding(HostId(3), id, Some(m)));
        assert_eq!(off.stats.holds_full, 0);
    }

    #[test]
    fn without_per_procedure_placement_or_room_a_ue_stays_on_its_owners_host() {
        let m = 0x0200_0005;
        let mut off = router(Scheme::RoundRobin, &[1, 2, 3]);
        for e in 0..6 {
            assert_eq!(to_host(off.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: e, m_tmsi: Some(m) })), HostId(2));
        }
        assert_eq!(off.stats.placed_away, 0);
        let mut full = router(Scheme::RoundRobin, &[1, 2, 3]).placing_procedures(1);
        placed_away(&mut full, 0x0200_0009);
        for e in 0..6 {
            assert_eq!(to_host(full.route(UeName::Initial { enb: 1, enb_ue_s1ap_id: e, m_tmsi: Some(m) })), HostId(2));
        }
        assert_eq!(full.stats.holds_full, 6);
        assert!(!full.holding(HostId(1), 0x0200_0001, Some(m)));
    }
}
