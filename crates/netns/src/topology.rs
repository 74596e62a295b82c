//! The demo topology: three namespaces joined by two veth links.
//!
//! ```text
//!   <tag>-ran              <tag>-core              <tag>-dn
//!   s1u 10.200.1.1/30 ---- s1u 10.200.1.2/30
//!                          sgi 10.200.2.1/30 ---- sgi 10.200.2.2/30
//!                                                 route 10.44.0.0/14 via 10.200.2.1
//! ```
//!
//! IPv4 forwarding is on in `core`, loopback up everywhere, GRO on every
//! veth end (so a veth that is an XDP_REDIRECT target accepts frames),
//! reverse-path filtering off (tunnelled UE traffic arrives on TUN devices).

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::{exec::ip, link::set_gro, link::set_tx_checksum, require_root, run_in, NetnsError};

/// Addresses and prefix lengths of the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addressing {
    /// The eNB's S1-U address, in `ran`.
    pub ran_s1u: Ipv4Addr,
    /// The SGW-U/UPF S1-U address, in `core`.
    pub core_s1u: Ipv4Addr,
    pub s1u_prefix: u8,
    /// The UPF's SGi address, in `core`: next hop of `dn` towards the UEs.
    pub core_sgi: Ipv4Addr,
    /// The data network's address (where servers listen), in `dn`.
    pub dn_sgi: Ipv4Addr,
    pub sgi_prefix: u8,
    /// The UE address pool, routed in `dn` via `core_sgi`.
    pub ue_pool: Ipv4Addr,
    pub ue_pool_prefix: u8,
}

impl Default for Addressing {
    fn default() -> Self {
        Addressing {
            ran_s1u: Ipv4Addr::new(10, 200, 1, 1),
            core_s1u: Ipv4Addr::new(10, 200, 1, 2),
            s1u_prefix: 30,
            core_sgi: Ipv4Addr::new(10, 200, 2, 1),
            dn_sgi: Ipv4Addr::new(10, 200, 2, 2),
            sgi_prefix: 30,
            ue_pool: Ipv4Addr::new(10, 44, 0, 0),
            ue_pool_prefix: 14,
        }
    }
}

/// Name of the S1-U veth end in `ran` and in `core`.
pub const S1U_IF: &str = "s1u";
/// Name of the SGi veth end in `core` and in `dn`.
pub const SGI_IF: &str = "sgi";

/// The created namespaces; dropping it deletes them (and with them their
/// veth ends, TUN devices and routes). Dropping twice, or after
/// [`Topology::destroy`], does nothing more.
#[derive(Debug)]
pub struct Topology {
    pub tag: String,
    pub ran: String,
    pub core: String,
    pub dn: String,
    pub addr: Addressing,
    /// Namespaces this value created and has not deleted yet.
    created: Vec<String>,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A tag unique to this process and call: `<prefix><pid>-<n>`, e.g.
/// `mct4242-3`. [`cleanup_stale`] recognises the pid after the prefix.
pub fn unique_tag(prefix: &str) -> String {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}-{n}", std::process::id())
}

impl Topology {
    /// Create `<tag>-ran`, `<tag>-core` and `<tag>-dn` with the default
    /// addressing. Fails with [`NetnsError::NotRoot`] when not root; on any
    /// failure what was created is removed again.
    pub fn create(tag: &str) -> Result<Topology, NetnsError> {
        Self::create_with(tag, Addressing::default())
    }

    pub fn create_with(tag: &str, addr: Addressing) -> Result<Topology, NetnsError> {
        require_root()?;
        let mut t = Topology {
            tag: tag.into(),
            ran: format!("{tag}-ran"),
            core: format!("{tag}-core"),
            dn: format!("{tag}-dn"),
            addr,
            created: Vec::new(),
        };
        for ns in [t.ran.clone(), t.core.clone(), t.dn.clone()] {
            ip(&["netns", "add", &ns])?;
            t.created.push(ns.clone());
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            sysctl(&ns, "net/ipv4/conf/all/rp_filter", "0")?;
            sysctl(&ns, "net/ipv4/conf/default/rp_filter", "0")?;
        }
        t.veth(&t.ran, &t.core, S1U_IF, (addr.ran_s1u, addr.core_s1u), addr.s1u_prefix)?;
        t.veth(&t.core, &t.dn, SGI_IF, (addr.core_sgi, addr.dn_sgi), addr.sgi_prefix)?;
        sysctl(&t.core, "net/ipv4/ip_forward", "1")?;
        let pool = format!("{}/{}", addr.ue_pool, addr.ue_pool_prefix);
        ip(&["-n", &t.dn, "route", "add", &pool, "via", &addr.core_sgi.to_string()])?;
        tracing::debug!(tag, "topology created");
        Ok(t)
    }

    /// A veth pair named `name` on both ends, from `a` to `b`, addressed and up.
    fn veth(&self, a: &str, b: &str, name: &str, addrs: (Ipv4Addr, Ipv4Addr), prefix: u8) -> Result<(), NetnsError> {
        ip(&["-n", a, "link", "add", name, "type", "veth", "peer", "name", name, "netns", b])?;
        for (ns, addr) in [(a, addrs.0), (b, addrs.1)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/{prefix}"), "dev", name])?;
            ip(&["-n", ns, "link", "set", name, "up"])?;
            let n = name.to_string();
            run_in(ns, move || set_gro(&n, true).and_then(|_| set_tx_checksum(&n, false)))??;
        }
        Ok(())
    }

    /// The namespaces this value still owns.
    pub fn namespaces(&self) -> &[String] {
        &self.created
    }

    /// Delete every namespace still owned; the first error is returned but
    /// every namespace is attempted. Idempotent.
    pub fn destroy(&mut self) -> Result<(), NetnsError> {
        let mut first = None;
        for ns in std::mem::take(&mut self.created) {
            if let Err(e) = ip(&["netns", "del", &ns]) {
                tracing::warn!(ns, error = %e, "could not delete namespace");
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}

/// Write a sysctl under `/proc/sys/` inside `ns`.
pub fn sysctl(ns: &str, key: &str, value: &str) -> Result<(), NetnsError> {
    let path = format!("/proc/sys/{key}");
    let value = value.to_string();
    run_in(ns, move || std::fs::write(&path, value))??;
    Ok(())
}

/// Every namespace named `<prefix><pid>...` whose process `pid` is gone
/// (a crashed run): delete it. Returns the names deleted. Namespaces of
/// live processes, and names where no pid follows the prefix, are left.
pub fn cleanup_stale(prefix: &str) -> Result<Vec<String>, NetnsError> {
    let mut deleted = Vec::new();
    let dir = match std::fs::read_dir("/run/netns") {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(deleted),
        Err(e) => return Err(e.into()),
    };
    for entry in dir {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(prefix) else { continue };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(pid) = digits.parse::<u32>() else { continue };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        ip(&["netns", "del", &name])?;
        deleted.push(name);
    }
    Ok(deleted)
}
