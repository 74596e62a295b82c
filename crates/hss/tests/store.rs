//! The subscriber store: persistence across reopen (atomic file), SQN
//! flush, CSV import, sequential provisioning, OP -> OPc.

use mobicore_common::Imsi;
use mobicore_hss::{ApnProfile, Subscriber, SubscriberStore, SubscriberTemplate};

const K: [u8; 16] = [0x46, 0x5b, 0x5c, 0xe8, 0xb1, 0x99, 0xb4, 0x9f, 0xaa, 0x5f, 0x0a, 0x2e, 0xe2, 0x38, 0xa6, 0xbc];
const OPC: [u8; 16] = [0xcd, 0x63, 0xcb, 0x71, 0x95, 0x4a, 0x9f, 0x4e, 0x48, 0xa5, 0x99, 0x4e, 0x37, 0xa0, 0x2b, 0xaf];
const OP: [u8; 16] = [0xcd, 0xc2, 0x02, 0xd5, 0x12, 0x3e, 0x20, 0xf6, 0x2b, 0x6d, 0x67, 0x6a, 0xc7, 0x2c, 0xb3, 0x18];

fn tmpdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("mobicore-hss-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn imsi(s: &str) -> Imsi {
    s.parse().unwrap()
}

#[test]
fn persists_across_reopen() {
    let dir = tmpdir("reopen");
    let path = dir.join("sub").join("subscribers.json");
    let store = SubscriberStore::open(&path).unwrap();
    assert!(store.is_empty());
    let mut s = Subscriber::new(imsi("001010000000001"), K, OPC);
    s.msisdn = Some("46700000001".into());
    s.apns.push(ApnProfile::new("ims"));
    store.add(s.clone()).unwrap();
    store.add(Subscriber::new(imsi("001010000000002"), K, OPC)).unwrap();
    assert!(store.remove(&imsi("001010000000002")));
    assert!(!store.remove(&imsi("001010000000002")));
    store.update(&imsi("001010000000001"), |s| s.sqn = 12345).unwrap();
    store.flush().unwrap();
    assert!(!store.is_dirty());
    // No temporary file is left next to it.
    let names: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 1);

    let again = SubscriberStore::open(&path).unwrap();
    let got = again.get(&imsi("001010000000001")).unwrap();
    assert_eq!(got.sqn, 12345);
    assert_eq!(got.msisdn, s.msisdn);
    assert_eq!(got.apns, s.apns);
    assert_eq!(got.k, K);
    assert_eq!(again.list().len(), 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn op_gives_opc_per_ts_35_206() {
    let store = SubscriberStore::in_memory();
    let mut s = Subscriber::new(imsi("001010000000001"), K, OPC);
    s.opc = None;
    s.op = Some(OP);
    store.add(s).unwrap();
    assert_eq!(store.get(&imsi("001010000000001")).unwrap().opc, Some(OPC));
    let mut bad = Subscriber::new(imsi("001010000000003"), K, OPC);
    bad.opc = None;
    assert!(store.add(bad).is_err());
}

#[test]
fn json_with_op_only_loads() {
    let dir = tmpdir("json");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("subscribers.json");
    let json = format!(
        r#"{{"subscribers":[{{"imsi":"001010000000009","k":"{}","op":"{}","apns":[{{"name":"internet"}}]}}]}}"#,
        hex::encode(K),
        hex::encode(OP)
    );
    std::fs::write(&path, json).unwrap();
    let store = SubscriberStore::open(&path).unwrap();
    let s = store.get(&imsi("001010000000009")).unwrap();
    assert_eq!(s.opc, Some(OPC));
    assert_eq!(s.amf, 0x8000);
    assert_eq!(s.apns[0].qci, 9);
    std::fs::write(&path, "{ nope").unwrap();
    assert!(SubscriberStore::open(&path).is_err());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn csv_import() {
    let dir = tmpdir("csv");
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("subs.csv");
    let k = hex::encode(K);
    let opc = hex::encode(OPC);
    std::fs::write(
        &csv,
        format!(
            "imsi,k,opc,amf,sqn,msisdn,apn,qci,arp,ambr_ul,ambr_dl\n\
             # a comment\n\
             001010000000001,{k},{opc},8000,64,46700000001,internet,9,9,50000000,100000000\n\
             001010000000001,{k},{opc},8000,64,46700000001,ims,5,1,1000000,1000000\n\
             001010000000002,{k},{opc},,,,internet,,,,\n"
        ),
    )
    .unwrap();
    let store = SubscriberStore::in_memory();
    assert_eq!(store.import(&csv).unwrap(), 2);
    let a = store.get(&imsi("001010000000001")).unwrap();
    assert_eq!(a.sqn, 64);
    assert_eq!(a.apns.len(), 2);
    assert_eq!(a.apns[1].qci, 5);
    assert_eq!(a.apns[1].arp_priority, 1);
    assert_eq!(a.ue_ambr.uplink, 50_000_000);
    let b = store.get(&imsi("001010000000002")).unwrap();
    assert_eq!((b.amf, b.sqn, b.msisdn.clone()), (0x8000, 0, None));

    std::fs::write(&csv, "imsi,k\n1,2\n").unwrap();
    assert!(store.import(&csv).is_err());
    std::fs::write(&csv, format!("imsi,k,opc,amf,sqn,msisdn,apn,qci,arp,ambr_ul,ambr_dl\n00101x,{k},{opc},,,,,,,,\n"))
        .unwrap();
    assert!(store.import(&csv).is_err());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn import_range_provisions_sequential_imsis() {
    let store = SubscriberStore::in_memory();
    let t = SubscriberTemplate { first_msisdn: Some(46700000000), ..Default::default() };
    assert_eq!(store.import_range(&imsi("001010000000998"), 1000, K, OPC, &t).unwrap(), 1000);
    assert_eq!(store.len(), 1000);
    let last = store.get(&imsi("001010000001997")).unwrap();
    assert_eq!(last.msisdn.as_deref(), Some("46700000999"));
    assert_eq!(last.apns, t.apns);
    assert!(store.get(&imsi("001010000001998")).is_none());
    assert!(store.import_range(&imsi("999999999999999"), 2, K, OPC, &t).is_err());
}

/// The optional CSV columns give each APN its PDN type, PDN GW and static
/// address; the terminal a ULR named persists with the subscriber.
#[test]
fn csv_optional_apn_columns_and_terminal_persist() {
    use mobicore_common::s6a::TerminalInformation;
    use mobicore_common::PdnType;
    let dir = tmpdir("csv-apn");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("subscribers.json");
    let csv = dir.join("subs.csv");
    let (k, opc) = ("465b5ce8b199b49faa5f0a2ee238a6bc", "cd63cb71954a9f4e48a5994e37a02baf");
    let head = "imsi,k,opc,amf,sqn,msisdn,apn,qci,arp,ambr_ul,ambr_dl,pdn_type,pdn_gw,static_ipv4";
    std::fs::write(
        &csv,
        format!(
            "{head}\n001010000000001,{k},{opc},,,,internet,9,9,,,ipv4v6,10.9.0.5,10.45.0.9\n\
             001010000000001,{k},{opc},,,,ims,5,2,,,IPv6,fd00::5,\n\
             001010000000002,{k},{opc},,,,internet,,,,,,,\n"
        ),
    )
    .unwrap();
    let store = SubscriberStore::open(&path).unwrap();
    assert_eq!(store.import(&csv).unwrap(), 2);
    let s = store.get(&imsi("001010000000001")).unwrap();
    assert_eq!(s.apns.len(), 2);
    assert_eq!(s.apns[0].pdn_type, PdnType::Ipv4v6);
    assert_eq!(s.apns[0].pdn_gw, Some("10.9.0.5".parse().unwrap()));
    assert_eq!(s.apns[0].static_ipv4, Some("10.45.0.9".parse().unwrap()));
    assert_eq!(
        (s.apns[1].pdn_type, s.apns[1].pdn_gw, s.apns[1].static_ipv4),
        (PdnType::Ipv6, Some("fd00::5".parse().unwrap()), None)
    );
    let s2 = store.get(&imsi("001010000000002")).unwrap();
    assert_eq!((s2.apns[0].pdn_type, s2.apns[0].pdn_gw), (PdnType::Ipv4, None));
    for bad in ["ipv5,,", ",not-an-ip,", ",,fd00::1"] {
        std::fs::write(&csv, format!("{head}\n001010000000003,{k},{opc},,,,internet,,,,,{bad}\n")).unwrap();
        assert!(store.import(&csv).is_err(), "{bad}");
    }
    let t =
        TerminalInformation { imei: Some("35609204079301".into()), software_version: Some("42".into()), meid: None };
    store.update(&imsi("001010000000001"), |s| s.terminal = Some(t.clone()));
    store.flush().unwrap();
    let again = SubscriberStore::open(&path).unwrap().get(&imsi("001010000000001")).unwrap();
    assert_eq!(again.terminal, Some(t));
    assert_eq!(again.apns, s.apns);
    let _ = std::fs::remove_dir_all(&dir);
}
