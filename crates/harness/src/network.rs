//! [`Network`]: every sans-I/O core of the EPC wired together in memory
//! under a virtual clock.

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use mobicore_common::counters::Counters;
use mobicore_common::requester::TransportError;
use mobicore_common::sctp_api::AssocId;
use mobicore_common::Ebi;
use mobicore_elastic::HostId;
use mobicore_gtp::message::{msg_type, GtpMessage};
use mobicore_gtp::s11::{
    decode_incoming_request, decode_response, encode_incoming_answer, encode_notification, encode_request, request_ebi,
};
use mobicore_gtp::transaction::{TransactionConfig, Transactions};
use mobicore_hss::{Hss, SubscriberStore, SubscriberTemplate};
use mobicore_mme::{MmeAction, MmeConfig, MmeEvent, UeRef};
use mobicore_ran::enb::{Enb, EnbAction, EnbConfig, Outcome};
use mobicore_ran::ue::Ue;
use mobicore_ran::{imsi_for, usim_for, SubscriberPlan};
use mobicore_spgwc::{Interface, SpgwcConfig, SpgwcCore, UpfPeerConfig};
use mobicore_upf::{UpfConfig, UpfCore};

use crate::userplane::{HarnessPlane, S1uLog};

use crate::fault::{FaultAction, Faults, Link, Msg};
use crate::mme::{MmeMode, MmeUnderTest};

/// The SGW-C's S11 address (a label: nothing is bound).
pub const SGW_S11: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 2123);
/// The MME's S11 address.
pub const MME_S11: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 2124);
/// The SGW-C's PFCP address.
pub const SGW_PFCP: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 8805);
/// The UPF's PFCP address.
pub const UPF_PFCP: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), 8805);
/// The UPF's S1-U address.
pub const UPF_S1U: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// Most deliveries one [`Network::drive`] makes before it declares a
/// livelock.
const MAX_DELIVERIES: usize = 1_000_000;

/// Overrides of the default configuration of every node.
#[derive(Debug, Clone)]
pub struct NetworkConfig {
    pub plan: SubscriberPlan,
    /// SQN the HSS is provisioned with; `plan.sqn` when `None`.
    pub hss_sqn: Option<u64>,
    pub mme: MmeConfig,
    pub spgwc: SpgwcConfig,
    pub upf: UpfConfig,
    /// eNB guard timer of a UE procedure.
    pub procedure_timeout: Duration,
    pub s1_setup_timeout: Duration,
    /// Seed of the HSS's RANDs.
    pub seed: u64,
    /// S1AP outbound streams each eNB association has.
    pub streams: u16,
    /// The eNBs release a UE after this long without user-plane activity
    /// (UE Context Release Request, user inactivity); `None`: never.
    pub inactivity_timeout: Option<Duration>,
    /// eNBs per tracking area (`[ran] enbs_per_tac`): eNB `i` has TAC
    /// `1 + i / n`; `None`: TAC 1 for all.
    pub enbs_per_tac: Option<u32>,
    /// The APNs every subscriber has, the first the default; each also
    /// needs an APN of the S/P-GW-C (`spgwc.apns`). Empty: the HSS's
    /// default subscription ("internet").
    pub apns: Vec<mobicore_hss::ApnProfile>,
    /// The monolithic MME or the decomposed one (front end, router, hosts,
    /// store); by default what [`MmeMode::ENV`] names, so that every
    /// scenario runs against both.
    pub mme_mode: MmeMode,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        let mut spgwc = SpgwcConfig { s11: SGW_S11, pfcp: SGW_PFCP, ..SpgwcConfig::default() };
        spgwc.upfs = vec![UpfPeerConfig { pfcp: UPF_PFCP, s1u_addr: UPF_S1U, ..UpfPeerConfig::default() }];
        NetworkConfig {
            plan: SubscriberPlan::default(),
            hss_sqn: None,
            mme: MmeConfig { mtmsi_seed: Some(0x1000), s11_local_ip: Ipv4Addr::LOCALHOST, ..MmeConfig::default() },
            spgwc,
            upf: UpfConfig { pfcp: UPF_PFCP, node_id: UPF_S1U, s1u_addr: UPF_S1U, ..UpfConfig::default() },
            procedure_timeout: Duration::from_secs(60),
            s1_setup_timeout: Duration::from_secs(5),
            seed: 7,
            streams: 4,
            inactivity_timeout: None,
            enbs_per_tac: None,
            apns: Vec::new(),
            mme_mode: MmeMode::from_env(),
        }
    }
}

/// What an eNB reported, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    S1Setup {
        enb: usize,
        result: Result<(), String>,
    },
    Outcome {
        enb: usize,
        outcome: Outcome,
    },
    Anomaly {
        enb: usize,
        what: String,
    },
    /// The MME answered a request of the HSS (Cancel Location).
    S6aAnswer {
        answer: mobicore_common::s6a::S6aIncomingAnswer,
    },
    /// The MME answered an operator's command.
    OperatorAnswer {
        txn: u64,
        outcome: mobicore_mme::OperatorOutcome,
    },
}

/// The EPC in memory. Fields are public so that a scenario can look at
/// (and poke) any core directly.
pub struct Network {
    /// The virtual clock; only the harness advances it.
    pub now: Instant,
    pub enbs: Vec<Enb>,
    /// eNB `i` talks to the MME on association `i + 1`; `false` once
    /// disconnected.
    pub connected: Vec<bool>,
    pub mme: MmeUnderTest,
    pub hss: Hss,
    pub spgwc: SpgwcCore,
    pub upf: UpfCore,
    /// The UPF's forwarding plane (shares its table and its user-space data
    /// path with the UPF).
    pub plane: HarnessPlane,
    /// What the eNBs received on S1-U.
    pub s1u: S1uLog,
    /// Every S1AP PDU the MME delivered, with the eNB it went to.
    pub s1_downlink: Vec<(usize, Bytes)>,
    /// Each eNB's S1-U side: the emulator's tunnel table.
    pub enb_tunnels: Vec<mobicore_ran::userplane::tunnels::Tunnels>,
    /// Keeps `enb_tunnels` in step with the eNBs (the emulator's own).
    pub(crate) follower: mobicore_ran::userplane::Follower,
    /// The MME's S11 client: sequence numbers, T3/N3 retransmission; each
    /// transaction remembers the host that sent it (decomposed MME), whose
    /// answer it is.
    pub s11_client: Transactions<SocketAddr, (UeRef, Ebi, Option<HostId>)>,
    /// The S-GW's requests the MME has not answered yet, by the sequence
    /// number (the `txn`): the S-GW TEID to answer to.
    s11_incoming: HashMap<u64, u32>,
    /// The answers sent, by sequence number: a retransmitted request is
    /// answered again from here, as the S11 client task does.
    s11_answered: HashMap<u32, Bytes>,
    pub plan: SubscriberPlan,
    /// Everything eNBs reported, in order.
    pub reports: Vec<Report>,
    /// Messages delivered so far, per link order irrelevant.
    pub delivered: usize,
    pub(crate) queue: VecDeque<Msg>,
    pub(crate) held: Vec<Msg>,
    pub(crate) faults: Faults,
    n_ues: u64,
    streams: u16,
    /// The controller with its S11 relay ([`Network::enable_controller`]).
    pub controller: Option<mobicore_controller::ControllerCore>,
    /// Edge anchors ([`Network::add_edge`]).
    pub edges: Vec<crate::edge::Edge>,
    pub(crate) spgwc_config: SpgwcConfig,
    pub(crate) upf_config: mobicore_upf::config::UpfConfig,
}

impl Network {
    /// `n_enbs` eNBs with `n_ues` UEs spread round robin (UE `u` camps on
    /// eNB `u % n_enbs`), every subscriber provisioned in the HSS, the
    /// SGW-C associated with the UPF. No S1 Setup yet.
    pub fn new(n_enbs: usize, n_ues: u64, cfg: NetworkConfig) -> Self {
        assert!(n_enbs > 0, "at least one eNB");
        let now = Instant::now();
        let store = SubscriberStore::in_memory();
        let mut template =
            SubscriberTemplate { amf: cfg.plan.amf, sqn: cfg.hss_sqn.unwrap_or(cfg.plan.sqn), ..Default::default() };
        if !cfg.apns.is_empty() {
            template.apns = cfg.apns.clone();
        }
        if n_ues > 0 {
            store
                .import_range(&imsi_for(0, &cfg.plan), n_ues, cfg.plan.k, cfg.plan.opc, &template)
                .expect("subscriber range fits the IMSI");
        }
        let hss = Hss::with_seed(store, cfg.seed);
        let mut enbs: Vec<Enb> = (0..n_enbs)
            .map(|i| {
                Enb::new(EnbConfig {
                    enb_id: i as u32 + 1,
                    name: format!("enb-{}", i + 1),
                    plmn: cfg.plan.plmn,
                    tac: mobicore_ran::tac_of(1, cfg.enbs_per_tac, i),
                    s1u_addr: Ipv4Addr::new(10, 0, 1, i as u8 + 1),
                    procedure_timeout: cfg.procedure_timeout,
                    s1_setup_timeout: cfg.s1_setup_timeout,
                    inactivity_timeout: cfg.inactivity_timeout,
                })
                .expect("valid eNB identity")
            })
            .collect();
        for u in 0..n_ues {
            enbs[(u % n_enbs as u64) as usize].add_ue(u, Ue::new(usim_for(u, &cfg.plan), cfg.plan.plmn));
        }
        let plane =
            HarnessPlane::new(mobicore_upf::dataplane::DatapathConfig { s1u_addr: UPF_S1U, ..Default::default() });
        let upf = UpfCore::new(cfg.upf.clone(), Box::new(plane.clone()), SystemTime::UNIX_EPOCH, Counters::new());
        let mut spgwc = SpgwcCore::new(cfg.spgwc.clone(), Ipv4Addr::LOCALHOST, SystemTime::UNIX_EPOCH, Counters::new());
        spgwc.start(now);
        let s11_client = Transactions::with_first_seq(TransactionConfig { t3: cfg.spgwc.t3, n3: cfg.spgwc.n3 }, 1);
        let mut net = Network {
            now,
            connected: vec![true; n_enbs],
            enbs,
            mme: MmeUnderTest::new(cfg.mme.clone(), cfg.mme_mode, now),
            hss,
            spgwc,
            upf,
            plane,
            s1u: S1uLog::default(),
            s1_downlink: Vec::new(),
            enb_tunnels: (0..n_enbs)
                .map(|i| mobicore_ran::userplane::tunnels::Tunnels::new(Ipv4Addr::new(10, 0, 1, i as u8 + 1), false))
                .collect(),
            follower: mobicore_ran::userplane::Follower::per_enb(),
            s11_client,
            s11_incoming: HashMap::new(),
            s11_answered: HashMap::new(),
            plan: cfg.plan.clone(),
            reports: Vec::new(),
            delivered: 0,
            queue: VecDeque::new(),
            held: Vec::new(),
            faults: Faults::default(),
            n_ues,
            streams: cfg.streams.max(1),
            controller: None,
            edges: Vec::new(),
            spgwc_config: cfg.spgwc.clone(),
            upf_config: cfg.upf.clone(),
        };
        net.drive();
        assert!(net.spgwc.upf_associated(0), "SGW-C associated with the UPF");
        net
    }

    pub fn n_ues(&self) -> u64 {
        self.n_ues
    }

    /// The eNB UE `ue` camps on: where it is now (handovers move it),
    /// else where it was put at construction.
    pub fn enb_of(&self, ue: u64) -> usize {
        self.enbs.iter().position(|e| e.ue(ue).is_some()).unwrap_or((ue % self.enbs.len() as u64) as usize)
    }

    fn assoc(enb: usize) -> AssocId {
        AssocId(enb as u64 + 1)
    }

    /// A network of `n_enbs` eNBs whose `n_ues` UEs are all attached;
    /// panics naming the UE whose attach failed.
    pub fn all_attached(n_enbs: usize, n_ues: u64, cfg: NetworkConfig) -> Self {
        let mut net = Network::new(n_enbs, n_ues, cfg);
        net.s1_setup_all();
        for ue in 0..n_ues {
            net.attach(ue);
        }
        net.drive();
        for ue in 0..n_ues {
            assert!(net.attached(ue), "UE {ue}: {:?}", net.outcomes(ue));
        }
        net
    }

    /// Every eNB's association comes up and it runs S1 Setup; panics if
    /// one fails.
    pub fn s1_setup_all(&mut self) {
        let streams = self.streams();
        for i in 0..self.enbs.len() {
            self.mme.handle(
                self.now,
                MmeEvent::S1Up { assoc: Self::assoc(i), peer: [127, 0, 0, 1].into(), outbound_streams: streams },
            );
            self.enbs[i].start_s1_setup(self.now, streams);
        }
        self.drive();
        for (i, e) in self.enbs.iter().enumerate() {
            assert!(e.is_ready(), "eNB {i} S1 state {:?}", e.s1_state());
        }
    }

    fn streams(&self) -> u16 {
        self.streams
    }

    /// Start UE `ue`'s attach (call [`Network::drive`] to run it).
    pub fn attach(&mut self, ue: u64) {
        let e = self.enb_of(ue);
        self.enbs[e].start_attach(self.now, ue).unwrap_or_else(|err| panic!("attach of UE {ue}: {err}"));
    }

    /// Idle UE `ue` reselects eNB `to`'s cell ([`mobicore_ran::enb::reselect`]:
    /// a TAU starts there if that cell is outside its TAI list; call
    /// [`Network::drive`] to run it).
    pub fn reselect(&mut self, ue: u64, to: usize) -> Result<mobicore_ran::Reselection, mobicore_ran::enb::EnbError> {
        let from = self.enb_of(ue);
        assert_ne!(from, to, "UE {ue} is at eNB {to} already");
        let r = mobicore_ran::enb::reselect_among(self.now, &mut self.enbs, from, to, ue);
        self.collect();
        r
    }

    /// Start UE `ue`'s detach.
    pub fn detach(&mut self, ue: u64, switch_off: bool) {
        let e = self.enb_of(ue);
        self.enbs[e].start_detach(self.now, ue, switch_off).unwrap_or_else(|err| panic!("detach of UE {ue}: {err}"));
    }

    /// Replace UE `ue` by a fresh one with `usim` (e.g. another K).
    pub fn replace_ue(&mut self, ue: u64, usim: mobicore_ran::Usim) {
        let e = self.enb_of(ue);
        let plmn = self.plan.plmn;
        self.enbs[e].add_ue(ue, Ue::new(usim, plmn));
    }

    /// The SCTP association of eNB `enb` goes down on both sides; what is
    /// in flight to or from it is lost.
    pub fn disconnect_enb(&mut self, enb: usize) {
        self.connected[enb] = false;
        self.queue.retain(|m| !matches!(m, Msg::S1Uplink { enb: e, .. } | Msg::S1Downlink { enb: e, .. } if *e == enb));
        self.enbs[enb].association_lost(self.now, "disconnected by the harness");
        self.mme.handle(self.now, MmeEvent::S1Down { assoc: Self::assoc(enb) });
        self.collect();
    }

    /// Put a message on a link as if a node had sent it.
    pub fn inject(&mut self, m: Msg) {
        self.queue.push_back(m);
    }

    /// Arm a fault on the next `n` messages of `link` (that `matcher`
    /// selects, if given).
    pub fn fault(&mut self, link: Link, action: FaultAction, n: u32, matcher: Option<crate::fault::Matcher>) {
        self.faults.armed.push(crate::fault::Fault { link, action, remaining: n, matcher });
    }

    pub fn drop_next(&mut self, link: Link, n: u32) {
        self.fault(link, FaultAction::Drop, n, None);
    }

    /// Flip octet `at` of the next `n` messages of `link`.
    pub fn corrupt_next(&mut self, link: Link, n: u32, at: usize) {
        self.fault(link, FaultAction::Corrupt(at), n, None);
    }

    /// Disarm every fault not yet used up.
    pub fn clear_faults(&mut self) {
        self.faults.armed.clear();
    }

    /// Messages dropped by faults so far.
    pub fn dropped(&self) -> &[Msg] {
        &self.faults.dropped
    }

    /// Messages held by [`FaultAction::Hold`].
    pub fn held(&self) -> &[Msg] {
        &self.held
    }

    /// Put the held messages back on their links, in order.
    pub fn release_held(&mut self) {
        let held = std::mem::take(&mut self.held);
        self.queue.extend(held);
    }

    /// Take every action and datagram every node has queued.
    fn collect(&mut self) {
        // Handover steps make more actions (an S1 arrival): all of them
        // are taken before the tunnels are compared with the contexts.
        loop {
            let mut handovers = Vec::new();
            for (i, enb) in self.enbs.iter_mut().enumerate() {
                while let Some(a) = enb.poll_action() {
                    match a {
                        EnbAction::Send { stream, pdu } => {
                            if self.connected[i] {
                                self.queue.push_back(Msg::S1Uplink { enb: i, stream, pdu: Bytes::from(pdu) })
                            }
                        }
                        EnbAction::S1Setup(result) => self.reports.push(Report::S1Setup { enb: i, result }),
                        EnbAction::Outcome(outcome) => self.reports.push(Report::Outcome { enb: i, outcome }),
                        EnbAction::Anomaly(what) => self.reports.push(Report::Anomaly { enb: i, what }),
                        EnbAction::Handover(h) => handovers.push((i, h)),
                    }
                }
            }
            if handovers.is_empty() {
                break;
            }
            for (i, h) in handovers {
                self.on_handover_action(i, h);
            }
        }
        self.sync_tunnels();
        while let Some((from, a)) = self.mme.poll_action() {
            match a {
                MmeAction::S1Send { assoc, stream, data } => {
                    let enb = assoc.0 as usize - 1;
                    if self.connected.get(enb) == Some(&true) {
                        self.queue.push_back(Msg::S1Downlink { enb, stream, pdu: data });
                    }
                }
                MmeAction::S1Abort { assoc } => {
                    // The harness's eNBs are all on loopback: never refused.
                    self.reports
                        .push(Report::Anomaly { enb: assoc.0 as usize - 1, what: "S1 association aborted".into() });
                }
                MmeAction::S6a { ue, request } => self.queue.push_back(Msg::S6aRequest { ue, request }),
                MmeAction::S11 { ue, request } => {
                    // What the S11 client task does: number, encode, send.
                    let seq = self.s11_client.next_seq();
                    let bytes = encode_request(&request, seq).to_bytes();
                    self.s11_client.send_request(self.now, SGW_S11, seq, bytes, (ue, request_ebi(&request), from));
                }
                MmeAction::S11Answer { txn, answer } => {
                    let Some(teid) = self.s11_incoming.remove(&txn) else { continue };
                    let bytes = Bytes::from(encode_incoming_answer(&answer, teid, txn as u32).to_bytes());
                    self.s11_answered.insert(txn as u32, bytes.clone());
                    self.queue.push_back(Msg::S11ToSgw(bytes));
                }
                MmeAction::S6aAnswer { answer, .. } => self.reports.push(Report::S6aAnswer { answer }),
                MmeAction::OperatorAnswer { txn, outcome } => {
                    self.reports.push(Report::OperatorAnswer { txn, outcome })
                }
                MmeAction::S11Notify { notification } => {
                    let seq = self.s11_client.next_seq();
                    self.queue.push_back(Msg::S11ToSgw(encode_notification(&notification, seq).to_bytes().into()));
                }
            }
        }
        while let Some((_, bytes)) = self.s11_client.poll_transmit() {
            self.queue.push_back(Msg::S11ToSgw(bytes));
        }
        while let Some((_, (ue, _, from))) = self.s11_client.poll_timed_out() {
            self.mme.handle_s11_response(self.now, from, ue, Err(TransportError::Timeout));
        }
        let relayed = self.controller.is_some();
        while let Some(t) = self.spgwc.poll_transmit() {
            self.queue.push_back(match t.interface {
                Interface::S11 if relayed => Msg::SgwToRelay(t.bytes),
                Interface::S11 => Msg::S11ToMme(t.bytes),
                Interface::Pfcp => Msg::PfcpToUpf(t.bytes),
            });
        }
        self.collect_user_plane();
        while let Some((_, bytes)) = self.upf.poll_transmit() {
            self.queue.push_back(Msg::PfcpToCp(bytes));
        }
        self.collect_edges();
    }

    /// Whether any node still has something queued (after a collect).
    fn busy(&mut self) -> bool {
        self.collect();
        !self.queue.is_empty()
    }

    /// Deliver one message: `false` if nothing was in flight.
    pub fn deliver_one(&mut self) -> bool {
        self.collect();
        let Some(m) = self.queue.pop_front() else { return false };
        let m = match self.faults.apply(&m) {
            None => m,
            Some(FaultAction::Drop) => {
                self.faults.dropped.push(m);
                return true;
            }
            Some(FaultAction::Hold) => {
                self.held.push(m);
                return true;
            }
            Some(FaultAction::Corrupt(at)) => match m.corrupt(at) {
                Some(m) => m,
                None => return true,
            },
        };
        self.delivered += 1;
        let now = self.now;
        match m {
            Msg::S1Uplink { enb, stream, pdu } => {
                if self.connected[enb] {
                    self.mme.handle(now, MmeEvent::S1Data { assoc: Self::assoc(enb), stream, data: pdu });
                }
            }
            Msg::S1Downlink { enb, stream, pdu } => {
                if self.connected.get(enb) == Some(&true) {
                    self.enbs[enb].handle_s1ap(now, stream, &pdu);
                    self.s1_downlink.push((enb, pdu));
                }
            }
            Msg::S6aRequest { ue, request } => {
                let answer = self.hss.handle(request);
                self.queue.push_back(Msg::S6aAnswer { ue, answer });
            }
            Msg::S6aAnswer { ue, answer } => self.mme.handle(now, MmeEvent::S6a { ue, answer: Ok(answer) }),
            Msg::S11ToSgw(b) => match self.controller.as_mut() {
                Some(c) => c.handle_from_mme(now, MME_S11, &b),
                None => self.spgwc.handle_s11(now, MME_S11, &b),
            },
            Msg::S11ToMme(b) => self.s11_to_mme(&b),
            Msg::PfcpToUpf(b) => self.upf.handle_datagram(now, SGW_PFCP, &b),
            Msg::PfcpToCp(b) => self.spgwc.handle_pfcp(now, UPF_PFCP, &b),
            Msg::S1uDownlink { to, bytes } => self.s1u_to_enb(to, std::net::SocketAddrV4::new(UPF_S1U, 2152), &bytes),
            Msg::X2u { from, to, bytes } => {
                let from = std::net::SocketAddrV4::new(self.enbs[from].config().s1u_addr, 2152);
                match *to.ip() == UPF_S1U {
                    // Indirect forwarding: through the UPF's tunnel.
                    true => {
                        let _ = self.plane.user.lock().uplink(now, from, &bytes);
                    }
                    false => self.s1u_to_enb(to, from, &bytes),
                }
            }
            m @ (Msg::RelayToSgw(_)
            | Msg::SgwToRelay(_)
            | Msg::ToEdge { .. }
            | Msg::FromEdge { .. }
            | Msg::EdgePfcp { .. }) => self.deliver_edge(m),
        }
        self.collect();
        true
    }

    /// What the S11 client task does with a datagram from the SGW-C.
    fn s11_to_mme(&mut self, bytes: &[u8]) {
        let (seq, kind, response) = match GtpMessage::parse(bytes) {
            Ok(m) if !msg_type::is_request(m.body.msg_type()) => (m.seq, m.body.msg_type(), Ok(m)),
            Ok(m) => return self.s11_request_to_mme(&m),
            Err((Some(h), e)) if !msg_type::is_request(h.msg_type) => (h.seq, h.msg_type, Err(e.to_string())),
            Err(_) => return,
        };
        let Some((ue, ebi, from)) = self.s11_client.on_response(SGW_S11, seq, kind) else { return };
        let response = match response {
            Ok(m) => decode_response(&m, ebi).map_err(|e| TransportError::Malformed(e.to_string())),
            Err(e) => Err(TransportError::Malformed(e)),
        };
        self.mme.handle_s11_response(self.now, from, ue, response);
    }

    /// What the S11 client task does with a request from the S-GW (a
    /// Downlink Data Notification): the MME gets it once; a retransmission
    /// is answered from the answers sent, or ignored while the MME has not
    /// answered yet.
    fn s11_request_to_mme(&mut self, m: &GtpMessage) {
        if let Some(b) = self.s11_answered.get(&m.seq) {
            self.queue.push_back(Msg::S11ToSgw(b.clone()));
            return;
        }
        let txn = u64::from(m.seq);
        if self.s11_incoming.contains_key(&txn) {
            return;
        }
        let Ok((request, sgw_teid)) = decode_incoming_request(m) else { return };
        self.s11_incoming.insert(txn, sgw_teid);
        self.mme.handle(self.now, MmeEvent::S11Incoming { txn, request });
    }

    /// Deliver until every queue is empty (the clock does not move).
    /// Returns how many messages were delivered or faulted.
    pub fn drive(&mut self) -> usize {
        let mut n = 0;
        while self.deliver_one() {
            n += 1;
            assert!(n < MAX_DELIVERIES, "no quiescence after {n} deliveries: livelock");
        }
        n
    }

    /// The earliest deadline of any node.
    pub fn next_deadline(&self) -> Option<Instant> {
        let enbs = self.enbs.iter().map(|e| e.poll_timeout());
        enbs.chain([
            self.mme.poll_timeout(),
            self.spgwc.poll_timeout(),
            self.upf.poll_timeout(),
            self.s11_client.poll_timeout(),
            self.edge_deadline(),
        ])
        .flatten()
        .min()
    }

    /// Fire every timer due at `self.now`.
    fn fire(&mut self) {
        let now = self.now;
        for e in &mut self.enbs {
            if e.poll_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
        }
        if self.mme.poll_timeout().is_some_and(|t| t <= now) {
            self.mme.handle_timeout(now);
        }
        if self.spgwc.poll_timeout().is_some_and(|t| t <= now) {
            self.spgwc.handle_timeout(now);
        }
        if self.upf.poll_timeout().is_some_and(|t| t <= now) {
            self.upf.handle_timeout(now);
        }
        if self.s11_client.poll_timeout().is_some_and(|t| t <= now) {
            self.s11_client.handle_timeout(now);
        }
        self.fire_edges();
        self.collect();
    }

    /// Advance the clock to the earliest deadline, fire it, and
    /// [`drive`](Network::drive). `false` if no node has a deadline.
    pub fn step(&mut self) -> bool {
        if self.busy() {
            self.drive();
        }
        let Some(t) = self.next_deadline() else { return false };
        self.now = self.now.max(t);
        self.fire();
        self.drive();
        true
    }

    /// [`drive`](Network::drive), then at most `max_steps` steps; returns
    /// the steps taken.
    pub fn drive_bounded(&mut self, max_steps: usize) -> usize {
        self.drive();
        (0..max_steps).take_while(|_| self.step()).count()
    }

    /// Step until `done` holds (checked after each drive) or `max_steps`
    /// were taken; returns whether `done` holds.
    pub fn run_until(&mut self, max_steps: usize, mut done: impl FnMut(&Network) -> bool) -> bool {
        self.drive();
        for _ in 0..max_steps {
            if done(self) {
                return true;
            }
            if !self.step() {
                break;
            }
        }
        done(self)
    }

    /// Fire every deadline up to `now + d` in order, then set the clock
    /// there.
    pub fn advance(&mut self, d: Duration) {
        let target = self.now + d;
        self.drive();
        while let Some(t) = self.next_deadline().filter(|t| *t <= target) {
            self.now = self.now.max(t);
            self.fire();
            self.drive();
        }
        self.now = target;
    }
}
