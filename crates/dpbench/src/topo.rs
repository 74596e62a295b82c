//! The bench topology, the same for every case:
//!
//! ```text
//!  <tag>-gen             <tag>-dut                 <tag>-sink
//!  g0 10.201.1.1/24 ---- d0 10.201.1.2/24 (S1-U)
//!                        d1 10.201.2.1/24 -------- s0 10.201.2.2/24
//! ```
//!
//! Fixed MACs and static neighbours (no ARP during a run), IPv4
//! forwarding on in `dut`, GRO off everywhere (every veth that receives
//! redirected frames has an XDP program on its peer instead). Dropping it
//! deletes the namespaces, and with them the veths and any XDP left on them.

use crate::frames::*;
use crate::DpBenchError;
use mobicore_netns::topology::sysctl;
use mobicore_netns::{ip, ip_batch, require_root};

pub struct BenchTopology {
    pub gen: String,
    pub dut: String,
    pub sink: String,
    created: Vec<String>,
}

impl BenchTopology {
    pub fn create(tag: &str) -> Result<Self, DpBenchError> {
        require_root()?;
        let mut t = BenchTopology {
            gen: format!("{tag}-gen"),
            dut: format!("{tag}-dut"),
            sink: format!("{tag}-sink"),
            created: Vec::new(),
        };
        for ns in [t.gen.clone(), t.dut.clone(), t.sink.clone()] {
            ip(&["netns", "add", &ns])?;
            t.created.push(ns.clone());
            sysctl(&ns, "net/ipv4/conf/all/rp_filter", "0")?;
            sysctl(&ns, "net/ipv4/conf/default/rp_filter", "0")?;
        }
        ip(&[
            "-n",
            &t.gen,
            "link",
            "add",
            "g0",
            "address",
            &mac_text(MAC_G0),
            "type",
            "veth",
            "peer",
            "name",
            "d0",
            "address",
            &mac_text(MAC_D0),
            "netns",
            &t.dut,
        ])?;
        ip(&[
            "-n",
            &t.dut,
            "link",
            "add",
            "d1",
            "address",
            &mac_text(MAC_D1),
            "type",
            "veth",
            "peer",
            "name",
            "s0",
            "address",
            &mac_text(MAC_S0),
            "netns",
            &t.sink,
        ])?;
        sysctl(&t.dut, "net/ipv4/ip_forward", "1")?;
        let l = |v: &[String]| v.to_vec();
        ip_batch(
            &t.gen,
            &l(&[
                "link set lo up".into(),
                format!("addr add {GEN}/24 dev g0"),
                format!("addr add {PROBE_UE_UL}/32 dev lo"),
                "link set g0 up".into(),
                format!("route add default via {DUT0}"),
                format!("neigh replace {DUT0} lladdr {} dev g0 nud permanent", mac_text(MAC_D0)),
            ]),
        )?;
        ip_batch(
            &t.dut,
            &l(&[
                "link set lo up".into(),
                format!("addr add {DUT0}/24 dev d0"),
                format!("addr add {DUT1}/24 dev d1"),
                "link set d0 up".into(),
                "link set d1 up".into(),
                format!("route add {UE_POOL} via {SINK}"),
                format!("route add {PROBE_UE_DL}/32 via {SINK}"),
                format!("route add {PROBE_UE_UL}/32 via {GEN}"),
                format!("neigh replace {GEN} lladdr {} dev d0 nud permanent", mac_text(MAC_G0)),
                format!("neigh replace {SINK} lladdr {} dev d1 nud permanent", mac_text(MAC_S0)),
            ]),
        )?;
        ip_batch(
            &t.sink,
            &l(&[
                "link set lo up".into(),
                format!("addr add {SINK}/24 dev s0"),
                format!("addr add {PROBE_UE_DL}/32 dev lo"),
                "link set s0 up".into(),
                format!("route add default via {DUT1}"),
                format!("neigh replace {DUT1} lladdr {} dev s0 nud permanent", mac_text(MAC_D1)),
            ]),
        )?;
        Ok(t)
    }

    /// Sets the MTU of all four veths (`g0`, `d0`, `d1`, `s0`).
    pub fn set_mtu(&self, mtu: u32) -> Result<(), DpBenchError> {
        let m = mtu.to_string();
        for (ns, dev) in [(&self.gen, "g0"), (&self.dut, "d0"), (&self.dut, "d1"), (&self.sink, "s0")] {
            ip(&["-n", ns, "link", "set", dev, "mtu", &m])?;
        }
        Ok(())
    }

    pub fn namespaces(&self) -> &[String] {
        &self.created
    }

    /// Deletes every namespace still owned; idempotent.
    pub fn destroy(&mut self) -> Result<(), DpBenchError> {
        Ok(mobicore_netns::topology::delete_all(&mut self.created)?)
    }
}

impl Drop for BenchTopology {
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}
