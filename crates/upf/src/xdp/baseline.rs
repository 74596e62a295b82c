//! Baseline XDP programs for `mobicore bench dataplane`: minimal GTP-U
//! decapsulation and encapsulation of one fixed tunnel (no rule lookup), a
//! bare redirect, and XDP_PASS for the peer of a redirect target veth.

use super::loader::{self, LoadedProgram, XdpError};
use super::maps::{be_addr, MapError, MinConfig};
use aya::maps::{Array, DevMapHash, MapData};
use std::net::Ipv4Addr;

/// The one tunnel / next hop of a baseline program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedTunnel {
    /// Decap: the TEID to accept; encap: the TEID to put.
    pub teid: u32,
    /// Encap: outer source and destination.
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    /// Egress interface and the MACs to write.
    pub ifindex: u32,
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
}

/// A loaded baseline program with its configuration written.
pub struct Baseline {
    pub program: LoadedProgram,
    _cfg: Array<MapData, MinConfig>,
    _tx: DevMapHash<MapData>,
}

fn load_min(obj: &[u8], name: &'static str, t: &FixedTunnel) -> Result<Baseline, XdpError> {
    let mut program = LoadedProgram::load(obj, name, None)?;
    let err = |map: &'static str| move |e: aya::maps::MapError| XdpError::Map(MapError { map, msg: e.to_string() });
    let mut cfg: Array<MapData, MinConfig> = Array::try_from(program.take_map("min_cfg")?).map_err(err("min_cfg"))?;
    let mut tx = DevMapHash::try_from(program.take_map("min_tx")?).map_err(err("min_tx"))?;
    let c = MinConfig {
        teid: t.teid,
        src_addr: be_addr(t.src),
        dst_addr: be_addr(t.dst),
        ifindex: t.ifindex,
        dmac: t.dmac,
        smac: t.smac,
    };
    cfg.set(0, c, 0).map_err(err("min_cfg"))?;
    tx.insert(t.ifindex, t.ifindex, None, 0)
        .map_err(|e| XdpError::Map(MapError { map: "min_tx", msg: e.to_string() }))?;
    Ok(Baseline { program, _cfg: cfg, _tx: tx })
}

/// GTP-U decapsulation of `t.teid` (S flag and extension headers walked
/// like the full program), then MAC rewrite and redirect to `t.ifindex`.
pub fn load_decap_min(t: &FixedTunnel) -> Result<Baseline, XdpError> {
    load_min(loader::DECAP_MIN_OBJ, "decap_min", t)
}

/// GTP-U/UDP/IPv4 encapsulation into `t`, then redirect.
pub fn load_encap_min(t: &FixedTunnel) -> Result<Baseline, XdpError> {
    load_min(loader::ENCAP_MIN_OBJ, "encap_min", t)
}

/// MAC rewrite and redirect only.
pub fn load_redirect(t: &FixedTunnel) -> Result<Baseline, XdpError> {
    load_min(loader::REDIRECT_OBJ, "redirect_min", t)
}

/// XDP_PASS, for the peer of a veth that receives XDP_REDIRECTs.
pub fn load_pass() -> Result<LoadedProgram, XdpError> {
    LoadedProgram::load(loader::PASS_OBJ, "pass", None)
}
