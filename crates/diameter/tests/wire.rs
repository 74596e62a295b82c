//! Byte round trips and property tests of the header, AVP and message
//! codecs and of the framing.

use mobicore_diameter::avp::{parse_avps, AvpRepr};
use mobicore_diameter::dict::{avp, VENDOR_3GPP};
use mobicore_diameter::framing::FrameDecoder;
use mobicore_diameter::header::{HeaderRepr, Packet};
use mobicore_diameter::{Message, WireError};
use proptest::prelude::*;

fn dwr_bytes() -> Vec<u8> {
    let id = mobicore_diameter::base::LocalIdentity::new("a.b", "b");
    mobicore_diameter::base::dwr(&id, 0x11223344, 0x55667788).to_vec()
}

#[test]
fn header_bytes_per_rfc_6733_3() {
    let b = dwr_bytes();
    assert_eq!(b[0], 1, "version");
    assert_eq!(u32::from_be_bytes([0, b[1], b[2], b[3]]) as usize, b.len());
    assert_eq!(b[4], 0x80, "R flag only");
    assert_eq!(&b[5..8], &[0, 1, 0x18], "command 280");
    assert_eq!(&b[8..12], &[0, 0, 0, 0]);
    assert_eq!(&b[12..16], &[0x11, 0x22, 0x33, 0x44]);
    assert_eq!(&b[16..20], &[0x55, 0x66, 0x77, 0x88]);
    let p = Packet::new_checked(&b[..]).unwrap();
    let h = HeaderRepr::parse(&p).unwrap();
    assert!(h.request && !h.proxiable && !h.error && !h.retransmit);
    assert_eq!(h.command_code, 280);
}

#[test]
fn avp_bytes_vendor_and_padding() {
    // Visited-PLMN-Id: code 1407, V+M, length 15, vendor 10415, 3 data + 1 pad.
    let a = avp::VISITED_PLMN_ID.octets(&[0x00, 0xf1, 0x10]);
    let b = a.to_vec();
    assert_eq!(b, vec![0, 0, 0x05, 0x7f, 0xc0, 0, 0, 15, 0, 0, 0x28, 0xaf, 0x00, 0xf1, 0x10, 0]);
    // Origin-Host: no V-bit, M-bit.
    let o = avp::ORIGIN_HOST.utf8("hss").to_vec();
    assert_eq!(o, vec![0, 0, 1, 8, 0x40, 0, 0, 11, b'h', b's', b's', 0]);
    // RAT-Type: V-bit without M.
    assert_eq!(avp::RAT_TYPE.u32(1004).to_vec()[4], 0x80);
    let parsed = parse_avps(&[b, o].concat()).unwrap();
    assert_eq!(parsed[0], a);
    assert_eq!(parsed[0].vendor_id, Some(VENDOR_3GPP));
    assert_eq!(parsed[1].as_str().unwrap(), "hss");
}

#[test]
fn grouped_avps_nest() {
    let g =
        avp::EXPERIMENTAL_RESULT.grouped(&[avp::VENDOR_ID.u32(VENDOR_3GPP), avp::EXPERIMENTAL_RESULT_CODE.u32(5001)]);
    let children = g.grouped().unwrap();
    assert_eq!(children.len(), 2);
    assert_eq!(children[1].as_u32().unwrap(), 5001);
    let ip = avp::HOST_IP_ADDRESS.address("10.0.0.1".parse().unwrap());
    assert_eq!(ip.as_address().unwrap().to_string(), "10.0.0.1");
}

#[test]
fn bad_lengths_are_typed_errors() {
    let mut b = dwr_bytes();
    // AVP length beyond the message: 5014 with the AVP for Failed-AVP.
    b[20 + 7] = 200;
    let e = Message::parse(&b).unwrap_err();
    assert!(matches!(e.error, WireError::AvpLength { code: 264, offset: 0 }));
    assert_eq!(e.error.result_code(), 5014);
    assert_eq!(e.failed_avp.unwrap().code, 264);
    assert!(e.header.is_some());
    // Message length not a multiple of 4: 5015.
    let mut b = dwr_bytes();
    b[3] += 1;
    b.push(0);
    assert_eq!(Message::parse(&b).unwrap_err().error.result_code(), 5015);
    // Version 2: 5011.
    let mut b = dwr_bytes();
    b[0] = 2;
    assert_eq!(Message::parse(&b).unwrap_err().error, WireError::Version(2));
    assert_eq!(Message::parse(&[1, 0]).unwrap_err().error, WireError::Truncated);
    // AVP length below its header.
    let mut b = dwr_bytes();
    b[20 + 7] = 4;
    assert_eq!(Message::parse(&b).unwrap_err().error.result_code(), 5014);
}

#[test]
fn framing_partial_reads_and_several_messages_per_read() {
    let one = dwr_bytes();
    let stream: Vec<u8> = [one.clone(), one.clone(), one.clone()].concat();
    for chunk in [1, 3, 7, 20, one.len(), stream.len()] {
        let mut d = FrameDecoder::default();
        let mut frames = Vec::new();
        for c in stream.chunks(chunk) {
            d.push(c);
            while let Some(f) = d.next_frame().unwrap() {
                frames.push(f);
            }
        }
        assert_eq!(frames.len(), 3, "chunk {chunk}");
        assert!(frames.iter().all(|f| f[..] == one[..]));
        assert_eq!(d.buffered(), 0);
    }
    let mut d = FrameDecoder::default();
    let mut bad = one.clone();
    bad[1..4].copy_from_slice(&[0, 0, 4]);
    d.push(&bad);
    let e = d.next_frame().unwrap_err();
    assert_eq!(e.header.unwrap().hop_by_hop, 0x11223344);
    let mut d = FrameDecoder::new(1024);
    d.push(&[1, 0x10, 0, 0]);
    assert!(d.next_frame().is_err(), "above the limit");
}

fn arb_avp() -> impl Strategy<Value = AvpRepr> {
    (
        any::<u32>(),
        proptest::option::of(any::<u32>()),
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(|(code, vendor_id, mandatory, protected, data)| AvpRepr {
            code,
            vendor_id,
            mandatory,
            protected,
            data,
        })
}

fn arb_message() -> impl Strategy<Value = Message> {
    (
        any::<[bool; 4]>(),
        0u32..0x0100_0000,
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        proptest::collection::vec(arb_avp(), 0..8),
    )
        .prop_map(|(f, command_code, application_id, hop_by_hop, end_to_end, avps)| Message {
            header: HeaderRepr {
                request: f[0],
                proxiable: f[1],
                error: f[2],
                retransmit: f[3],
                command_code,
                application_id,
                hop_by_hop,
                end_to_end,
            },
            avps,
        })
}

proptest! {
    #[test]
    fn parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = Message::parse(&b);
        let _ = parse_avps(&b);
        if let Ok(p) = Packet::new_checked(&b[..]) {
            let _ = HeaderRepr::parse(&p);
        }
        let mut d = FrameDecoder::new(4096);
        d.push(&b);
        while let Ok(Some(f)) = d.next_frame() {
            let _ = Message::parse(&f);
        }
    }

    #[test]
    fn mutated_messages_never_panic(m in arb_message(), idx in any::<usize>(), byte in any::<u8>()) {
        let mut b = m.to_vec();
        let i = idx % b.len();
        b[i] = byte;
        if let Ok(m) = Message::parse(&b) {
            for a in &m.avps {
                let _ = a.grouped();
                let _ = a.as_u32();
                let _ = a.as_str();
                let _ = a.as_address();
            }
            let _ = mobicore_diameter::s6a::decode_request(&m);
            let _ = mobicore_diameter::s6a::decode_answer(&m);
        }
    }

    #[test]
    fn emit_then_parse_round_trips(m in arb_message()) {
        let b = m.to_vec();
        prop_assert_eq!(b.len() % 4, 0);
        prop_assert_eq!(b.len(), m.buffer_len());
        prop_assert_eq!(Message::parse(&b).unwrap(), m);
    }
}

/// Read through `read_buf`, the decoder never holds more than its maximum,
/// however the stream is cut.
#[test]
fn framing_buffer_stays_within_the_maximum() {
    use bytes::BufMut;
    let one = dwr_bytes();
    let max = one.len() * 2 + 3;
    let stream: Vec<u8> = std::iter::repeat_n(one.clone(), 10).flatten().collect();
    for chunk in [1, 5, one.len() - 1, stream.len()] {
        let mut d = FrameDecoder::new(max);
        let (mut pos, mut frames) = (0, 0);
        while pos < stream.len() {
            let mut b = d.read_buf();
            let n = b.remaining_mut().min(chunk).min(stream.len() - pos);
            assert!(n > 0, "room after frames were taken");
            b.put_slice(&stream[pos..pos + n]);
            pos += n;
            assert!(d.buffered() <= max);
            while let Some(f) = d.next_frame().unwrap() {
                assert_eq!(f[..], one[..]);
                frames += 1;
            }
        }
        assert_eq!(frames, 10, "chunk {chunk}");
    }
    // A header announcing more than the maximum is refused at once.
    let mut d = FrameDecoder::new(max);
    let mut big = one.clone();
    big[1..4].copy_from_slice(&[0x01, 0, 0]);
    d.read_buf().put_slice(&big);
    let e = d.next_frame().unwrap_err();
    assert_eq!(e.error.result_code(), mobicore_diameter::dict::result::DIAMETER_INVALID_MESSAGE_LENGTH);
    assert!(e.header.is_some());
}
