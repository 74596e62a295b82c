//! A quick run of the bench in its own namespaces (root only): every case
//! gets a positive rate, and every namespace is gone afterwards.

use mobicore_dpbench::{run, DataplaneBenchOptions};

fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn our_namespaces() -> Vec<String> {
    let prefix = format!("mcdp{}-", std::process::id());
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn quick_run_measures_every_case_and_cleans_up() {
    if !is_root() {
        eprintln!("note: skipped, the data-plane bench needs root (namespaces, XDP)");
        return;
    }
    let stats = || std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap_or_default();
    let stats_before = stats();
    let report = run(DataplaneBenchOptions::quick()).await.expect("bench runs");
    assert_eq!(stats(), stats_before, "BPF run-time statistics left as they were");
    eprintln!("{}", mobicore_dpbench::table(&report));
    assert_eq!(report.cases.len(), 2 * 2, "uplink and downlink x 1 and 1000 sessions x one size");
    for c in &report.cases {
        assert!(c.mpps > 0.0, "UPF rate {c:?}");
        assert!(c.baseline_kernel_mpps > 0.0, "kernel rate {c:?}");
        assert!(c.baseline_xdp_mpps > 0.0, "minimal XDP rate {c:?}");
        assert!(c.rtt_us.is_some(), "round trip {c:?}");
        assert_eq!(c.mpps_zipf.is_some_and(|z| z > 0.0), c.sessions > 1, "Zipf-like column {c:?}");
        assert_eq!(c.baseline_xdp_zipf_mpps.is_some_and(|z| z > 0.0), c.sessions > 1, "Zipf-like baseline {c:?}");
        assert_eq!(c.zipf_ratio_to_xdp.is_some(), c.sessions > 1, "Zipf-like ratio {c:?}");
        // Program run time per packet from the kernel's BPF statistics.
        assert!(
            c.ns_per_packet.is_some_and(|n| n > 0.0) && c.baseline_xdp_ns_per_packet.is_some_and(|n| n > 0.0),
            "ns per packet {c:?}"
        );
    }
    for (dir, n) in [("uplink", 1), ("uplink", 1000), ("downlink", 1), ("downlink", 1000)] {
        assert!(report.cases.iter().any(|c| c.direction == dir && c.sessions == n && c.size == 64), "{dir} {n}");
    }
    assert!(report.ceiling_redirect_mpps > 0.0 && report.ceiling_to_kernel > 0.0);
    let json = serde_json::to_value(&report).unwrap();
    for key in ["direction", "size", "sessions", "mpps", "baseline_kernel_mpps", "baseline_xdp_mpps"] {
        assert!(json["cases"][0].get(key).is_some(), "JSON has {key}");
    }
    assert_eq!(our_namespaces(), Vec::<String>::new(), "namespaces left behind");
}

#[test]
fn bad_options_are_refused_before_touching_the_host() {
    let o = DataplaneBenchOptions { sizes: vec![32], ..DataplaneBenchOptions::quick() };
    assert!(matches!(mobicore_dpbench::run_blocking(&o), Err(mobicore_dpbench::DpBenchError::Options(_))));
    let o = DataplaneBenchOptions { sessions: vec![], ..DataplaneBenchOptions::quick() };
    assert!(matches!(mobicore_dpbench::run_blocking(&o), Err(mobicore_dpbench::DpBenchError::Options(_))));
}
