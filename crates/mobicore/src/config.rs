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
}

impl Default for SctpSection {
    fn default() -> Self {
        SctpSection { transport: SctpTransport::Auto, udp_port: 9899, heartbeat_interval_secs: 30, outbound_streams: 16 }
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
            core: Default::default(),
        }
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
    Ok(c)
}

pub fn default_toml() -> Result<&'static str> {
    Ok(DEFAULT_TOML)
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
    fn unknown_section_is_an_error() {
        assert!(toml::from_str::<Config>("[nope]\nx = 1\n").is_err());
    }
}
