//! One S6a connection driven without sockets (octets in, answers out, a
//! virtual clock): the allowlist, the bound on what a connection reads and
//! on the answers it holds for a peer that does not read, and a property
//! test that nothing a refused peer sends gets vectors.

use mobicore_common::peers::PeerFilter;
use mobicore_common::s6a::*;
use mobicore_common::{Imsi, Plmn};
use mobicore_diameter::allowlist::{AllowedPeer, AllowedPeers};
use mobicore_diameter::base::{self, LocalIdentity};
use mobicore_diameter::dict::{avp, cmd, result};
use mobicore_diameter::framing::FrameDecoder;
use mobicore_diameter::Message;
use mobicore_hss::connection::Connection;
use mobicore_hss::{Hss, HssConfig, Subscriber, SubscriberStore};
use proptest::prelude::*;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

const K: [u8; 16] = [0x46, 0x5b, 0x5c, 0xe8, 0xb1, 0x99, 0xb4, 0x9f, 0xaa, 0x5f, 0x0a, 0x2e, 0xe2, 0x38, 0xa6, 0xbc];
const OPC: [u8; 16] = [0xcd, 0x63, 0xcb, 0x71, 0x95, 0x4a, 0x9f, 0x4e, 0x48, 0xa5, 0x99, 0x4e, 0x37, 0xa0, 0x2b, 0xaf];
const MME: &str = "mme.mobicore.local";
const REALM: &str = "mobicore.local";

fn imsi() -> Imsi {
    "001010000000001".parse().unwrap()
}

fn cfg() -> HssConfig {
    HssConfig {
        // The MME from 127.0.0.1 only; a whole partner realm from 127.0.0.2.
        peers: AllowedPeers(vec![
            AllowedPeer {
                origin_host: Some(MME.into()),
                origin_realm: REALM.into(),
                addrs: PeerFilter::hosts(["127.0.0.1".parse().unwrap()]),
            },
            AllowedPeer {
                origin_host: None,
                origin_realm: "partner.example".into(),
                addrs: PeerFilter::hosts(["127.0.0.2".parse().unwrap()]),
            },
        ]),
        max_message_octets: 4096,
        max_unsent_answer_octets: 2048,
        ..Default::default()
    }
}

fn conn_with(cfg: HssConfig, from: &str, now: Instant) -> Connection {
    let store = SubscriberStore::in_memory();
    store.add(Subscriber::new(imsi(), K, OPC)).unwrap();
    let hss = Hss::with_seed(store, 1);
    let local = LocalIdentity::new("hss.mobicore.local", REALM);
    let remote: SocketAddr = format!("{from}:40000").parse().unwrap();
    Connection::new(Arc::new(cfg), hss, local, remote, 1, now)
}

fn conn(from: &str, now: Instant) -> Connection {
    conn_with(cfg(), from, now)
}

fn cer(host: &str, realm: &str) -> Vec<u8> {
    base::cer(&LocalIdentity::new(host, realm), 1, 1).to_vec()
}

fn air_from(host: &str, hop: u32) -> Vec<u8> {
    let id = LocalIdentity::new(host, REALM);
    let ctx = mobicore_diameter::s6a::RequestContext {
        session_id: "mme;1;1",
        local: &id,
        destination_realm: REALM,
        destination_host: None,
        hop_by_hop: hop,
        end_to_end: hop,
    };
    let visited_plmn: Plmn = "00101".parse().unwrap();
    let req = AuthInfoRequest { imsi: imsi(), visited_plmn, num_vectors: 1, resync: None };
    mobicore_diameter::s6a::encode_request(&S6aRequest::AuthenticationInformation(req), &ctx).to_vec()
}

/// Everything the connection has to send, taken (as if written).
fn sent(c: &mut Connection) -> Vec<Message> {
    let mut d = FrameDecoder::default();
    d.push(c.transmit());
    let n = c.transmit().len();
    c.advance_transmit(n);
    std::iter::from_fn(|| d.next_frame().unwrap()).map(|f| Message::parse(&f).unwrap()).collect()
}

fn carries_subscriber_data(m: &Message) -> bool {
    m.find(avp::AUTHENTICATION_INFO).is_some() || m.find(avp::SUBSCRIPTION_DATA).is_some()
}

#[test]
fn allowed_mme_gets_vectors() {
    let now = Instant::now();
    let mut c = conn("127.0.0.1", now);
    c.input(now, &[cer(MME, REALM), air_from(MME, 2)].concat());
    let out = sent(&mut c);
    assert_eq!(out[0].result_code(), Some(result::DIAMETER_SUCCESS));
    assert_eq!(out[1].header.command_code, cmd::AUTHENTICATION_INFORMATION);
    assert!(out[1].find(avp::AUTHENTICATION_INFO).is_some());
}

#[test]
fn unknown_peer_gets_unknown_peer_and_no_vectors() {
    let now = Instant::now();
    for (from, host, realm) in [
        ("127.0.0.1", "rogue.mobicore.local", REALM),
        // The MME's identity from the partner's address.
        ("127.0.0.2", MME, REALM),
    ] {
        let mut c = conn(from, now);
        // The AIR right behind the CER, in the same segment.
        let took = c.input(now, &[cer(host, realm), air_from(host, 2)].concat());
        assert!(took > 0);
        let out = sent(&mut c);
        assert_eq!(out.len(), 1, "only the CEA: {out:?}");
        assert_eq!(out[0].result_code(), Some(result::DIAMETER_UNKNOWN_PEER));
        assert!(out[0].header.error);
        assert!(c.is_closed());
        assert_eq!(c.read_room(), 0, "nothing more is read");
        assert_eq!(c.input(now, &air_from(host, 3)), 0);
        assert!(c.transmit().is_empty());
    }
}

#[test]
fn message_announcing_more_than_the_maximum_is_cut_off() {
    let now = Instant::now();
    let mut c = conn("127.0.0.1", now);
    c.input(now, &cer(MME, REALM));
    sent(&mut c);
    let mut big = air_from(MME, 5);
    big[1..4].copy_from_slice(&[0xff, 0xff, 0xff]);
    c.input(now, &big);
    let out = sent(&mut c);
    assert_eq!(out[0].header.hop_by_hop, 5);
    assert_eq!(out[0].result_code(), Some(result::DIAMETER_INVALID_MESSAGE_LENGTH));
    assert!(c.is_closed());
}

#[test]
fn a_slow_peer_cannot_make_it_hold_more_than_the_maximum() {
    let now = Instant::now();
    let mut c = conn("127.0.0.1", now);
    c.input(now, &cer(MME, REALM));
    sent(&mut c);
    // A header announcing exactly the maximum, then octets one by one, and
    // then far more than one message: what is held never passes 4096.
    let mut hdr = air_from(MME, 6)[..20].to_vec();
    hdr[1..4].copy_from_slice(&[0, 0x10, 0x00]);
    assert_eq!(c.input(now, &hdr), 20);
    let mut taken = 20;
    for _ in 0..1000 {
        taken += c.input(now, &[0]);
        assert!(c.buffered() <= 4096);
    }
    let flood = vec![0u8; 1 << 20];
    let n = c.input(now, &flood);
    assert!(n < 4096, "took {n} of a flood");
    taken += n;
    assert!(taken >= 4096, "the whole message was read");
    assert!(c.buffered() <= 4096 + 2048);
}

#[test]
fn a_peer_that_does_not_read_its_answers_is_not_read() {
    let now = Instant::now();
    let mut c = conn("127.0.0.1", now);
    c.input(now, &cer(MME, REALM));
    sent(&mut c);
    let requests: Vec<u8> = (0..64).flat_map(|i| air_from(MME, 100 + i)).collect();
    let mut fed = 0;
    let mut answers = Vec::new();
    while answers.len() < 64 {
        fed += c.input(now, &requests[fed..]);
        assert!(c.buffered() <= 4096 + 2048 + 1024, "held {}", c.buffered());
        if c.read_room() == 0 {
            assert!(c.transmit().len() >= 2048);
            assert!(c.peer().counters().value("s6a_requests_held_for_unread_answers") >= 1);
        }
        // The peer reads now and then: all answers, in order.
        answers.extend(sent(&mut c));
        c.process(now);
    }
    assert!(c.peer().counters().value("s6a_requests_held_for_unread_answers") >= 1, "the bound was hit");
    let hops: Vec<u32> = answers.iter().map(|a| a.header.hop_by_hop).collect();
    assert_eq!(hops, (100..164).collect::<Vec<_>>());
    assert!(answers.iter().all(|a| a.find(avp::AUTHENTICATION_INFO).is_some()));
}

proptest! {
    /// Arbitrary octets after the CER of a peer that is not allowed (an
    /// unknown identity, or an allowed one from another peer's address),
    /// even with well-formed AIRs and ULRs among them and cut anywhere,
    /// never panic and never get an answer carrying vectors or
    /// subscription data.
    #[test]
    fn unallowed_peer_never_gets_subscriber_data(
        who in 0usize..3,
        garbage in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 0..6),
        airs in proptest::collection::vec(0usize..7, 0..4),
        cut in 1usize..300,
    ) {
        let now = Instant::now();
        let (from, host, realm) = [
            ("127.0.0.1", "rogue.mobicore.local", REALM),
            ("127.0.0.2", MME, REALM),
            ("127.0.0.1", "x.partner.example", "partner.example"),
        ][who];
        let mut c = conn(from, now);
        let mut stream = cer(host, realm);
        for (i, g) in garbage.iter().enumerate() {
            if airs.contains(&i) {
                stream.extend(air_from(host, i as u32));
            }
            stream.extend(g);
        }
        for chunk in stream.chunks(cut) {
            c.input(now, chunk);
            prop_assert!(c.buffered() <= 4096 + 2048 + 1024);
        }
        c.handle_timeout(now + std::time::Duration::from_secs(3600));
        let out = sent(&mut c);
        for m in &out {
            prop_assert!(!carries_subscriber_data(m), "subscriber data to a refused peer: {m:?}");
        }
        prop_assert_eq!(out[0].result_code(), Some(result::DIAMETER_UNKNOWN_PEER));
        prop_assert!(c.is_closed());
    }

    /// An allowed peer's arbitrary octets never panic, and what the
    /// connection holds stays within its bounds.
    #[test]
    fn allowed_peer_garbage_stays_within_bounds(
        garbage in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..2000), 0..6),
        cut in 1usize..5000,
    ) {
        let now = Instant::now();
        let mut c = conn("127.0.0.1", now);
        let mut stream = cer(MME, REALM);
        for g in &garbage {
            stream.extend(air_from(MME, 9));
            stream.extend(g);
        }
        for chunk in stream.chunks(cut) {
            let mut rest = chunk;
            while !rest.is_empty() && !c.is_closed() {
                let n = c.input(now, rest);
                rest = &rest[n..];
                prop_assert!(c.buffered() <= 4096 + 2048 + 1024);
                sent(&mut c);
            }
        }
    }
}

#[test]
fn a_connection_without_cer_is_closed_after_the_cer_timeout() {
    let t0 = Instant::now();
    let mut c = conn_with(HssConfig { cer_timeout_secs: 3, ..cfg() }, "127.0.0.1", t0);
    assert_eq!(c.poll_timeout(), Some(t0 + std::time::Duration::from_secs(3)));
    c.handle_timeout(t0 + std::time::Duration::from_secs(3));
    assert!(c.is_closed());
    assert!(c.transmit().is_empty());
    assert_eq!(c.peer().counters().value("diameter_no_cer_in_time"), 1);
}
