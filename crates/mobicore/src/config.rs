//! The one config file (TOML), a section per network function. Every option
//! has a default, so every command runs without a file;
//! `mobicore config default` prints the documented defaults
//! (`crates/mobicore/mobicore.toml`, checked by a test to parse into
//! exactly [`Config::default`]).

use crate::cli::SctpTransport;
use anyhow::{Context, Result};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The documented default configuration.
pub const DEFAULT_TOML: &str = include_str!("../mobicore.toml");

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub sctp: SctpSection,
    pub mme: MmeSection,
    pub hss: HssSection,
    pub spgwc: mobicore_spgwc::config::SpgwcConfig,
    pub upf: mobicore_upf::config::UpfConfig,
    pub ran: RanSection,
    pub controller: mobicore_controller::ControllerConfig,
}

/// `[sctp]`: how S1-MME is carried.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SctpSection {
    pub transport: SctpTransport,
    /// UDP port of RFC 6951 encapsulation (the MME's; eNBs use an ephemeral one).
    pub udp_port: u16,
    pub heartbeat_interval_secs: u64,
    pub outbound_streams: u16,
    /// Receive window advertised per association (a_rwnd), bytes, at least 1500.
    /// Fragments waiting for reassembly plus messages waiting for an earlier SSN
    /// never exceed it (RFC 9260 6.2, 6.9), so it is also the largest message
    /// received. 256 KiB: far above any S1AP message, about Linux's default,
    /// and with `max_associations` it bounds what peers can make us hold
    /// (1024 x 256 KiB = 256 MiB).
    pub receive_window_bytes: u32,
    /// Most associations per endpoint; an INIT beyond it gets ABORT "Out of
    /// Resource" (RFC 9260 5.1). 1024 eNBs is more than one MME here serves.
    pub max_associations: usize,
    /// Most stateless replies (INIT ACK, ABORT, stale cookie ERROR) queued
    /// between two sends; more are dropped and counted. INITs keep no state.
    pub max_queued_replies: usize,
}

impl Default for SctpSection {
    fn default() -> Self {
        SctpSection {
            transport: SctpTransport::Auto,
            udp_port: 9899,
            heartbeat_interval_secs: 30,
            outbound_streams: 16,
            receive_window_bytes: 256 << 10,
            max_associations: 1024,
            max_queued_replies: 1024,
        }
    }
}

/// `[mme]`: the MME's core settings plus where its peers are.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct MmeSection {
    /// S1-MME address (SCTP port 36412).
    pub s1ap: SocketAddr,
    /// The HSS's S6a (Diameter) address.
    pub hss: SocketAddr,
    /// The S/P-GW-C's S11 address.
    pub sgw: SocketAddr,
    /// Local S11 address (port 0: any).
    pub s11_local: SocketAddr,
    pub origin_host: String,
    pub origin_realm: String,
    /// The admin endpoint (HTTP, `POST /v1/ues/{imsi}/detach`); absent
    /// (the default): none.
    pub admin: Option<SocketAddr>,
    /// The bearer token every admin request must carry; required with
    /// `admin`.
    pub admin_token: Option<String>,
    #[serde(flatten)]
    pub core: mobicore_mme::MmeConfig,
}

impl Default for MmeSection {
    fn default() -> Self {
        MmeSection {
            s1ap: "127.0.0.1:36412".parse().unwrap(),
            hss: "127.0.0.1:3868".parse().unwrap(),
            sgw: "127.0.0.1:2123".parse().unwrap(),
            s11_local: "127.0.0.1:0".parse().unwrap(),
            origin_host: "mme.mobicore.local".into(),
            origin_realm: "mobicore.local".into(),
            admin: None,
            admin_token: None,
            core: Default::default(),
        }
    }
}

impl MmeSection {
    pub fn validate(&self) -> Result<(), String> {
        if self.admin.is_some() && self.admin_token.as_deref().is_none_or(str::is_empty) {
            return Err("[mme] admin needs admin_token (the bearer token of every admin request)".into());
        }
        self.core.validate()
    }
}

/// `[hss]`: the HSS and its subscriber store file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct HssSection {
    /// Subscriber store (default: $MOBICORE_DATA_DIR/subscribers.json or /var/lib/mobicore/subscribers.json).
    pub store: Option<PathBuf>,
    #[serde(flatten)]
    pub core: mobicore_hss::HssConfig,
}

/// `[ran]`: the emulated RAN.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct RanSection {
    /// Local address of the eNBs' SCTP endpoint (port 0: any).
    pub local: SocketAddr,
    #[serde(flatten)]
    pub core: mobicore_ran::RanConfig,
}

impl Default for RanSection {
    fn default() -> Self {
        RanSection { local: "127.0.0.1:0".parse().unwrap(), core: Default::default() }
    }
}

pub fn load(file: Option<&Path>) -> Result<Config> {
    let Some(file) = file else { return Ok(Config::default()) };
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let c: Config = toml::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
    c.upf.validate().map_err(anyhow::Error::msg).with_context(|| format!("checking {}", file.display()))?;
    c.mme.validate().map_err(anyhow::Error::msg).with_context(|| format!("checking {}", file.display()))?;
    Ok(c)
}

pub fn default_toml() -> Result<&'static str> {
    Ok(DEFAULT_TOML)
}

/// An interface that serves requests, and who may use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exposure {
    pub interface: &'static str,
    /// The option that names its peers.
    pub option: &'static str,
    pub peers: String,
    /// Some entry lets any address in.
    pub anyone: bool,
}

/// Every interface that serves requests, with its allowed peers, for
/// `mobicore config check` (the S6a, S11 and PFCP clients talk only to the
/// peers they are configured to dial).
pub fn exposures(c: &Config) -> Vec<Exposure> {
    let hss = c
        .hss
        .core
        .peers
        .0
        .iter()
        .map(|p| format!("{}@{} from {}", p.origin_host.as_deref().unwrap_or("*"), p.origin_realm, p.addrs));
    let upf = c.upf.cp_peers.iter().map(|p| format!("node {} from {}", p.node_id, p.addrs));
    vec![
        Exposure {
            interface: "S1-MME (MME)",
            option: "[mme] enb_peers",
            peers: c.mme.core.enb_peers.to_string(),
            anyone: c.mme.core.enb_peers.accepts_anyone(),
        },
        Exposure {
            interface: "admin (MME)",
            option: "[mme] admin",
            peers: match c.mme.admin {
                Some(a) => format!("{a}, bearer token"),
                None => "off".into(),
            },
            anyone: false,
        },
        Exposure {
            interface: "S6a (HSS)",
            option: "[hss] peers",
            peers: hss.collect::<Vec<_>>().join("; "),
            anyone: c.hss.core.peers.accepts_any_address(),
        },
        Exposure {
            interface: "S11 (S/P-GW-C)",
            option: "[spgwc] mme_peers",
            peers: c.spgwc.mme_peers.to_string(),
            anyone: c.spgwc.mme_peers.accepts_anyone(),
        },
        Exposure {
            interface: "PFCP (UPF)",
            option: "[upf] cp_peers",
            peers: upf.collect::<Vec<_>>().join("; "),
            anyone: c.upf.pfcp_accepts_anyone(),
        },
    ]
}

/// The report of `mobicore config check`: one line per interface, and a
/// warning for each that accepts anyone.
pub fn exposure_report(c: &Config) -> String {
    let rows = exposures(c);
    let mut out = String::new();
    for e in &rows {
        out.push_str(&format!("{:<16} {:<20} {}\n", e.interface, e.option, e.peers));
    }
    for e in rows.iter().filter(|e| e.anyone) {
        out.push_str(&format!("warning: {} accepts anyone ({} has an all-addresses prefix)\n", e.interface, e.option));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_defaults_are_the_defaults() {
        let parsed: Config = toml::from_str(DEFAULT_TOML).expect("mobicore.toml parses");
        let d = Config::default();
        assert_eq!(parsed.sctp, d.sctp);
        assert_eq!(format!("{:?}", parsed.mme), format!("{:?}", d.mme));
        assert_eq!(format!("{:?}", parsed.hss), format!("{:?}", d.hss));
        assert_eq!(format!("{:?}", parsed.spgwc), format!("{:?}", d.spgwc));
        assert_eq!(format!("{:?}", parsed.upf), format!("{:?}", d.upf));
        assert_eq!(format!("{:?}", parsed.ran), format!("{:?}", d.ran));
    }

    #[test]
    fn out_of_range_values_are_clear_errors() {
        let f = std::env::temp_dir().join(format!("mobicore-cfg-{}.toml", std::process::id()));
        std::fs::write(&f, "[upf]\ns1u_mtu = 40\n").unwrap();
        let e = format!("{:#}", load(Some(&f)).unwrap_err());
        std::fs::remove_file(&f).unwrap();
        assert!(e.contains("s1u_mtu = 40 (576..=65535)"), "{e}");
    }

    #[test]
    fn check_reports_the_interfaces_that_accept_anyone() {
        let d = exposure_report(&Config::default());
        assert!(!d.contains("warning"), "the defaults accept loopback peers only:\n{d}");
        assert!(d.contains("S1-MME") && d.contains("127.0.0.0/8"), "{d}");
        let text = "[mme]\nenb_peers = [\"0.0.0.0/0\"]\n[spgwc]\nmme_peers = [\"10.0.0.0/8\", \"::/0\"]\n";
        let c: Config = toml::from_str(text).unwrap();
        let open: Vec<_> = exposures(&c).into_iter().filter(|e| e.anyone).map(|e| e.option).collect();
        assert_eq!(open, vec!["[mme] enb_peers", "[spgwc] mme_peers"]);
        let r = exposure_report(&c);
        assert!(r.contains("warning: S1-MME (MME) accepts anyone"), "{r}");
        assert!(r.contains("warning: S11 (S/P-GW-C) accepts anyone"), "{r}");
    }

    #[test]
    fn an_admin_endpoint_needs_a_token_and_throttling_a_percentage() {
        let f = std::env::temp_dir().join(format!("mobicore-cfg-admin-{}.toml", std::process::id()));
        for (text, want) in [
            ("[mme]\nadmin = \"127.0.0.1:9300\"\n", "[mme] admin needs admin_token"),
            ("[mme.ddn_throttling]\nfactor_percent = 101\n", "factor_percent = 101 (0..=100)"),
            ("[mme.ddn_throttling]\nreject_arp_above = 16\n", "reject_arp_above = 16 (an ARP priority level, 1..=15)"),
        ] {
            std::fs::write(&f, text).unwrap();
            let e = format!("{:#}", load(Some(&f)).unwrap_err());
            assert!(e.contains(want), "{e}");
        }
        std::fs::write(&f, "[mme]\nadmin = \"127.0.0.1:9300\"\nadmin_token = \"t\"\n").unwrap();
        let c = load(Some(&f)).unwrap();
        std::fs::remove_file(&f).unwrap();
        assert_eq!(c.mme.admin, Some("127.0.0.1:9300".parse().unwrap()));
    }

    #[test]
    fn the_s_gw_sends_to_the_mmes_f_teid_at_a_port_only_if_told() {
        assert_eq!(Config::default().spgwc.mme_s11_port, None);
        let c: Config = toml::from_str("[spgwc]\nmme_s11_port = 2123\n").unwrap();
        assert_eq!(c.spgwc.mme_s11_port, Some(2123));
    }

    #[test]
    fn unknown_section_is_an_error() {
        assert!(toml::from_str::<Config>("[nope]\nx = 1\n").is_err());
    }
}
