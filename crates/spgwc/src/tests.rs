//! The S/P-GW-C core against a real in-memory PFCP node (mobicore-upf's
//! sans-I/O core): no sockets, no sleeps, a virtual clock.

use crate::config::{ApnConfig, SpgwcConfig, UpfPeerConfig};
use crate::core::{Interface, SpgwcCore};
use crate::sxa_build::{self as sxa, msg};
use mobicore_common::counters::Counters;
use mobicore_common::s11::*;
use mobicore_common::{Ebi, Fteid, Teid};
use mobicore_gtp::message::{GtpMessage, Message};
use mobicore_gtp::s11::{decode_response, encode_request};
use mobicore_upf::rules::{GtpuTunnel, INTERFACE_ACCESS, INTERFACE_CORE};
use mobicore_upf::{MemoryPlane, UpfConfig, UpfCore};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Instant, SystemTime};

pub(crate) const MME: &str = "127.0.0.1:40000";
pub(crate) const GW_PFCP: &str = "127.0.0.1:8805";
pub(crate) const UPF: &str = "127.0.0.1:8806";
pub(crate) const S1U: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 7);

pub(crate) fn a(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

pub(crate) struct Net {
    pub gw: SpgwcCore,
    pub upf: UpfCore,
    pub plane: MemoryPlane,
    pub now: Instant,
    /// S11 messages the gateway sent, and to whom.
    pub s11_out: Vec<GtpMessage>,
    pub s11_dst: Vec<SocketAddr>,
    /// PFCP datagrams the gateway sent, in order (only those to `UPF`
    /// reach the in-memory UPF).
    pub pfcp_log: Vec<Vec<u8>>,
    /// When false, PFCP from the gateway is dropped (UPF unreachable).
    pub upf_up: bool,
    pub seq: u32,
}

impl Net {
    pub fn with_upf(cfg: SpgwcConfig, upf_cfg: UpfConfig) -> Net {
        let plane = MemoryPlane::new();
        let upf = UpfCore::new(
            UpfConfig { s1u_addr: S1U, ..upf_cfg },
            Box::new(plane.clone()),
            SystemTime::UNIX_EPOCH,
            Counters::new(),
        );
        let gw = SpgwcCore::new(cfg, Ipv4Addr::LOCALHOST, SystemTime::UNIX_EPOCH, Counters::new());
        let mut n = Net {
            gw,
            upf,
            plane,
            now: Instant::now(),
            s11_out: vec![],
            s11_dst: vec![],
            pfcp_log: vec![],
            upf_up: true,
            seq: 0,
        };
        n.gw.start(n.now);
        n.drive();
        assert!(n.gw.upf_associated(0));
        n
    }

    pub fn new(cfg: SpgwcConfig) -> Net {
        Self::with_upf(cfg, UpfConfig::default())
    }

    pub fn cfg() -> SpgwcConfig {
        SpgwcConfig {
            upfs: vec![UpfPeerConfig { pfcp: a(UPF), s1u_addr: S1U, teid_base: 0x1000, teid_count: 0x1000 }],
            id_seed: Some(1),
            ..SpgwcConfig::default()
        }
    }

    /// Carries datagrams until nobody has anything to send.
    pub fn drive(&mut self) {
        loop {
            let mut progress = false;
            while let Some(t) = self.gw.poll_transmit() {
                progress = true;
                match t.interface {
                    Interface::S11 => {
                        self.s11_out.push(GtpMessage::parse(&t.bytes).expect("we emit well-formed GTPv2-C"));
                        self.s11_dst.push(t.dst);
                    }
                    Interface::Pfcp => {
                        self.pfcp_log.push(t.bytes.to_vec());
                        if self.upf_up && t.dst == a(UPF) {
                            self.upf.handle_datagram(self.now, a(GW_PFCP), &t.bytes);
                        }
                    }
                }
            }
            while let Some((to, b)) = self.upf.poll_transmit() {
                progress = true;
                assert_eq!(to, a(GW_PFCP));
                self.gw.handle_pfcp(self.now, a(UPF), &b);
            }
            if !progress {
                return;
            }
        }
    }

    /// Sends an S11 request and returns the response it got, if any.
    pub fn s11(&mut self, req: &S11Request) -> Option<S11Response> {
        self.s11_as(a(MME), req)
    }

    /// [`Self::s11`] from `peer`; the response must go back to `peer`.
    pub fn s11_as(&mut self, peer: SocketAddr, req: &S11Request) -> Option<S11Response> {
        self.seq += 1;
        let bytes = encode_request(req, self.seq).to_bytes();
        self.s11_from(peer, &bytes).map(|m| decode_response(&m, mobicore_gtp::s11::request_ebi(req)).unwrap())
    }

    pub fn s11_raw(&mut self, bytes: &[u8]) -> Option<GtpMessage> {
        self.s11_from(a(MME), bytes)
    }

    /// One S11 datagram from `peer`: the answer sent to `peer`, if any.
    pub fn s11_from(&mut self, peer: SocketAddr, bytes: &[u8]) -> Option<GtpMessage> {
        let before = self.s11_out.len();
        self.gw.handle_s11(self.now, peer, bytes);
        self.drive();
        assert!(self.s11_out.len() <= before + 1);
        let m = self.s11_out.get(before).cloned();
        if m.is_some() {
            assert_eq!(self.s11_dst[before], peer, "answered to the sender");
        }
        m
    }

    /// Jumps to the next deadline.
    pub fn step(&mut self) {
        self.now = self.gw.poll_timeout().expect("a timer");
        self.gw.handle_timeout(self.now);
        self.drive();
    }
}

pub(crate) fn csr(i: u32) -> CreateSessionRequest {
    let imsi = format!("0010100000{:05}", i).parse().unwrap();
    CreateSessionRequest::attach(imsi, Fteid { teid: Teid(0x9000 + i), ipv4: Ipv4Addr::LOCALHOST })
}

pub(crate) fn created(r: Option<S11Response>) -> CreateSessionResponse {
    match r {
        Some(S11Response::CreateSession(c)) => c,
        other => panic!("expected Create Session Response, got {other:?}"),
    }
}

#[test]
fn create_session_installs_uplink_and_buffering_downlink() {
    let mut n = Net::new(Net::cfg());
    let r = created(n.s11(&S11Request::CreateSession(csr(1))));
    assert_eq!(r.cause, GtpCause::REQUEST_ACCEPTED);
    assert_eq!(r.paa, Some(Ipv4Addr::new(10, 44, 0, 1)));
    let s1u = r.s1u_sgw_fteid.unwrap();
    assert_eq!(s1u.ipv4, S1U);
    assert!((0x1000..0x2000).contains(&s1u.teid.0), "inside the UPF's TEID range");
    let sgw = r.sgw_fteid.unwrap();
    assert_eq!(sgw.ipv4, Ipv4Addr::LOCALHOST);
    assert_eq!(n.s11_out[0].teid, Some(0x9001), "answered on the MME's TEID");

    // The Session Establishment Request as rs-pfcp reads it.
    let ser = n.pfcp_log.iter().find(|b| b[1] == msg::SESSION_ESTABLISHMENT_REQUEST).unwrap();
    let m = <rs_pfcp::message::SessionEstablishmentRequest as rs_pfcp::message::Message>::unmarshal(ser)
        .expect("rs-pfcp reads our SER");
    assert_eq!(m.create_pdrs.len(), 2);
    assert_eq!(m.create_fars.len(), 2);
    assert_eq!(m.create_bars.len(), 1);

    // What the UPF installed.
    let rules = n.plane.sessions().into_values().next().unwrap();
    let ul = &rules.pdrs[&sxa::PDR_UPLINK];
    assert_eq!(ul.pdi.source_interface, INTERFACE_ACCESS);
    assert_eq!(ul.pdi.local_fteid, Some((s1u.teid.0, S1U)));
    assert_eq!(ul.outer_header_removal, Some(sxa::OHR_GTPU_UDP_IPV4));
    assert_eq!(ul.pdi.network_instance.as_deref(), Some("internet"));
    let ul_far = &rules.fars[&ul.far_id.unwrap()];
    assert!(ul_far.action.forw);
    assert_eq!(ul_far.destination_interface, Some(INTERFACE_CORE));
    let dl = &rules.pdrs[&sxa::PDR_DOWNLINK];
    assert_eq!(dl.pdi.source_interface, INTERFACE_CORE);
    assert_eq!(dl.pdi.ue_ipv4, Some(Ipv4Addr::new(10, 44, 0, 1)));
    let dl_far = &rules.fars[&dl.far_id.unwrap()];
    assert!(dl_far.action.buff && !dl_far.action.forw);
    assert_eq!(dl_far.bar_id, Some(sxa::BAR_DOWNLINK));
    assert!(rules.bars.contains_key(&sxa::BAR_DOWNLINK));
}

#[test]
fn modify_bearer_forwards_to_enb_and_release_buffers() {
    let mut n = Net::new(Net::cfg());
    let r = created(n.s11(&S11Request::CreateSession(csr(1))));
    let sgw_teid = r.sgw_fteid.unwrap().teid;
    let enb = Fteid { teid: Teid(0xe0b), ipv4: Ipv4Addr::new(127, 0, 0, 9) };
    let m = n.s11(&S11Request::ModifyBearer(ModifyBearerRequest { sgw_teid, ebi: Ebi(5), s1u_enb_fteid: enb }));
    assert_eq!(
        m,
        Some(S11Response::ModifyBearer(ModifyBearerResponse {
            cause: GtpCause::REQUEST_ACCEPTED,
            bearer_cause: Some(GtpCause::REQUEST_ACCEPTED)
        }))
    );
    let smr = n.pfcp_log.last().unwrap();
    assert_eq!(smr[1], msg::SESSION_MODIFICATION_REQUEST);
    let rules = n.plane.sessions().into_values().next().unwrap();
    let far = &rules.fars[&sxa::FAR_DOWNLINK];
    assert!(far.action.forw);
    assert_eq!(far.destination_interface, Some(INTERFACE_ACCESS));
    assert_eq!(far.outer_header_creation, Some(GtpuTunnel { teid: 0xe0b, ipv4: Ipv4Addr::new(127, 0, 0, 9) }));
    assert_eq!(n.gw.session(sgw_teid).unwrap().s1u_enb, Some(enb));

    let rab = n.s11(&S11Request::ReleaseAccessBearers(ReleaseAccessBearersRequest { sgw_teid }));
    assert_eq!(rab, Some(S11Response::ReleaseAccessBearers(GtpCause::REQUEST_ACCEPTED)));
    let far = &n.plane.sessions().into_values().next().unwrap().fars[&sxa::FAR_DOWNLINK];
    assert!(far.action.buff && far.action.nocp && !far.action.forw);
    assert_eq!(n.gw.session(sgw_teid).unwrap().s1u_enb, None);
}

#[test]
fn delete_session_removes_everything_and_frees_the_address() {
    let mut n = Net::new(Net::cfg());
    let r = created(n.s11(&S11Request::CreateSession(csr(1))));
    let sgw_teid = r.sgw_fteid.unwrap().teid;
    let d = n.s11(&S11Request::DeleteSession(DeleteSessionRequest { sgw_teid, linked_ebi: Ebi(5) }));
    assert_eq!(d, Some(S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED)));
    assert_eq!(n.pfcp_log.last().unwrap()[1], msg::SESSION_DELETION_REQUEST);
    assert!(n.plane.is_empty());
    assert!(n.gw.sessions().is_empty());
    // Unknown TEID now.
    let d = n.s11(&S11Request::DeleteSession(DeleteSessionRequest { sgw_teid, linked_ebi: Ebi(5) }));
    assert_eq!(d, Some(S11Response::DeleteSession(GtpCause::CONTEXT_NOT_FOUND)));
    assert_eq!(n.s11_out.last().unwrap().teid, Some(0), "TEID 0 when no context");
    let m = n.s11(&S11Request::ModifyBearer(ModifyBearerRequest {
        sgw_teid: Teid(777),
        ebi: Ebi(5),
        s1u_enb_fteid: Fteid { teid: Teid(1), ipv4: Ipv4Addr::LOCALHOST },
    }));
    assert!(matches!(
        m,
        Some(S11Response::ModifyBearer(ModifyBearerResponse { cause: GtpCause::CONTEXT_NOT_FOUND, .. }))
    ));
}

/// Issue 10: 100,000 UEs on one machine with the defaults; the pool past
/// its end answers with cause 84 (the MME gives the UE ESM #26).
#[test]
fn the_default_pool_holds_100_000_ues() {
    let cfg = SpgwcConfig::default();
    let mut pools = crate::context::ApnPools::new(&cfg.apns[0]);
    let pool = pools.ipv4.as_mut().expect("an IPv4 pool");
    let mut seen = std::collections::HashSet::new();
    for _ in 0..100_000 {
        assert!(seen.insert(pool.allocate().expect("room for 100,000 UEs")));
    }
}

#[test]
fn unknown_apn_and_exhausted_pool() {
    let mut cfg = Net::cfg();
    cfg.apns = vec![ApnConfig::ipv4("internet", Ipv4Addr::new(10, 45, 0, 0), 30)];
    let mut n = Net::new(cfg);
    let mut bad = csr(1);
    bad.apn = "nowhere".into();
    assert_eq!(created(n.s11(&S11Request::CreateSession(bad))).cause, GtpCause::MISSING_OR_UNKNOWN_APN);
    // With an Operator Identifier, case-insensitively.
    let mut oi = csr(2);
    oi.apn = "Internet.mnc001.mcc001.gprs".into();
    assert_eq!(created(n.s11(&S11Request::CreateSession(oi))).cause, GtpCause::REQUEST_ACCEPTED);
    assert_eq!(created(n.s11(&S11Request::CreateSession(csr(3)))).cause, GtpCause::REQUEST_ACCEPTED);
    let r = created(n.s11(&S11Request::CreateSession(csr(4))));
    assert_eq!(r.cause, GtpCause::ALL_DYNAMIC_ADDRESSES_OCCUPIED);
    assert_eq!(r.bearer_ebi, Ebi(5));
    assert_eq!(n.gw.counters.value("s11_create_session_pool_exhausted"), 1);
    assert_eq!(n.plane.len(), 2);
}

#[test]
fn missing_mandatory_ie_gets_cause_70_with_offending_ie() {
    let mut n = Net::new(Net::cfg());
    let mut m = encode_request(&S11Request::CreateSession(csr(1)), 50);
    if let Message::CreateSessionRequest(r) = &mut m.body {
        r.serving_network = None;
    }
    let resp = n.s11_raw(&m.to_bytes()).unwrap();
    let Message::CreateSessionResponse(r) = resp.body else { panic!() };
    assert_eq!(r.cause.value, 70);
    assert_eq!(r.cause.offending, Some((83, 0)));
    assert!(n.plane.is_empty());
}

#[test]
fn duplicate_request_is_answered_from_cache_without_reprocessing() {
    let mut n = Net::new(Net::cfg());
    let bytes = encode_request(&S11Request::CreateSession(csr(1)), 77).to_bytes();
    let first = n.s11_raw(&bytes).unwrap();
    let pfcp_sent = n.pfcp_log.len();
    let again = n.s11_raw(&bytes).unwrap();
    assert_eq!(first, again);
    assert_eq!(n.pfcp_log.len(), pfcp_sent, "no second PFCP establishment");
    assert_eq!(n.gw.sessions().len(), 1);
}

/// An MME whose sequence numbers came round within the duplicate cache's
/// lifetime (T3 x N3): its Release Access Bearers under the number of an
/// earlier Modify Bearer is served, not answered with the Modify Bearer's
/// cached response (once, an elastic MME host's UEs then never left
/// connected mode).
#[test]
fn a_new_request_under_a_reused_sequence_number_is_served() {
    let mut n = Net::new(Net::cfg());
    let sgw_teid = created(n.s11(&S11Request::CreateSession(csr(1)))).sgw_fteid.unwrap().teid;
    let enb = Fteid { teid: Teid(0xe0b), ipv4: Ipv4Addr::new(127, 0, 0, 9) };
    let mbr = S11Request::ModifyBearer(ModifyBearerRequest { sgw_teid, ebi: Ebi(5), s1u_enb_fteid: enb });
    let m = n.s11_raw(&encode_request(&mbr, 4242).to_bytes()).unwrap();
    assert_eq!(m.body.msg_type(), mobicore_gtp::message::msg_type::MODIFY_BEARER_RESPONSE);
    let rab = S11Request::ReleaseAccessBearers(ReleaseAccessBearersRequest { sgw_teid });
    let bytes = encode_request(&rab, 4242).to_bytes();
    let r = n.s11_raw(&bytes).unwrap();
    assert_eq!(
        decode_response(&r, mobicore_gtp::s11::request_ebi(&rab)).unwrap(),
        S11Response::ReleaseAccessBearers(GtpCause::REQUEST_ACCEPTED)
    );
    assert_eq!(n.gw.session(sgw_teid).unwrap().s1u_enb, None, "released");
    assert_eq!(n.gw.counters.value("s11_reused_sequence_number"), 1);
    // Its own retransmission is still answered from the cache.
    let pfcp_sent = n.pfcp_log.len();
    assert_eq!(n.s11_raw(&bytes), Some(r));
    assert_eq!(n.pfcp_log.len(), pfcp_sent);
    assert_eq!(n.gw.counters.value("s11_duplicate_request"), 1);
}

/// Our requests to an MME go where its Create Session Request came from,
/// or, with `mme_s11_port`, to its F-TEID's IP at that port (TS 29.274
/// 4.2.1): an elastic MME's front end there, whichever host sent it.
#[test]
fn requests_to_the_mme_go_to_its_f_teid_at_the_configured_port() {
    let mut n = Net::new(Net::cfg());
    let teid = created(n.s11(&S11Request::CreateSession(csr(1)))).sgw_fteid.unwrap().teid;
    assert_eq!(n.gw.session(teid).unwrap().mme_s11_addr, a(MME));
    let mut n = Net::new(SpgwcConfig { mme_s11_port: Some(2123), ..Net::cfg() });
    let mut req = csr(2);
    req.sender_fteid.ipv4 = Ipv4Addr::new(127, 0, 0, 5);
    let teid = created(n.s11(&S11Request::CreateSession(req))).sgw_fteid.unwrap().teid;
    assert_eq!(n.gw.session(teid).unwrap().mme_s11_addr, a("127.0.0.5:2123"));
}

#[test]
fn upf_silence_fails_create_session_after_n1_retransmissions() {
    let mut n = Net::new(Net::cfg());
    n.upf_up = false;
    let bytes = encode_request(&S11Request::CreateSession(csr(1)), 5).to_bytes();
    assert!(n.s11_raw(&bytes).is_none(), "no answer before the UPF answers");
    let before = n.s11_out.len();
    for _ in 0..20 {
        if n.s11_out.len() > before {
            break;
        }
        n.step();
    }
    let sers = n.pfcp_log.iter().filter(|b| b[1] == msg::SESSION_ESTABLISHMENT_REQUEST).count();
    assert_eq!(sers, 4, "sent once and retransmitted N1 = 3 times");
    let Message::CreateSessionResponse(r) = &n.s11_out.last().unwrap().body else { panic!() };
    assert_eq!(r.cause.value, 100);
    assert!(n.gw.sessions().is_empty());
}

#[test]
fn processing_is_deterministic() {
    let run = || {
        let mut n = Net::new(Net::cfg());
        let mut out = vec![];
        for i in 0..20 {
            out.push(n.s11(&S11Request::CreateSession(csr(i))));
        }
        (out, n.pfcp_log)
    };
    assert_eq!(run(), run());
}

#[test]
fn heartbeats_flow_and_echo_is_answered() {
    let mut n = Net::new(Net::cfg());
    for _ in 0..10 {
        n.step();
    }
    assert!(n.pfcp_log.iter().any(|b| b[1] == msg::HEARTBEAT_REQUEST));
    assert!(n.gw.upf_associated(0));
    let echo =
        GtpMessage { teid: None, seq: 3, body: Message::EchoRequest(mobicore_gtp::message::Echo { recovery: 1 }) };
    let r = n.s11_raw(&echo.to_bytes()).unwrap();
    assert!(matches!(r.body, Message::EchoResponse(_)));
    // Garbage is counted and dropped.
    assert!(n.s11_raw(&[0x48, 32, 0, 1]).is_none());
    assert_eq!(n.gw.counters.value("gtp_malformed"), 1);
    n.gw.handle_pfcp(n.now, a(UPF), &[1, 2, 3]);
    assert_eq!(n.gw.counters.value("pfcp_malformed"), 1);
}

#[test]
fn pfcp_rejection_fails_create_session_and_frees_resources() {
    let mut n = Net::new(Net::cfg());
    // The UPF loses the association (as after its restart).
    let release = sxa::encode(9, None, 0x7777, &[rs_pfcp::ie::node_id::NodeId::new_ipv4(Ipv4Addr::LOCALHOST).to_ie()]);
    n.upf.handle_datagram(n.now, a(GW_PFCP), &release);
    n.drive();
    let r = created(n.s11(&S11Request::CreateSession(csr(1))));
    assert_eq!(r.cause, GtpCause::NO_RESOURCES_AVAILABLE);
    assert_eq!(r.sgw_fteid, None);
    assert!(n.gw.sessions().is_empty());
    // The address went back to the pool: after re-association the next UE gets it.
    n.gw.handle_timeout(n.now + std::time::Duration::from_secs(60));
    n.drive();
    assert!(n.gw.upf_associated(0));
    let r = created(n.s11(&S11Request::CreateSession(csr(2))));
    assert_eq!(r.cause, GtpCause::REQUEST_ACCEPTED);
}

#[test]
fn requests_while_a_procedure_is_in_flight_wait_for_it() {
    let mut n = Net::new(Net::cfg());
    let r = created(n.s11(&S11Request::CreateSession(csr(1))));
    let sgw_teid = r.sgw_fteid.unwrap().teid;
    n.upf_up = false;
    let enb = Fteid { teid: Teid(1), ipv4: Ipv4Addr::LOCALHOST };
    assert!(n
        .s11(&S11Request::ModifyBearer(ModifyBearerRequest { sgw_teid, ebi: Ebi(5), s1u_enb_fteid: enb }))
        .is_none());
    // The MME detaches before the Modify Bearer Response: the request waits.
    assert!(n.s11(&S11Request::DeleteSession(DeleteSessionRequest { sgw_teid, linked_ebi: Ebi(5) })).is_none());
    assert_eq!(n.gw.counters.value("s11_queued_busy"), 1);
    // The UPF comes back: the retransmitted modification is answered, then
    // the queued deletion runs, and both responses reach the MME in order.
    n.upf_up = true;
    let before = n.s11_out.len();
    n.step();
    let out: Vec<u8> = n.s11_out[before..].iter().map(|m| m.body.msg_type()).collect();
    assert_eq!(out, vec![35, 37], "Modify Bearer Response, then Delete Session Response");
    let del = decode_response(&n.s11_out[before + 1], Ebi(5)).unwrap();
    assert_eq!(del, S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED));
    assert!(n.gw.sessions().is_empty());
    assert_eq!(n.plane.len(), 0);
}

#[test]
fn create_session_for_an_existing_pdn_connection_replaces_it() {
    let mut n = Net::new(Net::cfg());
    let first = created(n.s11(&S11Request::CreateSession(csr(1))));
    let second = created(n.s11(&S11Request::CreateSession(csr(1))));
    assert_eq!(second.cause, GtpCause::REQUEST_ACCEPTED);
    assert_ne!(first.sgw_fteid, second.sgw_fteid);
    assert_eq!(n.gw.sessions().len(), 1);
    assert_eq!(n.plane.len(), 1, "the old UPF session was deleted");
    assert!(n.gw.session(first.sgw_fteid.unwrap().teid).is_none());
    assert_eq!(n.gw.counters.value("sessions_replaced"), 1);
}

/// The counts the UPF's data path measured for a session's URR.
pub(crate) fn measured(n: &Net, ul: u64, dl: u64) {
    let up_seid = *n.plane.sessions().keys().next().unwrap();
    let c = mobicore_upf::urr::UsageCounts { ul_octets: ul, dl_octets: dl, ul_packets: ul / 100, dl_packets: dl / 100 };
    n.plane.set_usage(up_seid, sxa::URR_SESSION, c);
}

#[test]
fn each_session_has_a_urr_and_its_usage_comes_back_at_deletion() {
    let mut n = Net::new(Net::cfg());
    let r = created(n.s11(&S11Request::CreateSession(csr(1))));
    let rules = n.plane.sessions().into_values().next().unwrap();
    let urr = &rules.urrs[&sxa::URR_SESSION];
    assert!(urr.measure_volume && urr.measure_duration);
    assert_eq!(urr.measurement_period, None, "no periodic reports by default");
    assert!(rules.pdrs.values().all(|p| p.urr_ids == vec![sxa::URR_SESSION]), "both PDRs count into it");

    measured(&n, 12_000, 340_000);
    let sgw_teid = r.sgw_fteid.unwrap().teid;
    let d = n.s11(&S11Request::DeleteSession(DeleteSessionRequest { sgw_teid, linked_ebi: Ebi(5) }));
    assert_eq!(d, Some(S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED)));
    // The Session Deletion Response carried a Usage Report (IE 79).
    assert_eq!(n.gw.counters.value("usage_reports"), 1);
    assert_eq!(n.gw.counters.value("usage_uplink_octets"), 12_000);
    assert_eq!(n.gw.counters.value("usage_downlink_octets"), 340_000);
}

#[test]
fn periodic_usage_reports_are_answered_and_added_up() {
    let mut cfg = Net::cfg();
    cfg.usage_period_secs = 60;
    let mut n = Net::new(cfg);
    let r = created(n.s11(&S11Request::CreateSession(csr(1))));
    let rules = n.plane.sessions().into_values().next().unwrap();
    assert_eq!(rules.urrs[&sxa::URR_SESSION].measurement_period, Some(60));

    measured(&n, 1_000, 5_000);
    n.now += std::time::Duration::from_secs(60);
    n.upf.handle_timeout(n.now);
    n.drive();
    assert_eq!(n.upf.counters.value("pfcp_session_report_usar_sent"), 1);
    assert_eq!(n.upf.counters.value("pfcp_session_report_accepted"), 1, "the SGW-C answered Request accepted");
    assert_eq!(n.gw.counters.value("usage_uplink_octets"), 1_000);
    let sgw_teid = r.sgw_fteid.unwrap().teid;
    assert_eq!(n.gw.session(sgw_teid).unwrap().usage.downlink_octets, 5_000);

    // What came after the periodic report is in the final one.
    measured(&n, 1_500, 9_000);
    n.s11(&S11Request::DeleteSession(DeleteSessionRequest { sgw_teid, linked_ebi: Ebi(5) }));
    assert_eq!(n.gw.counters.value("usage_reports"), 2);
    assert_eq!(n.gw.counters.value("usage_uplink_octets"), 1_500);
    assert_eq!(n.gw.counters.value("usage_downlink_octets"), 9_000);
}

#[test]
fn a_session_report_for_an_unknown_seid_is_answered_context_not_found() {
    let mut n = Net::new(Net::cfg());
    let ies = vec![rs_pfcp::ie::report_type::ReportType::downlink_data_report().to_ie()];
    let req = sxa::encode(sxa::SESSION_REPORT_REQUEST, Some(0xdead), 77, &ies);
    n.gw.handle_pfcp(n.now, a(UPF), &req);
    let t = n.gw.poll_transmit().expect("an answer");
    let (h, ies) = sxa::decode(&t.bytes).unwrap();
    assert_eq!((h.msg_type, h.seq), (sxa::SESSION_REPORT_RESPONSE, 77));
    assert_eq!(sxa::cause_of(&ies), 65);
    assert_eq!(n.gw.counters.value("pfcp_report_unknown_session"), 1);
    // A Usage Report that does not decode is counted, and still answered.
    created(n.s11(&S11Request::CreateSession(csr(1))));
    let bad = rs_pfcp::ie::Ie::new(rs_pfcp::ie::IeType::UsageReportWithinSessionReportRequest, vec![0, 81, 0, 1]);
    let req =
        sxa::encode(sxa::SESSION_REPORT_REQUEST, Some(n.gw.sessions().values().next().unwrap().cp_seid), 78, &[bad]);
    n.gw.handle_pfcp(n.now, a(UPF), &req);
    let t = n.gw.poll_transmit().expect("an answer");
    assert_eq!(sxa::cause_of(&sxa::decode(&t.bytes).unwrap().1), 1);
    assert_eq!(n.gw.counters.value("pfcp_usage_report_malformed"), 1);
}
