//! `mobicore bench breakout --quick` in its own namespaces: every case is
//! there with its baselines, the measured frames took the breakout path in
//! XDP both ways (the router's counters), the JSON carries the issue's
//! fields, the figure is drawn, and no namespace of the run is left.
//! Nothing about rates or times is asserted beyond their being measured.
//! Needs root; without it the test says so and passes.

use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn is_root() -> bool {
    unsafe { libc_geteuid() == 0 }
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// Namespaces whose name starts with `prefix`.
fn namespaces(prefix: &str) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(String::from)
        .collect()
}

#[test]
fn a_quick_breakout_bench_measures_every_case_through_the_router_and_leaves_nothing_behind() {
    if !is_root() {
        eprintln!("skipped: needs root (network namespaces, XDP)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("mobicore-bench-breakout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("breakout.json");
    let plots = dir.join("plots");
    let child = Command::new(Path::new(env!("CARGO_BIN_EXE_mobicore")))
        .args(["bench", "breakout", "--quick", "--json"])
        .arg(&json)
        .arg("--plot")
        .arg(&plots)
        .spawn()
        .expect("mobicore runs");
    let pid = child.id();
    let out = child.wait_with_output().expect("mobicore bench breakout");
    assert!(out.status.success(), "bench breakout failed: {:?}", out.status);
    assert!(namespaces(&format!("mcbo{pid}-")).is_empty(), "namespaces left: {:?}", namespaces("mcbo"));

    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let cases = r["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 8, "2 directions x 2 frame sizes x 2 rule counts");
    for dir in ["uplink", "downlink"] {
        for size in [64, 1518] {
            for rules in [1, 1000] {
                let c = cases
                    .iter()
                    .find(|c| c["direction"] == dir && c["frame_size"] == size && c["rules"] == rules)
                    .unwrap_or_else(|| panic!("no case {dir} {size} {rules}"));
                for f in [
                    "mpps",
                    "gbps",
                    "latency_us_p50",
                    "latency_us_p99",
                    "baseline_xdp_mpps",
                    "baseline_kernel_mpps",
                    "baseline_xdp_latency_us_p50",
                    "baseline_kernel_latency_us_p50",
                    "ratio_to_xdp",
                ] {
                    let v = c[f].as_f64().unwrap_or_else(|| panic!("{f} missing in {c}"));
                    assert!(v > 0.0, "{f} measured: {c}");
                }
                assert_eq!(c["tunnel_frame_size"], size + 36);
            }
        }
    }
    let installs = r["installs"].as_array().expect("installs");
    assert_eq!(installs.len(), 1, "{installs:?}");
    assert_eq!((installs[0]["added"].as_u64(), installs[0]["total"].as_u64()), (Some(999), Some(1000)));
    assert!(installs[0]["rules_per_s"].as_f64().unwrap() > 0.0);
    // The measured frames were decapsulated to the application and
    // encapsulated back towards the eNB by mec_xdp, not passed through.
    let n = |k: &str| r["counters"][k].as_u64().unwrap_or_else(|| panic!("counter {k}"));
    assert!(n("decapsulated") > 0 && n("encapsulated") > 0, "{}", r["counters"]);
    assert_eq!(n("passed_through"), 0, "no measured frame missed its rule: {}", r["counters"]);

    for d in ["uplink", "downlink"] {
        for f in ["throughput_mpps", "throughput_gbps", "latency"] {
            let svg = std::fs::read_to_string(plots.join(format!("fig3_{f}_{d}.svg"))).expect("figure drawn");
            assert!(svg.matches("<polyline").count() >= 3, "router, forwarder and kernel series: {f} {d}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
