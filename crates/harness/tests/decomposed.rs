//! The decomposed MME only (issue 13: a front end, the router, three MME
//! hosts over one store, hot replication): a host dies and its heir serves
//! its UEs from the store, idle (by the next service request) or in the
//! middle of a procedure (from the step its record holds, written before
//! the step's messages went out).

use mobicore_elastic::HostId;
use mobicore_harness::{Decomposition, MmeMode, Network, NetworkConfig};
use mobicore_mme::transfer::UeKey;
use mobicore_ran::ue::Procedure;
use std::time::Duration;

const INACTIVITY: Duration = Duration::from_secs(10);

fn decomposed() -> NetworkConfig {
    NetworkConfig {
        mme_mode: MmeMode::Decomposed(Decomposition::default()),
        inactivity_timeout: Some(INACTIVITY),
        ..NetworkConfig::default()
    }
}

/// The live host holding UE `ue`.
fn holder(net: &Network, ue: u64) -> Option<HostId> {
    net.mme.decomposed().expect("a decomposed MME").holder(&UeKey::Imsi(net.imsi(ue)))
}

/// Kill host `victim`, which holds UE `ue`: the heir that loaded it, one
/// of the dead host's heirs.
fn kill_holder(net: &mut Network, ue: u64, victim: HostId) -> HostId {
    let heirs = net.mme.decomposed_mut().unwrap().kill_host(victim);
    let heir = holder(net, ue).expect("an heir loaded the UE");
    assert!(heirs.contains(&heir) && heir != victim, "{heir} of {heirs:?}");
    heir
}

fn connected(net: &Network, ue: u64) -> bool {
    net.enbs.iter().any(|e| e.ue(ue).is_some_and(|c| c.s1.is_some()))
}

/// What must survive a takeover of an idle UE: its GUTI and its PDN
/// connection at the S-GW (both ends' S11 F-TEIDs, its address).
fn identity(net: &Network, ue: u64) -> (Option<String>, String) {
    let s = net.sgw_session(ue).expect("a PDN connection at the S-GW");
    (net.guti(ue), format!("{:?} {:?} {:?} {:?}", s.sgw_s11, s.mme_s11, s.ue_ipv4, s.up_seid))
}

#[test]
fn a_dead_hosts_idle_ues_come_back_on_their_heirs_by_a_service_request() {
    let n = 9;
    let mut net = Network::all_attached(2, n, decomposed());
    net.advance(INACTIVITY + Duration::from_secs(1));
    assert_eq!(net.mme.counters().value("ue_idle"), n, "every UE idle");
    let before: Vec<_> = (0..n).map(|ue| identity(&net, ue)).collect();
    let hosts: Vec<HostId> = (0..n).map(|ue| holder(&net, ue).expect("a host holds it")).collect();
    // The host holding most UEs (the lowest number on a tie).
    let count = |h: HostId| hosts.iter().filter(|&&x| x == h).count();
    let victim = (1..=3).map(HostId).max_by_key(|&h| (count(h), std::cmp::Reverse(h.0))).unwrap();
    let victims: Vec<u64> = (0..n).filter(|&ue| hosts[ue as usize] == victim).collect();
    assert!(victims.len() >= 3, "{hosts:?}");
    let attaches = net.mme.counters().value("attach_complete");
    let taken_over = net.mme.counters().value("host_ue_taken_over");

    let heirs = net.mme.decomposed_mut().unwrap().kill_host(victim);
    assert!(!heirs.is_empty() && !heirs.contains(&victim), "{heirs:?}");
    // The heirs loaded every UE of the dead host from the store (their
    // timers run there now), each UE at the heir of its replica group,
    // and nothing else moved.
    let m = net.mme.counters();
    assert_eq!(m.value("host_ues_adopted"), victims.len() as u64);
    assert_eq!(m.value("host_ue_taken_over") - taken_over, victims.len() as u64);
    let mut heir_of = std::collections::HashMap::new();
    for ue in 0..n {
        let now = holder(&net, ue).expect("held");
        match victims.contains(&ue) {
            true => {
                assert!(heirs.contains(&now), "UE {ue} at {now}, not an heir");
                heir_of.insert(ue, now);
            }
            false => assert_eq!(now, hosts[ue as usize], "UE {ue}"),
        }
    }
    // Their replica groups (of their IMSIs, fixed here) spread them over
    // both heirs.
    let used: std::collections::BTreeSet<HostId> = heir_of.values().copied().collect();
    assert_eq!(used.len(), 2, "{heir_of:?}");
    assert_eq!(net.mme.stats().attached, n as usize);

    for &ue in &victims {
        let now = net.now;
        let enb = net.enb_of(ue);
        net.enbs[enb].start_service_request(now, ue).unwrap();
        net.drive();
        assert_eq!(net.last_result(ue, Procedure::ServiceRequest), Some(Ok(())), "{:?}", net.outcomes(ue));
        assert!(connected(&net, ue));
        assert_eq!(identity(&net, ue), before[ue as usize], "UE {ue}: same GUTI and PDN connection");
        assert!(net.sgw_session(ue).unwrap().s1u_enb.is_some(), "UE {ue}: the heir's Modify Bearer");
        net.send_downlink(ue, 0);
        net.drive();
        assert_eq!(net.downlink_received(ue), &[0], "UE {ue}");
    }
    assert!(net.anomalies().is_empty(), "{:?}", net.anomalies());

    // Idle again, a victim's downlink: the S-GW's DDN names it by the MME
    // S11 TEID of the dead host, which the front end routes to the heir;
    // the heir pages it (TS 23.401 5.3.4.3).
    net.advance(INACTIVITY + Duration::from_secs(1));
    let ue = victims[0];
    assert!(!connected(&net, ue));
    let paged = net.mme.counters().value("paging_sent");
    net.send_downlink(ue, 1);
    net.drive();
    // One S1AP PAGING to each eNB of its TAI list: both, of TAC 1.
    assert_eq!(net.mme.counters().value("paging_sent"), paged + 2);
    assert_eq!(net.last_result(ue, Procedure::PagingResponse), Some(Ok(())), "{:?}", net.outcomes(ue));
    assert_eq!(net.downlink_received(ue), &[0, 1]);
    assert_eq!(holder(&net, ue), Some(heir_of[&ue]));
    // Routed by the dead host's number to its heir: the INITIAL UE
    // MESSAGEs by S-TMSI and the messages after them, and the DDN.
    let router = &net.mme.decomposed().unwrap().router;
    assert!(router.stats.to_heir > victims.len() as u64, "{:?}", router.stats);
    assert_eq!(router.stats.s11_to_host, 1, "{:?}", router.stats);

    let m = net.mme.counters();
    assert_eq!(m.value("attach_complete"), attaches, "no UE attached again");
    assert_eq!(m.value("host_ue_not_in_store"), 0);
    assert_eq!(net.mme.stats().attached, n as usize);
}

/// S1AP INITIAL CONTEXT SETUP REQUEST (TS 36.413 9.1.4.1): an initiating
/// message (0x00) of procedure code 9.
fn is_ics_request(pdu: &[u8]) -> bool {
    pdu.starts_with(&[0x00, 9])
}

#[test]
fn a_host_killed_between_the_initial_context_setup_request_and_its_response_its_heir_completes_the_attach() {
    let mut net = Network::new(1, 3, decomposed());
    net.s1_setup_all();
    for ue in 0..2 {
        net.attach(ue);
    }
    net.drive();
    // UE 2's attach, up to the INITIAL CONTEXT SETUP REQUEST (with the
    // ATTACH ACCEPT) having reached the eNB, its answer not yet the MME.
    let from = net.s1_downlink.len();
    net.attach(2);
    let sent = |net: &Network| net.s1_downlink[from..].last().is_some_and(|(_, pdu)| is_ics_request(pdu));
    while !sent(&net) {
        assert!(net.deliver_one(), "the attach stopped before its INITIAL CONTEXT SETUP: {:?}", net.outcomes(2));
    }
    let victim = holder(&net, 2).expect("a host holds the attaching UE");
    let others: Vec<(u64, HostId)> =
        (0..2).map(|ue| (ue, holder(&net, ue).unwrap())).filter(|&(_, h)| h != victim).collect();

    let heirs = net.mme.decomposed_mut().unwrap().kill_host(victim);
    // Hot replication: the record written before the request went out
    // holds the attach at that step.
    let heir = holder(&net, 2).expect("an heir loaded the attaching UE");
    assert!(heirs.contains(&heir), "{heir} of {heirs:?}");
    net.drive();
    assert!(net.attached(2), "{:?}", net.outcomes(2));
    assert_eq!(net.last_result(2, Procedure::Attach), Some(Ok(())));
    let m = net.mme.counters();
    assert_eq!(m.value("attach_complete"), 3, "UE 2's ATTACH COMPLETE was the heir's");
    assert_eq!(m.value("host_ue_not_in_store"), 0);
    assert_eq!(holder(&net, 2), Some(heir));
    for (ue, h) in others {
        assert_eq!(holder(&net, ue), Some(h), "UE {ue} stays");
    }
    // The heir's Modify Bearer gave the S-GW the eNB's tunnel: data flows.
    assert_eq!(net.sgw_session(2).unwrap().s1u_enb, net.enb_fteid(2));
    net.send_downlink(2, 0);
    net.drive();
    assert_eq!(net.downlink_received(2), &[0]);
}

/// After a handover the heir completed: UE `ue` is at eNB `target`, held
/// by `heir`, the S-GW has the target's tunnel, and downlink reaches it.
fn at_target_on_heir(net: &mut Network, ue: u64, target: usize, heir: HostId) {
    assert_eq!(holder(net, ue), Some(heir));
    assert_eq!(net.enb_of(ue), target);
    assert_eq!(net.sgw_session(ue).unwrap().s1u_enb, net.enb_fteid(ue), "the S-GW has the target's tunnel");
    net.send_downlink(ue, 0);
    net.drive();
    assert_eq!(net.downlink_received(ue), &[0]);
}

/// A host killed while it awaits the Modify Bearer Response of an X2
/// handover's path switch (TS 23.401 5.5.1.1.2 step 3): the answer goes to
/// the dead host and is lost, so the heir, which loads the UE at that step
/// (hot), sends the Modify Bearer again; the path switch completes there,
/// and downlink data takes the target eNB's tunnel.
#[test]
fn a_host_killed_awaiting_a_path_switchs_modify_bearer_its_heir_sends_it_again_and_the_handover_completes() {
    let mut net = Network::all_attached(2, 3, decomposed());
    let ue = 0;
    let victim = holder(&net, ue).expect("a host holds it");
    let key = UeKey::Imsi(net.imsi(ue));
    let id = net.mme.decomposed().unwrap().host(victim).unwrap().core.find_ue(&key).unwrap();
    let target = 1 - net.enb_of(ue);
    net.x2_handover(ue, target).unwrap();
    // Up to the host having taken the PATH SWITCH REQUEST: its Modify
    // Bearer is on its way, the answer not back.
    let switching = |net: &Network| {
        let core = &net.mme.decomposed().unwrap().host(victim).unwrap().core;
        core.ue_summary(id).is_some_and(|s| !s.settled)
    };
    while !switching(&net) {
        assert!(net.deliver_one(), "the path switch never reached the MME: {:?}", net.outcomes(ue));
    }
    let heir = kill_holder(&mut net, ue, victim);
    net.drive();
    let m = net.mme.counters();
    assert_eq!(m.value("x2_handover_completed"), 1, "the heir acknowledged the path switch");
    assert_eq!(m.value("ue_resumed_request"), 1, "the Modify Bearer went again");
    assert_eq!(m.value("path_switch_modify_bearer_failed"), 0);
    at_target_on_heir(&mut net, ue, target, heir);
    assert!(net.anomalies().is_empty(), "{:?}", net.anomalies());
}

/// Deliver messages until `done`, failing with `what` if the network goes
/// quiet first.
fn deliver_until(net: &mut Network, ue: u64, what: &str, done: impl Fn(&Network) -> bool) {
    while !done(net) {
        assert!(net.deliver_one(), "{what} never happened: {:?}", net.outcomes(ue));
    }
}

/// A host killed while it awaits the S-GW's Create Indirect Data
/// Forwarding Tunnel Response of an S1 handover (TS 23.401 5.5.1.2.2 step
/// 8): the answer goes to the dead host and is lost, so the heir sends the
/// request again (the S-GW replaces the tunnel); the Handover Command
/// follows, the handover completes there, and downlink takes the target.
#[test]
fn a_host_killed_awaiting_an_s1_handovers_forwarding_tunnel_its_heir_asks_again_and_the_handover_completes() {
    let mut net = Network::all_attached(2, 3, decomposed());
    let ue = 0;
    let victim = holder(&net, ue).expect("a host holds it");
    let target = 1 - net.enb_of(ue);
    let (now, cell) = (net.now, net.enbs[target].cell());
    let source = net.enb_of(ue);
    net.enbs[source].start_s1_handover(now, ue, cell, false).unwrap();
    let asked = |net: &Network| net.spgwc.counters.value("s11_create_indirect_forwarding") == 1;
    deliver_until(&mut net, ue, "the Create Indirect Data Forwarding Tunnel Request", asked);
    let heir = kill_holder(&mut net, ue, victim);
    net.drive();
    assert_eq!(net.last_result(ue, Procedure::S1Handover), Some(Ok(())), "{:?}", net.outcomes(ue));
    let m = net.mme.counters();
    assert_eq!(m.value("ue_resumed_request"), 1, "the request went again");
    assert_eq!(m.value("handover_forwarding_tunnel_failed"), 0);
    assert_eq!(net.spgwc.counters.value("s11_create_indirect_forwarding"), 2);
    at_target_on_heir(&mut net, ue, target, heir);
    // The tunnel goes as after any S1 handover (step 21), from the heir.
    let hold = net.mme.config().indirect_forwarding_hold_ms;
    net.advance(Duration::from_millis(hold));
    assert!(net.sgw_session(ue).unwrap().forwarding.is_none(), "Delete Indirect Data Forwarding Tunnel");
    assert!(net.anomalies().is_empty(), "{:?}", net.anomalies());
}

/// Decomposed, with a second APN ("ims") subscribed and served.
fn decomposed_with_ims() -> Network {
    let mut cfg = decomposed();
    cfg.apns = vec![mobicore_hss::ApnProfile::new("internet"), mobicore_hss::ApnProfile::new("ims")];
    cfg.spgwc.apns.push(mobicore_spgwc::config::ApnConfig::ipv4("ims", std::net::Ipv4Addr::new(10, 60, 0, 0), 16));
    Network::all_attached(1, 3, cfg)
}

fn apns(net: &Network, ue: u64) -> Vec<String> {
    let imsi = net.imsi(ue);
    let mut v: Vec<String> = net.spgwc.sessions().values().filter(|s| s.imsi == imsi).map(|s| s.apn.clone()).collect();
    v.sort();
    v
}

/// A host killed while a UE's PDN connectivity (TS 24.301 6.5.1) awaits
/// its Create Session Response, then another while the PDN disconnect
/// awaits its Delete Session Response: each heir sends the request again,
/// and both procedures complete with no new attach.
#[test]
fn hosts_killed_awaiting_a_pdn_connectivitys_and_a_pdn_disconnects_s11_answer_their_heirs_ask_again() {
    let mut net = decomposed_with_ims();
    let ue = 0;
    let attaches = net.mme.counters().value("attach_complete");
    let now = net.now;
    net.enbs[0].start_pdn_connectivity(now, ue, "ims").unwrap();
    let asked = |net: &Network| apns(net, ue).contains(&"ims".to_string());
    deliver_until(&mut net, ue, "the PDN connectivity's Create Session Request", asked);
    let first = holder(&net, ue).expect("a host holds it");
    kill_holder(&mut net, ue, first);
    net.drive();
    assert_eq!(net.last_result(ue, Procedure::PdnConnectivity), Some(Ok(())), "{:?}", net.outcomes(ue));
    // The heir's request replaced the session the first one made.
    assert_eq!(apns(&net, ue), ["ims", "internet"], "one ims session");
    assert_eq!(net.spgwc.counters.value("sessions_replaced"), 1);
    let pdn = net.enbs[0].ue(ue).unwrap().ue.pdn_connections()[0].clone();
    assert_eq!(pdn.apn, "ims");

    let deleted = net.spgwc.counters.value("s11_delete_session");
    let now = net.now;
    net.enbs[0].start_pdn_disconnect(now, ue, pdn.ebi).unwrap();
    let asked = |net: &Network| net.spgwc.counters.value("s11_delete_session") == deleted + 1;
    deliver_until(&mut net, ue, "the PDN disconnect's Delete Session Request", asked);
    let second = holder(&net, ue).expect("a host holds it");
    kill_holder(&mut net, ue, second);
    net.drive();
    assert_eq!(net.last_result(ue, Procedure::PdnDisconnect), Some(Ok(())), "{:?}", net.outcomes(ue));
    // The heir's request found the session gone (TS 29.274 7.2.10: Context
    // Not Found), and the bearers went as after any answer.
    assert_eq!(net.mme.counters().value("s11_delete_session_failed"), 1);
    assert_eq!(net.mme.counters().value("frontend_s11_response_host_gone"), 1, "the first answer, lost");
    assert_eq!(apns(&net, ue), ["internet"]);
    assert_eq!(net.enbs[0].ue(ue).unwrap().erabs.len(), 1, "the ims E-RAB released");
    net.send_downlink(ue, 0);
    net.drive();
    assert_eq!(net.downlink_received(ue), &[0], "the default PDN carries on");
    assert_eq!(net.mme.counters().value("attach_complete"), attaches, "no UE attached again");
    assert!(net.anomalies().is_empty(), "{:?}", net.anomalies());
}

/// Deliver until UE `ue`'s last `what` has a result, up to a minute of
/// virtual time: what a dead host had sent goes again at its timer
/// (T3450, T3460, T3470: 6 s, TS 24.301 10.2).
fn finish_step(net: &mut Network, ue: u64, what: Procedure) {
    net.drive();
    for _ in 0..60 {
        if net.last_result(ue, what).is_some() {
            break;
        }
        net.advance(Duration::from_secs(1));
    }
    assert_eq!(net.last_result(ue, what), Some(Ok(())), "{what:?}: {:?}", net.outcomes(ue));
}

/// T3412 of [`two_of_three_attached`]: a periodic TAU a minute into idle.
const T3412_S: u64 = 60;

/// Two eNBs, UEs 0 and 1 attached, UE 2 not yet; a second APN, "ims".
fn two_of_three_attached() -> Network {
    let mut cfg = decomposed();
    cfg.mme.t3412_seconds = T3412_S;
    cfg.apns = vec![mobicore_hss::ApnProfile::new("internet"), mobicore_hss::ApnProfile::new("ims")];
    cfg.spgwc.apns.push(mobicore_spgwc::config::ApnConfig::ipv4("ims", std::net::Ipv4Addr::new(10, 60, 0, 0), 16));
    let mut net = Network::new(2, 3, cfg);
    net.s1_setup_all();
    for ue in 0..2 {
        net.attach(ue);
    }
    net.drive();
    assert!((0..2).all(|ue| net.attached(ue)));
    net
}

/// The duplicate window of a host's death (`mme-frontend` sends the
/// messages a dead host had not said it handled to the heir): for each
/// UE-associated uplink of UE 2's life in turn ([`life`]), the host
/// handling it dies right after, its record written (hot) and what it
/// sent lost, and the heir takes the same message again
/// (`Decomposed::kill_after_uplink`). Every step completes, UE 2 attaches
/// once and keeps its GUTI, the other UEs stay, and no eNB sees anything
/// amiss. What makes the repeats harmless: an INITIAL UE MESSAGE whose
/// connection the heir took over is dropped (`Router::route_again`,
/// `Mme::taken_over_initial`; at the attach, the service request and the
/// detach); a repeated UE CONTEXT RELEASE REQUEST, HANDOVER REQUIRED,
/// HANDOVER REQUEST ACKNOWLEDGE or HANDOVER NOTIFY meets its procedure
/// going on (the last two resend what the dead host sent, or need
/// nothing); what the dead host sent otherwise goes again at the heir
/// (`Mme::resume_taken_over`) or at the NAS timers.
#[test]
fn whichever_uplink_a_host_dies_after_the_heir_takes_it_again_and_every_step_completes() {
    let mut n = 1;
    loop {
        let mut net = two_of_three_attached();
        let attaches = net.mme.counters().value("attach_complete");
        net.mme.decomposed_mut().unwrap().kill_after_uplink(n);
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| life(&mut net)));
        let got = got.unwrap_or_else(|e| panic!("uplink {n}: {}", panic_text(&e)));
        let m = net.mme.counters();
        if m.value("harness_uplink_again") == 0 {
            break;
        }
        assert_eq!(m.value("attach_complete"), attaches + 1, "uplink {n}: UE 2's one attach");
        assert!(got.iter().all(|g| g.is_some() && *g == got[0]), "uplink {n}: its GUTI: {got:?}");
        assert_eq!(m.value("store_cas_conflict"), 0, "uplink {n}");
        assert!((0..2).all(|ue| net.attached(ue)), "uplink {n}: UEs 0 and 1 stay");
        assert!(net.anomalies().is_empty(), "uplink {n}: {:?}", net.anomalies());
        n += 1;
    }
    assert!(n > 15, "only {} uplinks in UE 2's life", n - 1);
}

/// UE 2's life, each step run to its end: attach, idle, a service request,
/// a PDN connection to a second APN and its disconnect, an S1 handover to
/// the other eNB, an X2 handover back, idle again, a periodic TAU, detach. UEs 0 and 1 go idle with it (and update too). Its
/// GUTI after each step up to the X2 handover.
fn life(net: &mut Network) -> Vec<Option<String>> {
    let ue = 2;
    net.attach(ue);
    finish_step(net, ue, Procedure::Attach);
    let mut gutis = vec![net.guti(ue)];
    net.advance(INACTIVITY + Duration::from_secs(1));
    assert!(!connected(net, ue), "idle: {:?}", net.outcomes(ue));
    let now = net.now;
    let enb = net.enb_of(ue);
    net.enbs[enb].start_service_request(now, ue).unwrap();
    finish_step(net, ue, Procedure::ServiceRequest);
    gutis.push(net.guti(ue));
    let now = net.now;
    net.enbs[enb].start_pdn_connectivity(now, ue, "ims").unwrap();
    finish_step(net, ue, Procedure::PdnConnectivity);
    assert_eq!(apns(net, ue), ["ims", "internet"]);
    let pdns = net.enbs[enb].ue(ue).unwrap().ue.pdn_connections();
    let ebi = pdns.iter().find(|p| p.apn == "ims").expect("the ims PDN connection").ebi;
    let now = net.now;
    net.enbs[enb].start_pdn_disconnect(now, ue, ebi).unwrap();
    finish_step(net, ue, Procedure::PdnDisconnect);
    assert_eq!(apns(net, ue), ["internet"]);
    let (source, target) = (net.enb_of(ue), 1 - net.enb_of(ue));
    let cell = net.enbs[target].cell();
    net.enbs[source].start_s1_handover(net.now, ue, cell, false).unwrap();
    finish_step(net, ue, Procedure::S1Handover);
    assert_eq!(net.enb_of(ue), target);
    gutis.push(net.guti(ue));
    net.x2_handover(ue, source).unwrap();
    finish_step(net, ue, Procedure::X2Handover);
    assert_eq!(net.enb_of(ue), source);
    gutis.push(net.guti(ue));
    net.advance(INACTIVITY + Duration::from_secs(1));
    net.advance(Duration::from_secs(T3412_S - 10));
    // (Its ACCEPT may give a new GUTI, TS 24.301 5.5.3.2.4.)
    finish_step(net, ue, Procedure::PeriodicTau);
    net.advance(INACTIVITY + Duration::from_secs(1));
    net.detach(ue, false);
    finish_step(net, ue, Procedure::Detach);
    gutis
}

fn panic_text(e: &Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}
