//! The demo topology: three namespaces joined by two veth links.
//!
//! ```text
//!   <tag>-ran              <tag>-core              <tag>-dn
//!   s1u 10.200.1.1/30 ---- s1u 10.200.1.2/30
//!                          sgi 10.200.2.1/30 ---- sgi 10.200.2.2/30
//!                                                 route 10.44.0.0/14 via 10.200.2.1
//! ```
//!
//! With edge sites ([`Topology::create_edge`], issue 11), a steering
//! namespace sits on S1-U between `ran` and `core`, and every site has an
//! anchor namespace on the steering switch and on the data network:
//!
//! ```text
//!   <tag>-ran              <tag>-steer             <tag>-core
//!   s1u 10.200.1.1/30 ---- s1u 10.200.1.2/30
//!                          core 10.200.3.1/30 ---- s1u 10.200.3.2/30
//!                                                  sgi 10.200.2.1/30 ---- <tag>-dn sgi 10.200.2.2/30
//!                          e<i> 10.201.<i>.1/30 --- <tag>-edge<i> s1u 10.201.<i>.2/30
//!                                                  sgi 10.202.<i>.1/30 --- <tag>-dn e<i> 10.202.<i>.2/30
//! ```
//!
//! IPv4 forwarding is on in `core`, `steer` and the sites, loopback up everywhere, GRO on every
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
    /// With a steering switch: its address towards `ran` (the eNB's next
    /// hop to every anchor) and towards `core`.
    pub steer_ran: Ipv4Addr,
    pub steer_core: Ipv4Addr,
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
            steer_ran: Ipv4Addr::new(10, 200, 1, 2),
            steer_core: Ipv4Addr::new(10, 200, 3, 1),
        }
    }
}

impl Addressing {
    /// The addressing with a steering switch: the UPF's S1-U address moves
    /// to the link between `steer` and `core`.
    pub fn with_steering() -> Self {
        Addressing { core_s1u: Ipv4Addr::new(10, 200, 3, 2), ..Addressing::default() }
    }
}

/// An edge site (issue 11): the anchor namespace `<tag>-edge<i>` with its
/// S1-U link to the steering switch and its own link to the data network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// `edge<i>`, 1-based.
    pub name: String,
    pub ns: String,
    /// The anchor's S1-U address (on the veth `s1u`) and the steering
    /// switch's end of that link (on the veth `e<i>` in `steer`).
    pub s1u: Ipv4Addr,
    pub steer_if: String,
    /// The anchor's SGi address (veth `sgi`), the data network's next hop
    /// to the UEs the site serves; and the data network's end (veth `e<i>`).
    pub sgi: Ipv4Addr,
    pub dn_sgi: Ipv4Addr,
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
    /// The steering namespace and the edge sites ([`Topology::create_edge`]).
    pub steer: Option<String>,
    pub sites: Vec<Site>,
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
        let mut t = Topology::named(tag, addr, None);
        for ns in [t.ran.clone(), t.core.clone(), t.dn.clone()] {
            t.namespace(&ns)?;
        }
        t.veth(&t.ran, &t.core, S1U_IF, (addr.ran_s1u, addr.core_s1u), addr.s1u_prefix)?;
        t.veth(&t.core, &t.dn, SGI_IF, (addr.core_sgi, addr.dn_sgi), addr.sgi_prefix)?;
        sysctl(&t.core, "net/ipv4/ip_forward", "1")?;
        let pool = format!("{}/{}", addr.ue_pool, addr.ue_pool_prefix);
        ip(&["-n", &t.dn, "route", "add", &pool, "via", &addr.core_sgi.to_string()])?;
        tracing::debug!(tag, "topology created");
        Ok(t)
    }

    /// The edge topology (module docs): `ran`, `steer`, `core`, `dn` and
    /// `sites` edge sites, with [`Addressing::with_steering`].
    pub fn create_edge(tag: &str, sites: usize) -> Result<Topology, NetnsError> {
        require_root()?;
        let addr = Addressing::with_steering();
        let steer = format!("{tag}-steer");
        let mut t = Topology::named(tag, addr, Some(steer.clone()));
        let mut all = vec![t.ran.clone(), steer.clone(), t.core.clone(), t.dn.clone()];
        all.extend((1..=sites).map(|i| format!("{tag}-edge{i}")));
        for ns in &all {
            t.namespace(ns)?;
        }
        t.veth_named(&t.ran, &steer, (S1U_IF, S1U_IF), (addr.ran_s1u, addr.steer_ran), addr.s1u_prefix)?;
        t.veth_named(&steer, &t.core, ("core", S1U_IF), (addr.steer_core, addr.core_s1u), addr.s1u_prefix)?;
        t.veth(&t.core, &t.dn, SGI_IF, (addr.core_sgi, addr.dn_sgi), addr.sgi_prefix)?;
        let enb = format!("{}/32", addr.ran_s1u);
        ip(&["-n", &t.ran, "route", "add", "10.200.0.0/15", "via", &addr.steer_ran.to_string()])?;
        ip(&["-n", &t.core, "route", "add", &enb, "via", &addr.steer_core.to_string()])?;
        for i in 1..=sites {
            let n = i as u8;
            let site = Site {
                name: format!("edge{i}"),
                ns: format!("{tag}-edge{i}"),
                s1u: Ipv4Addr::new(10, 201, n, 2),
                steer_if: format!("e{i}"),
                sgi: Ipv4Addr::new(10, 202, n, 1),
                dn_sgi: Ipv4Addr::new(10, 202, n, 2),
            };
            let steer_end = Ipv4Addr::new(10, 201, n, 1);
            t.veth_named(&steer, &site.ns, (&site.steer_if, S1U_IF), (steer_end, site.s1u), 30)?;
            t.veth_named(&site.ns, &t.dn, (SGI_IF, &site.steer_if), (site.sgi, site.dn_sgi), 30)?;
            ip(&["-n", &site.ns, "route", "add", &enb, "via", &steer_end.to_string()])?;
            // The site's own route to the data network.
            ip(&["-n", &site.ns, "route", "add", "default", "via", &site.dn_sgi.to_string()])?;
            sysctl(&site.ns, "net/ipv4/ip_forward", "1")?;
            t.sites.push(site);
        }
        sysctl(&steer, "net/ipv4/ip_forward", "1")?;
        sysctl(&t.core, "net/ipv4/ip_forward", "1")?;
        let pool = format!("{}/{}", addr.ue_pool, addr.ue_pool_prefix);
        ip(&["-n", &t.dn, "route", "add", &pool, "via", &addr.core_sgi.to_string()])?;
        tracing::debug!(tag, sites, "edge topology created");
        Ok(t)
    }

    /// The names of a topology tagged `tag`; nothing created yet.
    fn named(tag: &str, addr: Addressing, steer: Option<String>) -> Topology {
        Topology {
            tag: tag.into(),
            ran: format!("{tag}-ran"),
            core: format!("{tag}-core"),
            dn: format!("{tag}-dn"),
            addr,
            steer,
            sites: Vec::new(),
            created: Vec::new(),
        }
    }

    /// A namespace, owned, loopback up, reverse-path filtering off.
    fn namespace(&mut self, ns: &str) -> Result<(), NetnsError> {
        ip(&["netns", "add", ns])?;
        self.created.push(ns.into());
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        sysctl(ns, "net/ipv4/conf/all/rp_filter", "0")?;
        sysctl(ns, "net/ipv4/conf/default/rp_filter", "0")
    }

    /// A veth pair named `name` on both ends, from `a` to `b`, addressed and up.
    fn veth(&self, a: &str, b: &str, name: &str, addrs: (Ipv4Addr, Ipv4Addr), prefix: u8) -> Result<(), NetnsError> {
        self.veth_named(a, b, (name, name), addrs, prefix)
    }

    /// A veth pair named `names.0` in `a` and `names.1` in `b`.
    fn veth_named(
        &self,
        a: &str,
        b: &str,
        names: (&str, &str),
        addrs: (Ipv4Addr, Ipv4Addr),
        prefix: u8,
    ) -> Result<(), NetnsError> {
        ip(&["-n", a, "link", "add", names.0, "type", "veth", "peer", "name", names.1, "netns", b])?;
        for (ns, addr, name) in [(a, addrs.0, names.0), (b, addrs.1, names.1)] {
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
        delete_all(&mut self.created)
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}

/// Deletes every namespace in `owned` (emptying it); every one is
/// attempted, the first error is returned. What every topology's
/// `destroy` does.
pub fn delete_all(owned: &mut Vec<String>) -> Result<(), NetnsError> {
    let mut first = None;
    for ns in std::mem::take(owned) {
        if let Err(e) = ip(&["netns", "del", &ns]) {
            tracing::warn!(ns, error = %e, "could not delete namespace");
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
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
