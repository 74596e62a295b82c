use super::*;
use proptest::prelude::*;

#[test]
fn gpdu_minimal_header_bytes() {
    let r = Repr { header: HeaderRepr::gpdu(0x01020304), body: Body::GPdu(&[0x45, 0, 0, 20]) };
    let b = r.to_vec();
    assert_eq!(b, [0x30, 0xff, 0, 4, 1, 2, 3, 4, 0x45, 0, 0, 20]);
    assert_eq!(parse(&b).unwrap(), r);
}

#[test]
fn gpdu_helper_is_the_minimal_repr() {
    assert_eq!(gpdu(0x01020304, &[0x45, 0, 0, 20]), [0x30, 0xff, 0, 4, 1, 2, 3, 4, 0x45, 0, 0, 20]);
    assert_eq!(gpdu(7, &[]), [0x30, 0xff, 0, 0, 0, 0, 0, 7]);
}

#[test]
fn emit_into_reuses_the_callers_buffer() {
    let r = Repr { header: HeaderRepr::gpdu(5).with_seq(9), body: Body::GPdu(b"xy") };
    let mut out = vec![0xaa; 100];
    r.emit_into(&mut out);
    assert_eq!(out, r.to_vec());
    assert_eq!(out, [0x32, 0xff, 0, 6, 0, 0, 0, 5, 0, 9, 0, 0, b'x', b'y']);
}

#[test]
fn echo_request_and_response_bytes() {
    let req = [0x32, 1, 0, 4, 0, 0, 0, 0, 0x12, 0x34, 0, 0];
    let r = parse(&req).unwrap();
    assert_eq!(r.body, Body::EchoRequest);
    assert_eq!(r.header.seq, Some(0x1234));
    let resp = echo_response(r.header.seq);
    assert_eq!(resp, [0x32, 2, 0, 6, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 14, 0]);
    assert_eq!(parse(&resp).unwrap().body, Body::EchoResponse { recovery: 0 });
}

#[test]
fn error_indication_bytes() {
    let b = error_indication(7, 0xdeadbeef, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), Some(2152));
    // flags E+S, type 26, TEID 0, seq 7, ext UDP Port (len 1: 0x0868, next 0),
    // TEID Data I, GTP-U Peer Address (TLV, 4 octets).
    assert_eq!(
        b,
        [
            0x36, 26, 0, 20, 0, 0, 0, 0, 0, 7, 0, 0x40, 1, 0x08, 0x68, 0, 16, 0xde, 0xad, 0xbe, 0xef, 133, 0, 4, 10, 0,
            0, 1
        ]
    );
    let r = parse(&b).unwrap();
    assert_eq!(r.body, Body::ErrorIndication { teid_data_i: 0xdeadbeef, peer: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)) });
    assert_eq!(r.header.extensions, vec![Extension::udp_port(2152)]);
}

#[test]
fn end_marker_bytes() {
    assert_eq!(end_marker(9), [0x30, 254, 0, 0, 0, 0, 0, 9]);
    assert_eq!(parse(&end_marker(9)).unwrap().body, Body::EndMarker);
}

#[test]
fn gpdu_with_pdu_session_container_and_seq() {
    let mut h = HeaderRepr::gpdu(5);
    h.seq = Some(1);
    h.extensions.push(Extension::pdu_session_container(true, 9));
    let b = Repr { header: h.clone(), body: Body::GPdu(b"abcd") }.to_vec();
    assert_eq!(&b[..16], [0x36, 0xff, 0, 12, 0, 0, 0, 5, 0, 1, 0, 0x85, 1, 0x10, 9, 0]);
    let p = Packet::new_checked(&b[..]).unwrap();
    assert_eq!(p.payload_offset(), 16);
    assert_eq!(p.payload(), b"abcd");
    assert_eq!(p.extensions().next(), Some((0x85, &[0x10u8, 9][..])));
    let r = parse(&b).unwrap();
    assert_eq!(r.header.extensions[0].qfi(), Some(9));
}

#[test]
fn rejects_bad_input() {
    assert_eq!(parse(&[0x30, 0xff, 0, 0]).unwrap_err(), Error::Truncated);
    assert_eq!(parse(&[0x50, 0xff, 0, 0, 0, 0, 0, 0]).unwrap_err(), Error::Version(2));
    assert_eq!(parse(&[0x20, 0xff, 0, 0, 0, 0, 0, 0]).unwrap_err(), Error::ProtocolType);
    assert_eq!(parse(&[0x30, 0xff, 0, 9, 0, 0, 0, 0]).unwrap_err(), Error::Length);
    // E flag, extension of length 0.
    assert_eq!(parse(&[0x34, 0xff, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0x85, 0, 0, 0, 0]).unwrap_err(), Error::ExtensionLength);
    // Extension running past the length.
    assert_eq!(parse(&[0x34, 0xff, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0x85, 2, 0, 0, 0]).unwrap_err(), Error::Truncated);
    // Echo Response without Recovery.
    assert_eq!(parse(&[0x32, 2, 0, 4, 0, 0, 0, 0, 0, 1, 0, 0]).unwrap_err(), Error::MissingIe(ie::RECOVERY));
}

fn arb_ext() -> impl Strategy<Value = Extension> {
    (
        prop_oneof![Just(0x85u8), Just(0x40), Just(0x20), Just(0xc0), Just(0x81)],
        proptest::collection::vec(any::<u8>(), 0..3),
    )
        .prop_map(|(kind, n)| {
            // Content is 4n-2 octets on the wire; pick a length that needs no padding.
            let len = [2usize, 6, 10][n.len() % 3];
            Extension { kind, content: (0..len).map(|i| i as u8 ^ kind).collect() }
        })
}

fn arb_header() -> impl Strategy<Value = HeaderRepr> {
    (
        any::<u32>(),
        proptest::option::of(any::<u16>()),
        proptest::option::of(any::<u8>()),
        proptest::collection::vec(arb_ext(), 0..3),
    )
        .prop_map(|(teid, seq, npdu, extensions)| HeaderRepr { msg_type: msg::G_PDU, teid, seq, npdu, extensions })
}

proptest! {
    #[test]
    fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = parse(&b);
        if let Ok(p) = Packet::new_checked(&b[..]) {
            let _ = p.payload();
            let _ = p.extensions().count();
        }
    }

    #[test]
    fn never_panics_on_plausible_headers(flags in 0x30u8..0x38, t in any::<u8>(), rest in proptest::collection::vec(any::<u8>(), 0..40)) {
        let mut b = vec![flags, t];
        b.extend_from_slice(&((rest.len() + 4).min(0xffff) as u16).to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 1]);
        b.extend_from_slice(&rest);
        let _ = parse(&b);
    }

    #[test]
    fn gpdu_round_trips(h in arb_header(), payload in proptest::collection::vec(any::<u8>(), 0..100)) {
        let r = Repr { header: h, body: Body::GPdu(&payload) };
        let b = r.to_vec();
        prop_assert_eq!(b.len(), r.buffer_len());
        let back = parse(&b).unwrap();
        prop_assert_eq!(back, r);
    }

    #[test]
    fn emit_with_payload_equals_repr_emit(h in arb_header(), payload in proptest::collection::vec(any::<u8>(), 0..100), slack in 0usize..8) {
        let whole = Repr { header: h.clone(), body: Body::GPdu(&payload) }.to_vec();
        let mut buf = vec![0x5a; whole.len() + slack];
        let n = h.emit_with_payload(&mut buf, &payload);
        prop_assert_eq!(&buf[..n], &whole[..]);
        prop_assert!(buf[n..].iter().all(|&b| b == 0x5a));
    }

    #[test]
    fn control_round_trips(seq in any::<u16>(), teid in any::<u32>(), a in any::<[u8; 4]>(), a6 in any::<[u8; 16]>(), v6 in any::<bool>()) {
        let peer = if v6 { IpAddr::V6(a6.into()) } else { IpAddr::V4(a.into()) };
        let b = error_indication(seq, teid, peer, Some(seq));
        prop_assert_eq!(parse(&b).unwrap().body, Body::ErrorIndication { teid_data_i: teid, peer });
        prop_assert_eq!(parse(&echo_response(Some(seq))).unwrap().header.seq, Some(seq));
        prop_assert_eq!(parse(&end_marker(teid)).unwrap().header.teid, teid);
    }
}
