//! A tshark capture on lo for the loopback tests, and the check of what it
//! caught: no malformed packet, no expert error.
// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use mobicore_common::tools::LoCapture;

/// Starts capturing `filter` on lo; see [`LoCapture::start`].
pub fn start(tag: &str, filter: &str) -> Option<LoCapture> {
    LoCapture::start(&format!("spgwc-{tag}"), filter)
}

/// See [`LoCapture::wait_for_packets`].
pub fn wait_for_packets(c: &LoCapture) {
    c.wait_for_packets()
}

/// See [`LoCapture::check`].
pub fn check(c: LoCapture, display_filter: &str, expected: &[&str]) -> String {
    c.check(display_filter, expected)
}
