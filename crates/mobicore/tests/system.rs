//! Whole-system tests over real sockets on loopback: the demo's capture
//! decodes cleanly in tshark, and bad input on every interface of a running
//! core is answered or counted while other UEs' attaches still complete,
//! and a core dropped without being stopped frees its ports.
//! All but the last need root (raw IP for SCTP); without it they say so and pass. As
//! root, a tshark that cannot run fails them, and so does a demo whose
//! user plane fell back from the XDP fast path to user space.

use bytes::Bytes;
use mobicore::allinone;
use mobicore::config::Config;
use mobicore_common::sctp_api::{SctpCommand, SctpEvent, PPID_S1AP};
use mobicore_common::tools::{self, is_root};
use mobicore_hss::SubscriberStore;
use mobicore_sctp::Transport;
use oxirush_s1ap::build_s1ap;
use oxirush_s1ap::s1ap::*;
use std::process::Command;
use std::time::Duration;

/// The data path the demo reports (its JSON `datapath`, or the `data
/// path:` of its first line) is the XDP fast path: as root on a kernel
/// with XDP it loads, and a silent fallback to user space is a failure.
const XDP_DATAPATH: &str = "XDP fast path + user-space slow path";

#[test]
fn demo_capture_decodes_without_malformed_packets_or_expert_errors() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    // As root the capture check must run.
    tools::require(&["tshark"]);
    let dir = std::env::temp_dir().join(format!("mobicore-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pcap, json) = (dir.join("demo.pcapng"), dir.join("demo.json"));
    // An S1-MME port of the kernel's choosing: an MME running on this host,
    // another test or a connection's ephemeral port is no obstacle.
    let cfg = dir.join("demo.toml");
    std::fs::write(&cfg, "[mme]\ns1ap = \"127.0.0.1:0\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mobicore"))
        .args(["demo", "--ues", "30", "--enbs", "2", "--quiet", "--sctp", "raw", "-c"])
        .arg(&cfg)
        .arg("--pcap")
        .arg(&pcap)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["attached"], 30);
    assert_eq!(v["detached"], 30);
    assert_eq!(v["failed"], 0);
    // The mobility phases after the traffic: every UE released to idle,
    // back by service request, handed over by X2 and by S1 (direct and
    // indirect forwarding), released again, TAU from idle; then detached
    // from idle. All of it is in the capture checked below.
    let phases: Vec<(String, u64, u64)> = v["mobility"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (p["procedure"].as_str().unwrap().to_string(), p["ok"].as_u64().unwrap(), p["failed"].as_u64().unwrap())
        })
        .collect();
    let names: Vec<&str> = phases.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(names, ["release", "service-request", "x2-handover", "s1-handover", "release", "tau"], "{stdout}");
    assert!(phases.iter().all(|p| (p.1, p.2) == (30, 0)), "{phases:?}\n{stdout}");
    // (Not `service_request_completed`: a Path Switch may overtake the
    // source's last ICS Response across associations, by design.)
    for c in ["mme.x2_handover_completed", "mme.s1_handover_completed", "mme.tau_complete", "mme.service_request"] {
        assert_eq!(v["counters"][c], 30, "{c}: {}", v["counters"]);
    }
    assert_eq!(v["counters"]["spgwc.s11_create_indirect_forwarding"], 15, "{}", v["counters"]);
    // The traffic below went through the XDP fast path, not a fallback.
    assert_eq!(v["datapath"], serde_json::json!({ "name": XDP_DATAPATH, "xdp": true }), "{stdout}");
    assert!(v["counters"].get("upf.upf_xdp_fallback").is_none(), "{}", v["counters"]);
    let cap = &v["capture"];
    for proto in ["s1ap", "nas-eps", "diameter", "gtpv2", "pfcp"] {
        assert!(cap["packets"][proto].as_u64().unwrap_or(0) > 0, "no {proto} in the capture: {cap}");
    }
    // The user plane's GTP-U on S1-U is in the capture too.
    assert!(cap["packets"]["gtp"].as_u64().unwrap() > cap["packets"]["gtpv2"].as_u64().unwrap(), "no GTP-U: {cap}");
    // Uplink G-PDUs carry a sequence number and a PDU Session Container
    // extension header, decoded by tshark (and by our fast path: the
    // traffic below went through it).
    for field in ["gtp-pdu-session-container", "gtp-sequence-number"] {
        assert!(cap["packets"][field].as_u64().unwrap_or(0) > 100, "no {field} in the capture: {cap}");
    }
    assert!(v["traffic"]["tcp_uplink"]["completed"].as_u64().unwrap() > 0, "{v}");
    assert!(v["traffic"]["icmp"]["received"].as_u64().unwrap() > 0, "{v}");
    // Usage Reports in the Session Deletion Responses account for the TCP
    // transfers (4 MiB each way per traffic UE), fast path included.
    let tcp = v["traffic"]["tcp_uplink"]["completed"].as_u64().unwrap() * (4 << 20);
    assert_eq!(v["counters"]["spgwc.usage_reports"], 30, "{v}");
    for dir in ["uplink", "downlink"] {
        let octets = v["counters"][format!("spgwc.usage_{dir}_octets")].as_u64().unwrap_or(0);
        assert!(octets >= tcp, "{dir} usage {octets} < {tcp} octets of TCP payload");
    }
    assert_eq!(cap["malformed"].as_array().unwrap().len(), 0, "{cap}");
    assert_eq!(cap["expert_errors"].as_array().unwrap().len(), 0, "{cap}");
    // The elastic MME at the end: the UEs spread over three host
    // processes, the busiest killed with kill -9 under load, and not one
    // procedure failed, no UE attached again, every GUTI and session kept.
    let e = &v["elastic"];
    let by_host = e["ues_by_host"].as_object().unwrap();
    assert_eq!(by_host.values().map(|n| n.as_u64().unwrap()).sum::<u64>(), 30, "{e}");
    let killed = e["killed_host"].to_string();
    assert!(by_host[&killed].as_u64().unwrap() > 0, "{e}");
    // Its UEs, each loaded by the heir of its replica group, once.
    let heirs = e["ues_by_heir"].as_object().unwrap();
    assert!(!heirs.contains_key(&killed), "{e}");
    assert_eq!(heirs.values().map(|n| n.as_u64().unwrap()).sum::<u64>(), by_host[&killed].as_u64().unwrap(), "{e}");
    assert!(e["procedures"].as_u64().unwrap() >= 3 * 30, "{e}");
    for (k, want) in [("failed_procedures", 0), ("reattaches", 0), ("gutis_kept", 30), ("sessions_kept", 30)] {
        assert_eq!(e[k], want, "{k}: {e}\n{stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn demo_runs_over_udp_encapsulated_sctp() {
    if !is_root() {
        eprintln!("skipped: needs root (namespaces for the user plane)");
        return;
    }
    // An S1-MME port of the kernel's choosing: the raw-IP demo test may run at the same time.
    let cfg = std::env::temp_dir().join(format!("mobicore-udp-{}.toml", std::process::id()));
    std::fs::write(&cfg, "[mme]\ns1ap = \"127.0.0.1:0\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mobicore"))
        .args(["demo", "--ues", "20", "--enbs", "3", "--quiet", "--sctp", "udp", "--traffic-ues", "2", "-c"])
        .arg(&cfg)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&cfg);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let row = |name: &str| -> Option<Vec<String>> {
        stdout
            .lines()
            .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
            .find(|f| f.first().is_some_and(|n| n == name))
    };
    for procedure in ["attach", "detach", "service-request", "x2-handover", "s1-handover", "tau"] {
        let r = row(procedure).unwrap_or_else(|| panic!("no {procedure} row:\n{stdout}"));
        assert_eq!((r[1].as_str(), r[2].as_str()), ("20", "0"), "{procedure}:\n{stdout}");
    }
    assert!(stdout.contains(&format!("data path: {XDP_DATAPATH}")), "the demo fell back from XDP:\n{stdout}");
    assert!(stdout.contains("tcp uplink    2/2"), "{stdout}");
    assert!(stdout.contains("GUTI kept 20/20, PDN session kept 20/20"), "{stdout}");
}

/// Receives S1AP PDUs on `assoc` until one of `kind`'s procedure arrives.
async fn expect_pdu(events: &mut tokio::sync::mpsc::Receiver<SctpEvent>, want: impl Fn(&S1AP_PDU) -> bool) -> S1AP_PDU {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let ev =
            tokio::time::timeout_at(deadline, events.recv()).await.expect("an answer from the MME").expect("endpoint");
        if let SctpEvent::Data { data, .. } = ev {
            let pdu = S1AP_PDU::decode(&data).expect("the MME sends valid S1AP");
            if want(&pdu) {
                return pdu;
            }
        }
    }
}

fn is_error_indication(pdu: &S1AP_PDU) -> bool {
    format!("{pdu}").starts_with("ErrorIndication")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_on_every_interface_leaves_other_ues_attaching() {
    if !is_root() {
        eprintln!("skipped: needs root (raw IP for SCTP)");
        return;
    }
    let mut cfg = Config::default();
    cfg.mme.s1ap = "127.0.0.1:0".parse().unwrap();
    let t = Transport::RawIp;
    let mut ran = cfg.ran.core.clone();
    ran.ues = 200;
    ran.enbs = 2;
    ran.rate = Some(2000.0);
    ran.detach = true;
    let store = SubscriberStore::in_memory();
    allinone::provision(&store, &ran.plan, ran.ues).unwrap();
    let core = allinone::start(&cfg, store, t).await.unwrap();
    ran.mme = core.s1ap;
    let counter = |nf: &str, name: &'static str| {
        core.counters.iter().filter(|(n, _)| *n == nf).map(|(_, c)| c.value(name)).sum::<u64>()
    };

    // The well-behaved RAN runs its 200 UEs while the rest of this test misbehaves.
    let ran_cfg = cfg.clone();
    let workload = tokio::spawn(async move { allinone::run_ran_workload(&ran_cfg, ran, t, None).await });

    // A rogue eNB on S1-MME.
    let mut rogue = allinone::sctp_endpoint(&cfg, "127.0.0.1:0".parse().unwrap(), t, 0).await.unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    rogue.commands.send(SctpCommand::Connect { remote: core.s1ap, reply: tx }).await.unwrap();
    let assoc = rx.await.unwrap().unwrap();
    let send =
        |data: Vec<u8>, stream: u16| SctpCommand::Send { assoc, stream, ppid: PPID_S1AP, data: Bytes::from(data) };
    // Garbage: an Error Indication (TS 36.413 10.3), counted.
    rogue.commands.send(send(vec![0xde, 0xad, 0xbe, 0xef, 0x00, 0x17], 0)).await.unwrap();
    expect_pdu(&mut rogue.events, is_error_indication).await;
    // Truncated: the first bytes of a valid PDU.
    let unknown_ue = build_s1ap!(
        InitiatingMessage,
        uplinkNASTransport,
        UplinkNASTransport,
        MME_UE_S1AP_ID(0x00ab_cdefu32),
        eNB_UE_S1AP_ID(7u32),
        NAS_PDU(vec![0x07, 0x45, 0x01]),
        EUTRAN_CGI(
            oxirush_s1ap::helpers::eutran_cgi(
                oxirush_s1ap::helpers::plmn("001", "01").unwrap(),
                oxirush_s1ap::helpers::EnbKind::Macro,
                0x99,
                1
            )
            .unwrap()
        ),
        TAI(oxirush_s1ap::helpers::tai(oxirush_s1ap::helpers::plmn("001", "01").unwrap(), [0, 1])),
    )
    .unwrap()
    .encode()
    .unwrap();
    rogue.commands.send(send(unknown_ue[..unknown_ue.len() / 2].to_vec(), 1)).await.unwrap();
    expect_pdu(&mut rogue.events, is_error_indication).await;
    // A UE-associated message for an MME UE S1AP ID nobody has.
    rogue.commands.send(send(unknown_ue.clone(), 1)).await.unwrap();
    let ei = expect_pdu(&mut rogue.events, is_error_indication).await;
    let cause = (|| -> Result<Option<Cause>, Box<dyn std::error::Error>> {
        oxirush_s1ap::extract_s1ap_ies!(ei, ErrorIndication, opt cause: Cause = Cause(c) => c,);
        Ok(cause)
    })()
    .unwrap();
    assert!(
        matches!(cause, Some(Cause::radioNetwork(CauseRadioNetwork::unknown_mme_ue_s1ap_id))),
        "TS 36.413 10.6: Error Indication with unknown-mme-ue-s1ap-id, got {cause:?}"
    );

    // Garbage on S11, PFCP (both ends) and S6a.
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for dst in [core.sgw_s11, core.pfcp.0, core.pfcp.1] {
        udp.send_to(&[0x48, 0x20, 0x00, 0x40, 1, 2, 3], dst).await.unwrap();
        udp.send_to(&[0xff; 3], dst).await.unwrap();
    }
    {
        use tokio::io::AsyncWriteExt;
        let mut tcp = tokio::net::TcpStream::connect(core.hss).await.unwrap();
        let _ = tcp.write_all(&[0x01, 0x00, 0x00, 0x08, 0x80, 0x00, 0x01, 0x01]).await;
        let _ = tcp.write_all(&[0x00; 64]).await;
    }

    let report = workload.await.unwrap().unwrap();
    let all_counters = || -> Vec<_> { core.counters.iter().map(|(n, c)| (*n, c.snapshot())).collect() };
    assert_eq!(report.attached, 200, "failures: {:?}, counters: {:?}", report.failures, all_counters());
    assert_eq!(report.detached, 200, "failures: {:?}", report.failures);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(counter("mme", "s1ap_malformed") >= 2, "garbage and truncated S1AP counted");
    assert!(counter("mme", "s1ap_unknown_ue") >= 1);
    assert!(counter("spgwc", "gtp_malformed") >= 1, "garbage GTPv2-C counted");
    assert!(counter("spgwc", "pfcp_malformed") + counter("upf", "pfcp_malformed") >= 2, "garbage PFCP counted");
    assert!(
        core.counters
            .iter()
            .filter(|(n, _)| *n == "hss")
            .map(|(_, c)| c.snapshot().iter().filter(|(k, _)| k.starts_with("diameter_")).map(|(_, v)| *v).sum::<u64>())
            .sum::<u64>()
            >= 1,
        "garbage Diameter counted"
    );
    let _ = rogue.commands.send(SctpCommand::Abort { assoc }).await;
    core.stop().await.unwrap();
}

/// A core dropped without `stop` (a caller that failed after starting it)
/// lets go of its sockets: nothing of it keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_core_stops_its_tasks_and_frees_its_ports() {
    let mut cfg = Config::default();
    cfg.mme.s1ap = "127.0.0.1:0".parse().unwrap();
    let core = allinone::start(&cfg, SubscriberStore::in_memory(), Transport::Udp { port: 0 }).await.unwrap();
    let (sgw_s11, hss) = (core.sgw_s11, core.hss);
    // Held while it runs.
    assert!(tokio::net::UdpSocket::bind(sgw_s11).await.is_err(), "the S-GW's S11 port is free while it runs");
    drop(core);
    // The aborted tasks' sockets close as the runtime drops them: waited
    // for, not assumed to be at once.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let udp = tokio::net::UdpSocket::bind(sgw_s11).await;
        let tcp = tokio::net::TcpListener::bind(hss).await;
        if udp.is_ok() && tcp.is_ok() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "20 s after the drop: S11 {sgw_s11} {:?}, S6a {hss} {:?}",
            udp.err(),
            tcp.err()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
