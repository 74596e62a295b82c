//! An independent check of the wire: tshark dissects every message of
//! idle mode and mobility (Downlink Data Notification, its Acknowledge and
//! Failure Indication (the Acknowledge with its Throttling IE), Create / Delete Indirect Data Forwarding Tunnel
//! Request and Response) as we encode them, with no malformed packet and
//! no expert error.

use mobicore_common::s11::*;
use mobicore_common::tools;
use mobicore_common::{Arp, Ebi, Fteid, Teid};
use mobicore_gtp::s11::encode_response;
use mobicore_gtp::s11::{encode_incoming_answer, encode_incoming_request, encode_notification, encode_request};
use std::net::Ipv4Addr;
use std::process::Command;

/// A pcap file of `pdus` with link type 147 (USER0), which tshark is told
/// to read as GTPv2.
fn pcap(pdus: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(0xa1b2c3d4u32.to_le_bytes());
    out.extend(2u16.to_le_bytes());
    out.extend(4u16.to_le_bytes());
    for v in [0u32, 0, 65535, 147] {
        out.extend(v.to_le_bytes());
    }
    for (i, p) in pdus.iter().enumerate() {
        for v in [i as u32, 0, p.len() as u32, p.len() as u32] {
            out.extend(v.to_le_bytes());
        }
        out.extend(p);
    }
    out
}

#[test]
fn tshark_dissects_idle_mode_and_mobility_messages() {
    if !tools::require(&["tshark"]) {
        return;
    }
    let enb = Fteid { teid: Teid(0x1111), ipv4: Ipv4Addr::new(10, 200, 1, 1) };
    let sgw = Fteid { teid: Teid(0x2222), ipv4: Ipv4Addr::new(10, 200, 1, 2) };
    let arp = Arp { priority_level: 9, pre_emption_capability: false, pre_emption_vulnerability: true };
    let pdus = [
        encode_incoming_request(
            &S11IncomingRequest::DownlinkDataNotification(DownlinkDataNotification {
                mme_teid: Teid(7),
                ebi: Some(Ebi(5)),
                arp: Some(arp),
            }),
            Some(Fteid { teid: Teid(8), ipv4: Ipv4Addr::LOCALHOST }),
            1,
        ),
        encode_incoming_answer(
            &S11IncomingAnswer::DownlinkDataNotificationAck(DownlinkDataNotificationAck {
                cause: GtpCause::REQUEST_ACCEPTED,
                data_notification_delay_ms: Some(500),
                dl_buffering_duration_s: Some(120),
                dl_buffering_suggested_packets: Some(100),
                throttling: Some(DdnThrottling { delay_s: 120, factor_percent: 50 }),
            }),
            8,
            1,
        ),
        encode_notification(
            &S11Notification::DownlinkDataNotificationFailure(DownlinkDataNotificationFailure {
                sgw_teid: Teid(8),
                cause: GtpCause::UE_NOT_RESPONDING,
            }),
            2,
        ),
        encode_request(
            &S11Request::CreateIndirectForwarding(CreateIndirectForwardingRequest {
                sgw_teid: Teid(8),
                bearers: vec![ForwardingBearer { ebi: Ebi(5), fteid: enb }],
            }),
            3,
        ),
        encode_response(
            &S11Response::CreateIndirectForwarding(CreateIndirectForwardingResponse {
                cause: GtpCause::REQUEST_ACCEPTED,
                bearers: vec![ForwardingBearer { ebi: Ebi(5), fteid: sgw }],
            }),
            7,
            3,
            None,
        ),
        encode_request(&S11Request::DeleteIndirectForwarding(DeleteIndirectForwardingRequest { sgw_teid: Teid(8) }), 4),
        encode_response(&S11Response::DeleteIndirectForwarding(GtpCause::REQUEST_ACCEPTED), 7, 4, None),
    ];
    let pdus: Vec<Vec<u8>> = pdus.iter().map(|m| m.to_bytes()).collect();
    let path = std::env::temp_dir().join(format!("mobicore-gtp-{}.pcap", std::process::id()));
    std::fs::write(&path, pcap(&pdus)).unwrap();
    let dlt = ["-o", r#"uat:user_dlts:"User 0 (DLT=147)","gtpv2","0","","0","""#];
    let out = tools::run(Command::new("tshark").args(["-r", path.to_str().unwrap(), "-V"]).args(dlt));
    let expert =
        tools::run(Command::new("tshark").args(["-r", path.to_str().unwrap(), "-q", "-z", "expert,error"]).args(dlt));
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&out.expect("tshark -r").stdout).into_owned();
    assert!(!text.contains("Malformed"), "malformed packet:\n{text}");
    assert!(!text.contains("Expert Info (Error"), "dissector error:\n{text}");
    let e = String::from_utf8_lossy(&expert.expect("tshark expert").stdout).into_owned();
    assert!(!e.lines().any(|l| l.trim_start().starts_with("Error")), "tshark expert errors:\n{e}");
    for name in [
        "Downlink Data Notification (176)",
        "Downlink Data Notification Acknowledgement (177)",
        "Downlink Data Notification Failure Indication (70)",
        "Create Indirect Data Forwarding Tunnel Request (166)",
        "Create Indirect Data Forwarding Tunnel Response (167)",
        "Delete Indirect Data Forwarding Tunnel Request (168)",
        "Delete Indirect Data Forwarding Tunnel Response (169)",
        "Allocation/Retention Priority (ARP)",
        "Delay Value",
        "EPC Timer",
        "Integer Number",
        "Throttling",
        "eNodeB/gNodeB GTP-U interface for DL data forwarding",
        "UE not responding",
    ] {
        assert!(text.contains(name), "tshark did not see {name:?}:\n{text}");
    }
}
