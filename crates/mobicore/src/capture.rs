//! Packet capture with tshark, and its verdict: every packet of the
//! protocols we speak must decode without a malformed packet or an expert
//! error. Used by `mobicore demo --pcap` and by the integration tests as an
//! independent check of what mobicore puts on the wire.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `tshark` capture on the loopback interface.
pub struct Capture {
    child: Child,
    pub file: PathBuf,
}

/// tshark's decode-as arguments for our ports (Diameter and PFCP may run on
/// ports other than their registered ones in tests).
pub fn decode_as_args(ports: &Ports) -> Vec<String> {
    let mut a = Vec::new();
    for p in &ports.diameter {
        a.extend(["-d".into(), format!("tcp.port=={p},diameter")]);
    }
    for p in &ports.gtpv2 {
        a.extend(["-d".into(), format!("udp.port=={p},gtp")]);
    }
    for p in &ports.pfcp {
        a.extend(["-d".into(), format!("udp.port=={p},pfcp")]);
    }
    for p in &ports.sctp_udp {
        a.extend(["-d".into(), format!("udp.port=={p},sctp")]);
    }
    a
}

/// The ports a capture should cover, by protocol.
#[derive(Debug, Clone, Default)]
pub struct Ports {
    pub diameter: Vec<u16>,
    pub gtpv2: Vec<u16>,
    pub pfcp: Vec<u16>,
    /// SCTP over UDP (RFC 6951), S1-MME with `--sctp udp`.
    pub sctp_udp: Vec<u16>,
}

impl Ports {
    /// Captures all SCTP, TCP and UDP on lo; the ports given to [`analyze`]
    /// later say how to decode them.
    pub fn everything() -> Ports {
        Ports::default()
    }

    fn filter(&self) -> String {
        if self.diameter.is_empty() && self.gtpv2.is_empty() && self.pfcp.is_empty() && self.sctp_udp.is_empty() {
            return "sctp or tcp or udp".into();
        }
        let mut f = vec!["sctp".to_string()];
        f.extend(self.diameter.iter().map(|p| format!("tcp port {p}")));
        f.extend(self.gtpv2.iter().chain(&self.pfcp).chain(&self.sctp_udp).map(|p| format!("udp port {p}")));
        f.join(" or ")
    }
}

pub fn tshark_available() -> bool {
    mobicore_common::tools::runs("tshark")
}

impl Capture {
    /// Starts capturing on `lo` and waits until tshark reports it is capturing.
    pub fn start(file: &Path, ports: &Ports) -> Result<Capture> {
        Self::start_on(None, "lo", &ports.filter(), file)
    }

    /// Starts capturing GTP-U on `iface` inside network namespace `netns`.
    pub fn start_gtpu(netns: &str, iface: &str, file: &Path) -> Result<Capture> {
        Self::start_on(Some(netns), iface, "udp port 2152", file)
    }

    fn start_on(netns: Option<&str>, iface: &str, filter: &str, file: &Path) -> Result<Capture> {
        let _ = std::fs::remove_file(file);
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "tshark"]);
                c
            }
            None => Command::new("tshark"),
        };
        let mut child = cmd
            .args(["-i", iface, "-q", "-f", filter, "-w"])
            .arg(file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting tshark (install it: apt-get install tshark)")?;
        // Wait for "Capture started.": dumpcap prints "Capturing on ..." before it sees packets.
        let stderr = child.stderr.take().context("tshark stderr")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::{BufRead, BufReader};
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent && line.contains("Capture started") {
                    let _ = tx.send(());
                    sent = true;
                }
            }
        });
        if rx.recv_timeout(Duration::from_secs(20)).is_err() {
            let _ = child.kill();
            bail!("tshark did not start capturing on {iface} within 20 s");
        }
        Ok(Capture { child, file: file.to_path_buf() })
    }

    /// Stops the capture (SIGINT, so tshark flushes the file).
    pub fn stop(mut self) -> Result<PathBuf> {
        // Give the last packets time to reach the capture buffer.
        std::thread::sleep(Duration::from_millis(500));
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(self.file.clone());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Ok(self.file.clone())
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What tshark found in a capture.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Verdict {
    /// Packets per protocol name as tshark labels them (S1AP, NAS-EPS, ...).
    pub packets: std::collections::BTreeMap<String, u64>,
    pub malformed: Vec<String>,
    pub expert_errors: Vec<String>,
    pub expert_warnings: Vec<String>,
    /// Frames tshark gave to a protocol none of mobicore speaks, chosen by
    /// a port number alone (an ephemeral port that happens to be some
    /// protocol's registered one): not judged, listed.
    pub foreign: Vec<String>,
}

impl Verdict {
    pub fn is_clean(&self) -> bool {
        self.malformed.is_empty() && self.expert_errors.is_empty()
    }

    /// Adds another capture's findings, its frames labelled `what`.
    pub fn merge(&mut self, other: Verdict, what: &str) {
        for (k, v) in other.packets {
            *self.packets.entry(k).or_default() += v;
        }
        let label = |v: Vec<String>| v.into_iter().map(move |m| format!("{what} {m}"));
        self.malformed.extend(label(other.malformed));
        self.expert_errors.extend(label(other.expert_errors));
        self.expert_warnings.extend(label(other.expert_warnings));
        self.foreign.extend(label(other.foreign));
    }
}

/// The layers tshark may put a frame of ours in (link, network,
/// transport, our protocols, payload carried through GTP-U).
const KNOWN_LAYERS: &[&str] = &[
    "eth",
    "ethertype",
    "sll",
    "vlan",
    "arp",
    "ip",
    "ipv6",
    "icmp",
    "icmpv6",
    "udp",
    "tcp",
    "sctp",
    "data",
    "s1ap",
    "nas-eps",
    "gtpv2",
    "gtp",
    "gtpu",
    "pfcp",
    "diameter",
    "http",
    "json",
    "media",
];

/// Whether a frame's deepest layer (tshark's frame.protocols) is one a
/// mobicore frame can have, so that its malformed marks and expert errors
/// are ours to answer for.
fn judged(protos: &str) -> bool {
    protos.split(':').rev().find(|p| !p.starts_with("_ws")).is_none_or(|last| KNOWN_LAYERS.contains(&last))
}

/// Reads the capture back with tshark and collects malformed packets and
/// expert errors of any severity "Error" (and warnings, for the report).
pub fn analyze(file: &Path, ports: &Ports) -> Result<Verdict> {
    let decode = decode_as_args(ports);
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(&decode)
        .args([
            "-T",
            "fields",
            "-e",
            "frame.number",
            "-e",
            "frame.protocols",
            "-e",
            "_ws.malformed",
            "-e",
            "_ws.expert.severity",
            "-e",
            "_ws.expert.message",
            "-e",
            "gtp.ext_hdr.pdu_ses_con.qos_flow_id",
            "-e",
            "gtp.seq_number",
        ])
        .output()
        .context("running tshark -r")?;
    if !out.status.success() {
        bail!("tshark -r failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mut v = Verdict::default();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        let (num, protos) = (cols.first().copied().unwrap_or(""), cols.get(1).copied().unwrap_or(""));
        for p in ["s1ap", "nas-eps", "gtpv2", "pfcp", "diameter", "sctp", "gtp", "gtpu"] {
            if protos.split(':').any(|x| x == p) {
                *v.packets.entry(p.to_string()).or_default() += 1;
            }
        }
        // GTP-U frames with a PDU Session Container (TS 29.281 5.2.2.7) and
        // with a sequence number (S flag), as tshark decodes them.
        for (col, name) in [(5, "gtp-pdu-session-container"), (6, "gtp-sequence-number")] {
            if cols.get(col).is_some_and(|c| !c.is_empty()) && protos.split(':').any(|x| x == "gtp") {
                *v.packets.entry(name.to_string()).or_default() += 1;
            }
        }
        if !judged(protos) {
            v.foreign.push(format!("frame {num}: {protos}"));
            continue;
        }
        if protos.contains("_ws.malformed") || cols.get(2).is_some_and(|m| !m.is_empty()) {
            v.malformed.push(format!("frame {num}: {protos}"));
        }
        let severities = cols.get(3).copied().unwrap_or("");
        let messages = cols.get(4).copied().unwrap_or("");
        // Severity values of epan/proto.h: 0x00800000 error, 0x00600000 warning.
        for (sev, msg) in severities.split(',').zip(messages.split(',')) {
            match sev.trim() {
                "8388608" => v.expert_errors.push(format!("frame {num}: {msg}")),
                "6291456" => v.expert_warnings.push(format!("frame {num}: {msg}")),
                _ => {}
            }
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::judged;

    #[test]
    fn frames_given_to_a_protocol_by_port_alone_are_not_judged() {
        assert!(judged("eth:ethertype:ip:udp:gtpv2"));
        assert!(judged("eth:ethertype:ip:udp:gtp:ip:icmp:data"));
        assert!(judged("eth:ethertype:ip:sctp:s1ap:nas-eps:_ws.malformed"));
        assert!(judged("eth:ethertype:ip:udp:data"));
        assert!(!judged("eth:ethertype:ip:udp:elasticsearch"));
        assert!(!judged("eth:ethertype:ip:udp:gtp:ip:udp:elasticsearch:_ws.malformed"));
    }
}
