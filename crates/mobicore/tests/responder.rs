//! `bench attach`'s baseline for real: the emulator (its eNBs and UEs with
//! USIM keys and NAS security) against the pre-built-reply responder over
//! user-space SCTP on loopback. Every UE must attach and detach; no rate
//! is asserted (speed is for the benchmark). Raw IP needs root: without
//! it the raw case says so and passes; the UDP-encapsulated case runs
//! anyway.

use mobicore::config::Config;
use mobicore::responder;
use mobicore_sctp::Transport;

fn is_root() -> bool {
    unsafe { libc_geteuid() == 0 }
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

fn workload(cfg: &Config, ues: u64, enbs: u32) -> mobicore_ran::RanConfig {
    let mut ran = cfg.ran.core.clone();
    ran.ues = ues;
    ran.enbs = enbs;
    ran.max_in_flight = 16;
    ran.detach = true;
    ran
}

async fn attach_and_detach_all(t: Transport) {
    let cfg = Config::default();
    let (ues, enbs) = (50, 2);
    let b = responder::run_attach(&cfg, workload(&cfg, ues, enbs), t, true).await.expect("responder run");
    let r = &b.report;
    assert_eq!(r.attached, ues, "failures {:?}, anomalies {:?}", r.failures, r.anomalies);
    assert_eq!(r.failed, 0, "{:?}", r.failures);
    assert_eq!(r.detached, ues, "failures {:?}, anomalies {:?}", r.failures, r.anomalies);
    assert_eq!(r.detach_failed, 0, "{:?}", r.failures);
    // The responder saw the same: every S1 Setup, Attach Complete, Detach
    // Request and release, each eNB-UE-S1AP-ID as it expected.
    let s = b.stats;
    assert_eq!((s.enbs, s.attached, s.detached, s.patched), (u64::from(enbs), ues, ues, 0), "{s:?}");
    assert!(b.counters.snapshot().values().all(|v| *v == 0), "{:?}", b.counters.snapshot());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulator_attaches_and_detaches_every_ue_against_the_responder_over_raw_ip() {
    if !is_root() {
        eprintln!("skipped: needs root (raw IP for SCTP)");
        return;
    }
    attach_and_detach_all(Transport::RawIp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulator_attaches_and_detaches_every_ue_against_the_responder_over_udp() {
    attach_and_detach_all(Transport::Udp { port: 0 }).await;
}
