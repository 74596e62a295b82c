//! An independent check of what the eNB puts on the wire: tshark dissects
//! the S1AP (and the plain NAS inside) of a whole attach and detach. It
//! fails as root where tshark or text2pcap cannot run, and is skipped
//! (with a note) only without root.

use std::process::Command;
use std::time::Instant;

use mobicore_common::tools;

use super::mme::*;

/// text2pcap's input: each packet as offset-prefixed hex lines.
pub(super) fn hexdump(pdus: &[Vec<u8>]) -> String {
    let mut out = String::new();
    for pdu in pdus {
        for (i, chunk) in pdu.chunks(16).enumerate() {
            let bytes: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
            out.push_str(&format!("{:06x} {}\n", i * 16, bytes.join(" ")));
        }
    }
    out
}

#[test]
fn tshark_dissects_every_enb_message_without_error() {
    if !tools::require(&["tshark", "text2pcap"]) {
        return;
    }
    let now = Instant::now();
    let mut enb = ready_enb(now);
    let mut mme = FakeMme::new();
    let cell = crate::enb::s1ap_build::CellIdentity::new(serving(), 1, 1).unwrap();
    let mut pdus = vec![crate::enb::s1ap_build::s1_setup_request(&cell, "enb-1").unwrap(), s1_setup_response()];
    enb.start_attach(now, 0).unwrap();
    let sent = sends(&mut enb);
    let (id, nas) = uplink_nas(&sent[0].1);
    pdus.push(sent[0].1.clone());
    mme.attach_request(&nas);
    let auth = downlink_nas(id, mme.authentication_request(64));
    pdus.push(auth.clone());
    enb.handle_s1ap(now, 1, &auth);
    let sent = sends(&mut enb);
    pdus.push(sent[0].1.clone());
    mme.authentication_response(&uplink_nas(&sent[0].1).1);
    let r = mme.replayed();
    let smc = downlink_nas(id, mme.security_mode_command(r));
    pdus.push(smc.clone());
    enb.handle_s1ap(now, 1, &smc);
    let sent = sends(&mut enb);
    pdus.push(sent[0].1.clone());
    mme.unprotect(&uplink_nas(&sent[0].1).1);
    let accept = mme.attach_accept();
    let ics = mme.ics_request(id, accept);
    pdus.push(ics.clone());
    enb.handle_s1ap(now, 1, &ics);
    pdus.extend(sends(&mut enb).into_iter().map(|(_, p)| p));
    enb.start_detach(now, 0, false).unwrap();
    pdus.extend(sends(&mut enb).into_iter().map(|(_, p)| p));
    enb.handle_s1ap(now, 1, &release_command(id));
    pdus.extend(sends(&mut enb).into_iter().map(|(_, p)| p));
    assert_eq!(enb.reset_s1(now), Ok(0));
    pdus.extend(sends(&mut enb).into_iter().map(|(_, p)| p));
    // The answers of a PDN connection after attach (E-RAB setup, release).
    use crate::enb::s1ap_build::{erab_release_response, erab_setup_response, ErabSetup};
    let setup = ErabSetup { e_rab_id: 6, address: std::net::Ipv4Addr::new(127, 0, 0, 9), teid: 0x1234 };
    pdus.push(erab_setup_response(5, 1, &[setup]).unwrap());
    pdus.push(erab_release_response(5, 1, &[6]).unwrap());

    let dir = std::env::temp_dir().join(format!("mobicore-ran-wire-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (txt, pcap) = (dir.join("s1ap.txt"), dir.join("s1ap.pcap"));
    std::fs::write(&txt, hexdump(&pdus)).unwrap();
    let t2p = tools::run(Command::new("text2pcap").args(["-q", "-S", "36412,36412,18"]).arg(&txt).arg(&pcap));
    let out = t2p.and_then(|_| tools::run(Command::new("tshark").arg("-r").arg(&pcap).arg("-V")));
    let _ = std::fs::remove_dir_all(&dir);
    let out = out.expect("text2pcap and tshark -r");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("Malformed"), "{text}");
    assert!(!text.contains("[Expert Info (Error"), "{text}");
    for expected in [
        "S1SetupRequest",
        "initialUEMessage",
        "Attach request",
        "uplinkNASTransport",
        "Authentication response",
        "InitialContextSetupResponse",
        "UEContextReleaseComplete",
        "ResetType",
        "E-RABSetupResponse",
        "E-RABReleaseResponse",
    ] {
        assert!(text.contains(expected), "no {expected} in the dissection");
    }
}
