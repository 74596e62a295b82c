//! The peer state machine, two peers in memory under a virtual clock: no
//! sockets, no sleeps.

use mobicore_common::counters::Counters;
use mobicore_diameter::base::{self, LocalIdentity};
use mobicore_diameter::dict::{avp, cmd, result};
use mobicore_diameter::framing::FrameDecoder;
use mobicore_diameter::peer::{Peer, PeerConfig, PeerEvent, PeerState};
use mobicore_diameter::Message;
use std::time::{Duration, Instant};

const TW: Duration = Duration::from_secs(30);

fn cfg(host: &str) -> PeerConfig {
    let mut c = PeerConfig::s6a(LocalIdentity::new(host, "mobicore.local"));
    c.watchdog_interval = TW;
    c
}

/// Moves what `from` sends into `to`; returns the messages carried.
fn carry(from: &mut Peer, to: &mut Peer, now: Instant) -> Vec<Message> {
    let mut seen = Vec::new();
    if let Some(b) = from.poll_transmit() {
        let mut d = FrameDecoder::default();
        d.push(&b);
        while let Some(f) = d.next_frame().unwrap() {
            seen.push(Message::parse(&f).unwrap());
            to.handle_frame(now, &f);
        }
    }
    seen
}

fn events(p: &mut Peer) -> Vec<PeerEvent> {
    std::iter::from_fn(|| p.poll_event()).collect()
}

fn open_pair(now: Instant) -> (Peer, Peer) {
    let mut mme = Peer::initiator(cfg("mme"), now, Counters::new());
    let mut hss = Peer::responder(cfg("hss"), now, Counters::new());
    let cer = carry(&mut mme, &mut hss, now);
    assert_eq!(cer[0].header.command_code, cmd::CAPABILITIES_EXCHANGE);
    let cea = carry(&mut hss, &mut mme, now);
    assert_eq!(cea[0].result_code(), Some(result::DIAMETER_SUCCESS));
    assert!(matches!(&events(&mut hss)[..], [PeerEvent::Up { origin_host, .. }] if origin_host == "mme"));
    assert!(matches!(&events(&mut mme)[..], [PeerEvent::Up { origin_host, .. }] if origin_host == "hss"));
    (mme, hss)
}

#[test]
fn capabilities_exchange_opens_both() {
    let (mme, hss) = open_pair(Instant::now());
    assert!(mme.is_open() && hss.is_open());
}

#[test]
fn watchdog_sends_dwr_when_idle_and_fails_without_dwa() {
    let t0 = Instant::now();
    let (mut mme, mut hss) = open_pair(t0);
    assert_eq!(mme.poll_timeout(), Some(t0 + TW));
    // Idle for Tw: DWR, answered, timer restarts.
    let t1 = t0 + TW;
    mme.handle_timeout(t1);
    let dwr = carry(&mut mme, &mut hss, t1);
    assert_eq!(dwr[0].header.command_code, cmd::DEVICE_WATCHDOG);
    assert!(dwr[0].header.request);
    let dwa = carry(&mut hss, &mut mme, t1);
    assert_eq!(dwa[0].result_code(), Some(2001));
    assert_eq!(mme.poll_timeout(), Some(t1 + TW));
    // Next DWR is not answered: after another Tw the connection is down.
    let t2 = t1 + TW;
    mme.handle_timeout(t2);
    assert!(mme.poll_transmit().is_some());
    mme.handle_timeout(t2 + TW);
    assert!(mme.is_closed());
    assert!(matches!(&events(&mut mme)[..], [PeerEvent::Down(_)]));
    assert_eq!(mme.counters().value("diameter_watchdog_failures"), 1);
}

#[test]
fn traffic_postpones_the_watchdog() {
    let t0 = Instant::now();
    let (mut mme, mut hss) = open_pair(t0);
    let t1 = t0 + TW / 2;
    let id = LocalIdentity::new("hss", "mobicore.local");
    hss.send(&base::dwr(&id, 1, 1));
    carry(&mut hss, &mut mme, t1);
    assert_eq!(mme.poll_timeout(), Some(t1 + TW));
    let dwa = carry(&mut mme, &mut hss, t1);
    assert_eq!(dwa.len(), 1, "the DWA");
    mme.handle_timeout(t0 + TW);
    assert!(mme.poll_transmit().is_none(), "no DWR before Tw after the last traffic");
}

#[test]
fn dpr_dpa_closes_both() {
    let t0 = Instant::now();
    let (mut mme, mut hss) = open_pair(t0);
    mme.close(t0);
    assert_eq!(mme.state(), PeerState::Closing);
    let dpr = carry(&mut mme, &mut hss, t0);
    assert_eq!(dpr[0].header.command_code, cmd::DISCONNECT_PEER);
    assert!(dpr[0].find(avp::DISCONNECT_CAUSE).is_some());
    assert!(hss.is_closed());
    carry(&mut hss, &mut mme, t0);
    assert!(mme.is_closed());
}

#[test]
fn cer_without_common_application_is_refused() {
    let now = Instant::now();
    let mut hss = Peer::responder(cfg("hss"), now, Counters::new());
    let mut cer = base::cer(&LocalIdentity::new("x", "y"), 1, 1);
    cer.avps.retain(|a| !avp::AUTH_APPLICATION_ID.matches(a) && !avp::VENDOR_SPECIFIC_APPLICATION_ID.matches(a));
    hss.handle_frame(now, &cer.to_vec());
    let cea = Message::parse(&hss.poll_transmit().unwrap()).unwrap();
    assert_eq!(cea.result_code(), Some(result::DIAMETER_NO_COMMON_APPLICATION));
    assert!(hss.is_closed());
}

#[test]
fn requests_reach_the_application_and_bad_ones_are_answered() {
    let t0 = Instant::now();
    let (mut mme, mut hss) = open_pair(t0);
    let local = LocalIdentity::new("mme", "mobicore.local");
    let imsi = "001010000000001".parse().unwrap();
    let req = mobicore_common::s6a::S6aRequest::PurgeUe(mobicore_common::s6a::PurgeUeRequest { imsi });
    let ctx = mobicore_diameter::s6a::RequestContext {
        session_id: "mme;1;1",
        local: &local,
        destination_realm: "mobicore.local",
        destination_host: None,
        hop_by_hop: 77,
        end_to_end: 77,
    };
    let m = mobicore_diameter::s6a::encode_request(&req, &ctx);
    mme.send(&m);
    carry(&mut mme, &mut hss, t0);
    assert!(matches!(&events(&mut hss)[..], [PeerEvent::Request(r)] if r.header.hop_by_hop == 77));
    // Unknown base command: 3001 with the E-bit.
    let mut bad = m.clone();
    bad.header.application_id = 0;
    bad.header.command_code = 4000;
    mme.send(&bad);
    carry(&mut mme, &mut hss, t0);
    let ans = carry(&mut hss, &mut mme, t0);
    assert_eq!(ans[0].result_code(), Some(result::DIAMETER_COMMAND_UNSUPPORTED));
    assert!(ans[0].header.error);
    let _ = events(&mut mme);
    // An answer for the application reaches it.
    let answer =
        mobicore_diameter::s6a::encode_answer(&m, &mobicore_common::s6a::S6aAnswer::PurgeUe(Ok(())), hss.local());
    hss.send(&answer);
    carry(&mut hss, &mut mme, t0);
    assert!(matches!(&events(&mut mme)[..], [PeerEvent::Answer(a)] if a.header.hop_by_hop == 77));
    // Garbage inside a well framed request: 5014, counted, still open.
    let mut raw = m.to_vec();
    raw[20 + 7] = 0xff;
    hss.handle_frame(t0, &raw);
    let ans = Message::parse(&hss.poll_transmit().unwrap()).unwrap();
    assert_eq!(ans.result_code(), Some(result::DIAMETER_INVALID_AVP_LENGTH));
    assert!(hss.is_open());
    assert_eq!(hss.counters().value("diameter_malformed"), 1);
}

#[test]
fn message_before_cer_closes() {
    let now = Instant::now();
    let mut hss = Peer::responder(cfg("hss"), now, Counters::new());
    hss.handle_frame(now, &base::dwr(&LocalIdentity::new("x", "y"), 1, 1).to_vec());
    assert!(hss.is_closed());
    let mut hss = Peer::responder(cfg("hss"), now, Counters::new());
    hss.handle_timeout(now + TW);
    assert!(hss.is_closed(), "no CER within Tw");
    // A shorter CER timeout bounds how long a silent connection is held.
    let mut c = cfg("hss");
    c.cer_timeout = Duration::from_secs(5);
    let mut hss = Peer::responder(c, now, Counters::new());
    assert_eq!(hss.poll_timeout(), Some(now + Duration::from_secs(5)));
    hss.handle_timeout(now + Duration::from_secs(4));
    assert!(!hss.is_closed());
    hss.handle_timeout(now + Duration::from_secs(5));
    assert!(hss.is_closed());
    assert_eq!(hss.counters().value("diameter_no_cer_in_time"), 1);
}

mod admission {
    use super::*;
    use mobicore_common::peers::PeerFilter;
    use mobicore_diameter::allowlist::{Admission, AllowedPeer, AllowedPeers};
    use proptest::prelude::*;
    use std::net::IpAddr;

    fn allowed() -> AllowedPeers {
        AllowedPeers(vec![
            AllowedPeer {
                origin_host: Some("mme".into()),
                origin_realm: "mobicore.local".into(),
                addrs: PeerFilter::hosts(["127.0.0.1".parse().unwrap()]),
            },
            AllowedPeer { origin_host: None, origin_realm: "edge.example".into(), addrs: PeerFilter::loopback() },
        ])
    }

    fn hss_from(ip: &str, now: Instant) -> Peer {
        let mut c = cfg("hss");
        c.admission = Admission::Listed { peers: allowed(), from: ip.parse::<IpAddr>().unwrap() };
        Peer::responder(c, now, Counters::new())
    }

    fn cer_from(host: &str, realm: &str) -> Vec<u8> {
        base::cer(&LocalIdentity::new(host, realm), 5, 5).to_vec()
    }

    fn answers(p: &mut Peer) -> Vec<Message> {
        let mut d = FrameDecoder::default();
        if let Some(b) = p.poll_transmit() {
            d.push(&b);
        }
        std::iter::from_fn(|| d.next_frame().unwrap()).map(|f| Message::parse(&f).unwrap()).collect()
    }

    fn purge(host: &str, hop: u32) -> Message {
        let local = LocalIdentity::new(host, "mobicore.local");
        let imsi = "001010000000001".parse().unwrap();
        let req = mobicore_common::s6a::S6aRequest::PurgeUe(mobicore_common::s6a::PurgeUeRequest { imsi });
        let ctx = mobicore_diameter::s6a::RequestContext {
            session_id: "mme;1;1",
            local: &local,
            destination_realm: "mobicore.local",
            destination_host: None,
            hop_by_hop: hop,
            end_to_end: hop,
        };
        mobicore_diameter::s6a::encode_request(&req, &ctx)
    }

    fn refused(p: &mut Peer) {
        let a = answers(p);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].header.command_code, cmd::CAPABILITIES_EXCHANGE);
        assert_eq!(a[0].result_code(), Some(result::DIAMETER_UNKNOWN_PEER));
        assert!(a[0].header.error, "RFC 6733 7.2: protocol error, E-bit");
        assert!(p.is_closed());
        assert_eq!(p.counters().value("diameter_cer_from_unknown_peer"), 1);
        assert!(events(p).iter().all(|e| matches!(e, PeerEvent::Down(_))));
    }

    #[test]
    fn cer_from_unknown_host_gets_unknown_peer_and_closes() {
        let now = Instant::now();
        let mut hss = hss_from("127.0.0.1", now);
        hss.handle_frame(now, &cer_from("rogue", "mobicore.local"));
        refused(&mut hss);
        // Whatever follows on the same stream is not taken.
        hss.handle_frame(now, &purge("rogue", 1).to_vec());
        assert!(events(&mut hss).is_empty());
        assert!(hss.poll_transmit().is_none());
    }

    #[test]
    fn allowed_host_from_another_address_is_unknown() {
        let now = Instant::now();
        let mut hss = hss_from("127.0.0.2", now);
        hss.handle_frame(now, &cer_from("mme", "mobicore.local"));
        refused(&mut hss);
        let mut hss = hss_from("127.0.0.1", now);
        hss.handle_frame(now, &cer_from("mme", "other.realm"));
        refused(&mut hss);
    }

    #[test]
    fn listed_host_and_realm_wide_entry_are_admitted() {
        let now = Instant::now();
        for (ip, host, realm) in
            [("127.0.0.1", "MME", "mobicore.local"), ("127.0.0.9", "any.edge.example", "edge.example")]
        {
            let mut hss = hss_from(ip, now);
            hss.handle_frame(now, &cer_from(host, realm));
            assert_eq!(answers(&mut hss)[0].result_code(), Some(result::DIAMETER_SUCCESS));
            assert!(hss.is_open());
            assert_eq!(hss.remote_host(), Some(host));
        }
    }

    #[test]
    fn requests_must_carry_the_origin_host_of_the_cer() {
        let now = Instant::now();
        let mut hss = hss_from("127.0.0.1", now);
        hss.handle_frame(now, &cer_from("mme", "mobicore.local"));
        let _ = (answers(&mut hss), events(&mut hss));
        // Another Origin-Host: refused, never reaches the application.
        hss.handle_frame(now, &purge("other", 7).to_vec());
        let a = answers(&mut hss);
        assert_eq!((a[0].header.hop_by_hop, a[0].result_code()), (7, Some(result::DIAMETER_UNABLE_TO_COMPLY)));
        assert!(events(&mut hss).is_empty());
        assert_eq!(hss.counters().value("diameter_request_from_other_origin_host"), 1);
        // No Origin-Host: DIAMETER_MISSING_AVP naming it.
        let mut m = purge("mme", 8);
        m.avps.retain(|a| !avp::ORIGIN_HOST.matches(a));
        hss.handle_frame(now, &m.to_vec());
        let a = answers(&mut hss);
        assert_eq!(a[0].result_code(), Some(result::DIAMETER_MISSING_AVP));
        let failed = a[0].find(avp::FAILED_AVP).unwrap().grouped().unwrap();
        assert_eq!(failed[0].code, avp::ORIGIN_HOST.code);
        assert!(events(&mut hss).is_empty());
        // The CER's own host (any case) is served.
        hss.handle_frame(now, &purge("MME", 9).to_vec());
        assert!(matches!(&events(&mut hss)[..], [PeerEvent::Request(r)] if r.header.hop_by_hop == 9));
        assert!(hss.is_open());
    }

    proptest! {
        /// Arbitrary octets after a refused CER, or after a CER from an
        /// admitted peer but under another Origin-Host, never reach the
        /// application and never panic.
        #[test]
        fn nothing_from_an_unadmitted_peer_reaches_the_application(
            admitted in any::<bool>(),
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..8),
            requests in proptest::collection::vec(any::<u32>(), 0..4),
        ) {
            let now = Instant::now();
            let mut hss = hss_from("127.0.0.1", now);
            let cer = if admitted { cer_from("mme", "mobicore.local") } else { cer_from("rogue", "mobicore.local") };
            let mut d = FrameDecoder::new(4096);
            d.push(&cer);
            for hop in &requests {
                d.push(&purge("rogue", *hop).to_vec());
            }
            for c in &chunks {
                d.push(c);
            }
            loop {
                match d.next_frame() {
                    Ok(Some(f)) => hss.handle_frame(now, &f),
                    Ok(None) => break,
                    Err(e) => { hss.handle_framing_error(e); break }
                }
                if hss.is_closed() { break }
            }
            for e in events(&mut hss) {
                match e {
                    PeerEvent::Request(r) => {
                        prop_assert!(admitted, "request from a refused peer reached the application");
                        let host = r.find(avp::ORIGIN_HOST).and_then(|a| a.as_str().ok()).unwrap_or("");
                        prop_assert!(host.eq_ignore_ascii_case("mme"), "request under another Origin-Host: {host}");
                    }
                    PeerEvent::Up { origin_host, .. } => prop_assert!(admitted && origin_host == "mme"),
                    _ => {}
                }
            }
            if !admitted {
                prop_assert!(hss.is_closed());
            }
        }
    }
}
