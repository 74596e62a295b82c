//! Property tests: decoders never panic on arbitrary bytes, and emit then
//! parse round-trips.

use mobicore_sctp::cookie::{Cookie, CookieKey};
use mobicore_sctp::wire::tlv::Tlvs;
use mobicore_sctp::wire::{Chunk, ChunkRepr, CommonHeader, DataRepr, InitRepr, Packet, SackRepr};
use mobicore_sctp::{Endpoint, EndpointConfig, Transport};
use proptest::prelude::*;
use std::time::{Duration, Instant};

fn parse_all(bytes: &[u8]) {
    if let Ok(p) = Packet::new_checked(bytes) {
        let _ = CommonHeader::parse(&p);
        let _ = p.verify_checksum();
        for c in p.chunks().flatten() {
            let _ = c.raw();
            if let Ok(r) = ChunkRepr::parse(&c) {
                // Whatever parses must emit without panicking.
                let mut buf = vec![0u8; r.buffer_len()];
                r.emit(&mut buf);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn packet_and_chunks_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        parse_all(&bytes);
    }

    #[test]
    fn chunk_of_each_type_never_panics(ty in 0u8..16, flags: u8, body in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut c = vec![ty, flags];
        c.extend_from_slice(&((body.len() + 4) as u16).to_be_bytes());
        c.extend_from_slice(&body);
        if let Ok(v) = Chunk::new_checked(&c[..]) {
            let _ = ChunkRepr::parse(&v);
        }
    }

    #[test]
    fn tlvs_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        for t in Tlvs::new(&bytes) {
            let _ = t;
        }
    }

    #[test]
    fn cookie_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
        prop_assert!(Cookie::decode(&bytes, &CookieKey(1, 2)).is_none() || bytes.len() == mobicore_sctp::cookie::COOKIE_LEN);
    }

    /// The whole endpoint on checksummed garbage: never panics, never answers
    /// with more than a handful of packets.
    #[test]
    fn endpoint_never_panics_on_garbage(body in proptest::collection::vec(any::<u8>(), 0..400), vtag: u32, ty in 0u8..16) {
        let now = Instant::now();
        let cfg = EndpointConfig::new("127.0.0.1:36412".parse().unwrap(), Transport::RawIp);
        let mut ep = Endpoint::new(&cfg, 36412, 7, now);
        let mut pkt = vec![0u8; 12];
        pkt[0..2].copy_from_slice(&5000u16.to_be_bytes());
        pkt[2..4].copy_from_slice(&36412u16.to_be_bytes());
        pkt[4..8].copy_from_slice(&vtag.to_be_bytes());
        pkt.push(ty);
        pkt.extend_from_slice(&body);
        Packet::new_unchecked(&mut pkt[..]).fill_checksum();
        ep.handle_packet(now, "127.0.0.2".parse().unwrap(), &pkt);
        let mut buf = Vec::new();
        let mut n = 0;
        while ep.poll_transmit(now, &mut buf).is_some() {
            parse_all(&buf);
            n += 1;
            prop_assert!(n < 4);
        }
        ep.handle_timeout(now + Duration::from_secs(3600));
    }

    #[test]
    fn data_round_trips(u: bool, b: bool, e: bool, tsn: u32, sid: u16, ssn: u16, ppid: u32,
                        data in proptest::collection::vec(any::<u8>(), 1..100)) {
        let r = ChunkRepr::Data(DataRepr { unordered: u, begin: b, end: e, tsn, stream_id: sid, ssn, ppid, data: &data });
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        prop_assert_eq!(buf.len() % 4, 0);
        prop_assert_eq!(ChunkRepr::parse(&Chunk::new_checked(&buf[..]).unwrap()).unwrap(), r);
    }

    #[test]
    fn sack_round_trips(cum: u32, rwnd: u32, gaps in proptest::collection::vec(any::<(u16, u16)>(), 0..20),
                        dups in proptest::collection::vec(any::<u32>(), 0..10)) {
        let r = ChunkRepr::Sack(SackRepr { cum_tsn_ack: cum, a_rwnd: rwnd, gap_blocks: gaps, dup_tsns: dups });
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        prop_assert_eq!(ChunkRepr::parse(&Chunk::new_checked(&buf[..]).unwrap()).unwrap(), r);
    }

    #[test]
    fn init_round_trips(tag: u32, rwnd: u32, os: u16, mis: u16, tsn: u32, cookie in proptest::collection::vec(any::<u8>(), 0..40)) {
        let mut params = Vec::new();
        mobicore_sctp::wire::Tlv { ty: 7, value: &cookie }.push(&mut params);
        params.truncate(4 + cookie.len()); // canonical: no padding after the last parameter
        let r = ChunkRepr::InitAck(InitRepr { initiate_tag: tag, a_rwnd: rwnd, outbound_streams: os, inbound_streams: mis, initial_tsn: tsn, params: &params });
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        prop_assert_eq!(ChunkRepr::parse(&Chunk::new_checked(&buf[..]).unwrap()).unwrap(), r);
    }
}
