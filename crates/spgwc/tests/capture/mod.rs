//! A tshark capture on lo for the loopback tests, and the check of what it
//! caught: no malformed packet, no expert error.
// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use mobicore_common::tools::LoCapture;
use std::process::Command;

/// Starts capturing `filter` on lo; see [`LoCapture::start`].
pub fn start(tag: &str, filter: &str) -> Option<LoCapture> {
    LoCapture::start(&format!("spgwc-{tag}"), filter)
}

/// See [`LoCapture::wait_for_packets`].
pub fn wait_for_packets(c: &LoCapture) {
    c.wait_for_packets()
}

/// Stops the capture and checks the packets `display_filter` selects: each
/// of `expected` appears in the dissection, nothing is malformed and
/// tshark reports no expert error. Returns the dissection.
pub fn check(c: LoCapture, display_filter: &str, expected: &[&str]) -> String {
    let file = c.stop();
    let verbose =
        mobicore_common::tools::run(Command::new("tshark").args(["-r"]).arg(&file).args(["-Y", display_filter, "-V"]))
            .expect("tshark -r");
    let text = String::from_utf8_lossy(&verbose.stdout).into_owned();
    for e in expected {
        let summary: Vec<&str> =
            text.lines().filter(|l| l.starts_with("Frame ") || l.contains("Message Type")).collect();
        assert!(text.contains(e), "capture has {e:?}; it has:\n{}", summary.join("\n"));
    }
    assert!(!text.contains("Malformed"), "tshark found a malformed packet:\n{text}");
    let expert = mobicore_common::tools::run(Command::new("tshark").args(["-r"]).arg(&file).args([
        "-q",
        "-z",
        &format!("expert,error,{display_filter}"),
    ]))
    .expect("tshark expert");
    let e = String::from_utf8_lossy(&expert.stdout);
    assert!(!e.lines().any(|l| l.trim_start().starts_with("Error")), "tshark expert errors:\n{e}");
    let _ = std::fs::remove_file(&file);
    text
}
