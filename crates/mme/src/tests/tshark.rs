//! An independent check of the wire: tshark dissects every S1AP PDU (and
//! the NAS inside, EEA0 so readable) of a full attach and a detach, and of
//! the ESM procedures a real UE runs (ESM information, PCO, a second PDN
//! connection with its E-RAB setup, a PDN disconnect with its E-RAB release).

use super::*;
use mobicore_common::tools;
use std::process::Command;

fn pcap(pdus: &[Vec<u8>]) -> Vec<u8> {
    // pcap header, link type 147 (USER0) mapped to s1ap below.
    let mut out = Vec::new();
    for v in [0xa1b2c3d4u32.to_le_bytes().to_vec(), 2u16.to_le_bytes().to_vec(), 4u16.to_le_bytes().to_vec()] {
        out.extend(v);
    }
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
/// tshark's verbose dissection of the S1AP PDUs `log`, checked for
/// malformed packets and expert errors.
fn dissect(log: &[Vec<u8>]) -> String {
    let path = std::env::temp_dir().join(format!("mobicore-mme-{}-{}.pcap", std::process::id(), log.len()));
    std::fs::write(&path, pcap(log)).unwrap();
    let out = tools::run(
        Command::new("tshark")
            .args(["-r", path.to_str().unwrap(), "-V"])
            .args(["-o", r#"uat:user_dlts:"User 0 (DLT=147)","s1ap","0","","0","""#])
            .args(["-o", "nas-eps.null_decipher:TRUE"]),
    );
    let _ = std::fs::remove_file(&path);
    let out = out.expect("tshark -r");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!text.contains("Malformed"), "malformed packet:\n{text}");
    assert!(!text.contains("Expert Info (Error"), "dissector error:\n{text}");
    text
}

#[test]
fn tshark_dissects_attach_and_detach_without_errors() {
    if !tools::require(&["tshark"]) {
        return;
    }
    let mut h = Harness::default();
    let mut ue = h.attach("001010000000061", 61);
    let d = ue.detach_request(false);
    h.up(&ue, d);
    let (r, _) = expect_s11(&h.drain());
    h.s11(r, mobicore_common::s11::S11Response::DeleteSession(mobicore_common::s11::GtpCause::REQUEST_ACCEPTED));
    let _ = h.drain();
    let text = dissect(&h.log);
    for name in [
        "S1SetupResponse",
        "Authentication request",
        "Security mode command",
        "InitialContextSetupRequest",
        "Attach accept",
        "Activate default EPS bearer context request",
        "Detach accept",
        "UEContextReleaseCommand",
    ] {
        assert!(text.contains(name), "tshark did not see {name}");
    }
}

#[test]
fn tshark_dissects_esm_procedures_without_errors() {
    if !tools::require(&["tshark"]) {
        return;
    }
    let mut h = Harness::default();
    super::esm::attach_with_esm_information(&mut h, "001010000000062", 62);
    super::esm::second_pdn_and_disconnect(&mut h, "001010000000063", 63);
    let text = dissect(&h.log);
    for name in [
        "ESM information request",
        "ESM information response",
        "Protocol Configuration Options",
        "PDN connectivity request",
        "E-RABSetupRequest",
        "E-RABSetupResponse",
        "Activate default EPS bearer context accept",
        "PDN disconnect request",
        "E-RABReleaseCommand",
        "Deactivate EPS bearer context request",
        "E-RABReleaseResponse",
        "Deactivate EPS bearer context accept",
    ] {
        assert!(text.contains(name), "tshark did not see {name}");
    }
}

/// The S1AP a real eNB runs beyond attach (TS 36.413): S1 Reset whole and
/// partial with their acknowledges, eNB Configuration Update with its
/// acknowledge and failure, ICS Failure and the release, UE Capability Info
/// Indication and an ICS carrying the UE Radio Capability, NAS Non Delivery,
/// procedures we do not implement and the Error Indications (with
/// Criticality Diagnostics) that answer them.
#[test]
fn tshark_dissects_s1ap_interop_procedures_without_errors() {
    use super::s1_interop::*;
    use mobicore_common::sctp_api::AssocId;
    if !tools::require(&["tshark"]) {
        return;
    }
    let mut h = Harness::default();
    let a = h.attach("001010000000064", 64);
    let a_id = a.mme_ue_id.unwrap();
    h.s1(ue_capability_info(a_id, 64, &UE_RADIO_CAPABILITY));
    let _ = ics_of_registered_ue(&mut h, a_id);
    h.s1(handover_required(a_id, 64));
    h.s1_on(AssocId(1), 0, write_replace_warning_response());
    h.s1(location_report(a_id, 64));
    h.s1(release_request_with_unknown_ie(a_id, 64, oxirush_s1ap::s1ap::Criticality::reject));
    h.s1(nas_non_delivery(a_id, 64, vec![0x07, 0x46]));
    h.s1_on(AssocId(1), 0, enb_configuration_update("001", "01", 7));
    h.s1_on(AssocId(1), 0, enb_configuration_update("208", "93", 7));
    let _ = h.drain();
    let b = h.attach("001010000000065", 65);
    h.s1_on(AssocId(1), 0, reset_part(&[(b.mme_ue_id, Some(65)), (None, Some(999))]));
    h.s1(ics_failure(4242, 66));
    h.s1_on(AssocId(1), 0, reset_all());
    let _ = h.drain();
    let text = dissect(&h.log);
    for name in [
        "UECapabilityInfoIndication",
        "UERadioCapability",
        "HandoverRequired",
        "WriteReplaceWarningResponse",
        "LocationReport",
        "NASNonDeliveryIndication",
        "ErrorIndication",
        "CriticalityDiagnostics",
        "ENBConfigurationUpdate",
        "ENBConfigurationUpdateAcknowledge",
        "ENBConfigurationUpdateFailure",
        "InitialContextSetupFailure",
        "Reset",
        "ResetAcknowledge",
        "UE-associatedLogicalS1-ConnectionListResAck",
    ] {
        assert!(text.contains(name), "tshark did not see {name}");
    }
}
