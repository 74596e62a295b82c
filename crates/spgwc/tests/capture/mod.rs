//! A tshark capture on lo for the loopback tests, and the check of what it
//! caught: no malformed packet, no expert error.
// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Capture {
    child: Child,
    file: std::path::PathBuf,
}

/// Starts capturing `filter` (a capture filter) on lo and returns once
/// tshark captures; `None` where tshark cannot run (as root it must: the
/// check then fails rather than skip).
pub fn start(tag: &str, filter: &str) -> Option<Capture> {
    if !mobicore_common::tools::require(&["tshark"]) {
        return None;
    }
    let file = std::env::temp_dir().join(format!("mobicore-spgwc-{tag}-{}.pcapng", std::process::id()));
    let _ = std::fs::remove_file(&file);
    let mut child = Command::new("tshark")
        .args(["-i", "lo", "-f", filter, "-w"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tshark");
    // Wait for "Capturing on" before sending anything.
    let Some(stderr) = child.stderr.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("Capturing on") {
                let _ = tx.send(true);
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(_) => Some(Capture { child, file }),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            mobicore_common::tools::cannot_check("tshark could not capture on lo");
            None
        }
    }
}

/// Waits (20 s at most) until the capture file holds a packet: tshark
/// says it captures a moment before packets reach the file. Traffic
/// matching the filter must be flowing (e.g. PFCP heartbeats).
pub fn wait_for_packets(c: &Capture) {
    let size = || std::fs::metadata(&c.file).map(|m| m.len()).unwrap_or(0);
    let header = size();
    for _ in 0..400 {
        if size() > header.max(1) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("tshark wrote no packet in 20 s");
}

/// Stops the capture and checks the packets `display_filter` selects: each
/// of `expected` appears in the dissection, nothing is malformed and
/// tshark reports no expert error. Returns the dissection.
pub fn check(mut c: Capture, display_filter: &str, expected: &[&str]) -> String {
    // Packets sent just before are on lo already; give tshark a moment to
    // write them, then SIGINT lets it flush the file.
    std::thread::sleep(Duration::from_millis(500));
    let _ = Command::new("kill").args(["-INT", &c.child.id().to_string()]).status();
    let _ = c.child.wait();
    let verbose = mobicore_common::tools::run(Command::new("tshark").args(["-r"]).arg(&c.file).args([
        "-Y",
        display_filter,
        "-V",
    ]))
    .expect("tshark -r");
    let text = String::from_utf8_lossy(&verbose.stdout).into_owned();
    for e in expected {
        let summary: Vec<&str> =
            text.lines().filter(|l| l.starts_with("Frame ") || l.contains("Message Type")).collect();
        assert!(text.contains(e), "capture has {e:?}; it has:\n{}", summary.join("\n"));
    }
    assert!(!text.contains("Malformed"), "tshark found a malformed packet:\n{text}");
    let expert = mobicore_common::tools::run(Command::new("tshark").args(["-r"]).arg(&c.file).args([
        "-q",
        "-z",
        &format!("expert,error,{display_filter}"),
    ]))
    .expect("tshark expert");
    let e = String::from_utf8_lossy(&expert.stdout);
    assert!(!e.lines().any(|l| l.trim_start().starts_with("Error")), "tshark expert errors:\n{e}");
    let _ = std::fs::remove_file(&c.file);
    text
}
