//! The neighbour tables of the data path's namespace, read with iproute2's
//! JSON output, for the XDP fast path's next-hop cache (the control side
//! keeps it current; bpf_fib_lookup covers what it does not hold).

use crate::rules::Neighbour;
use serde::Deserialize;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::process::Command;

#[derive(Deserialize)]
struct Link {
    ifindex: u32,
    ifname: String,
    #[serde(default)]
    address: Option<String>,
}

#[derive(Deserialize)]
struct Neigh {
    dst: String,
    dev: String,
    #[serde(default)]
    lladdr: Option<String>,
    #[serde(default)]
    state: Vec<String>,
}

fn mac(s: &str) -> Option<[u8; 6]> {
    let v: Vec<u8> = s.split(':').map(|x| u8::from_str_radix(x, 16)).collect::<Result<_, _>>().ok()?;
    v.try_into().ok()
}

/// Neighbours usable as next hops, from `ip -j link` and `ip -j -4 neigh`
/// output: a link-layer address and a state other than FAILED/INCOMPLETE,
/// on one of `interfaces`.
pub fn parse(links_json: &str, neigh_json: &str, interfaces: &[String]) -> Vec<Neighbour> {
    let links: Vec<Link> = serde_json::from_str(links_json).unwrap_or_default();
    let neighs: Vec<Neigh> = serde_json::from_str(neigh_json).unwrap_or_default();
    let by_name: HashMap<&str, (u32, [u8; 6])> = links
        .iter()
        .filter(|l| interfaces.contains(&l.ifname))
        .filter_map(|l| Some((l.ifname.as_str(), (l.ifindex, mac(l.address.as_deref()?)?))))
        .collect();
    neighs
        .iter()
        .filter(|n| !n.state.iter().any(|s| s == "FAILED" || s == "INCOMPLETE"))
        .filter_map(|n| {
            let (ifindex, local_mac) = *by_name.get(n.dev.as_str())?;
            Some(Neighbour {
                addr: n.dst.parse::<Ipv4Addr>().ok()?,
                ifindex,
                mac: mac(n.lladdr.as_deref()?)?,
                local_mac,
            })
        })
        .collect()
}

/// Reads the neighbours of `interfaces` in namespace `netns` (None: ours).
pub fn read(netns: Option<&str>, interfaces: &[String]) -> std::io::Result<Vec<Neighbour>> {
    let run = |args: &[&str]| -> std::io::Result<String> {
        let mut c = Command::new("ip");
        if let Some(ns) = netns {
            c.args(["-n", ns]);
        }
        let out = c.args(args).output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    Ok(parse(&run(&["-j", "link", "show"])?, &run(&["-j", "-4", "neigh", "show"])?, interfaces))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINKS: &str = r#"[{"ifindex":1,"ifname":"lo","address":"00:00:00:00:00:00"},
        {"ifindex":2,"ifname":"s1u","address":"72:00:58:78:53:26"},
        {"ifindex":3,"ifname":"sgi","address":"8e:a8:27:3f:5e:43"},
        {"ifindex":4,"ifname":"mcupf0"}]"#;
    const NEIGH: &str = r#"[{"dst":"10.200.1.1","dev":"s1u","lladdr":"96:60:99:ec:cd:8a","state":["STALE"]},
        {"dst":"10.200.2.2","dev":"sgi","lladdr":"e2:ca:7e:75:9c:16","state":["REACHABLE"]},
        {"dst":"10.200.2.9","dev":"sgi","state":["FAILED"]},
        {"dst":"10.200.1.7","dev":"s1u","lladdr":"aa:bb:cc:dd:ee:ff","state":["INCOMPLETE"]},
        {"dst":"192.0.2.1","dev":"eth9","lladdr":"aa:bb:cc:dd:ee:01","state":["REACHABLE"]}]"#;

    #[test]
    fn resolved_neighbours_on_our_interfaces_only() {
        let n = parse(LINKS, NEIGH, &["s1u".into(), "sgi".into()]);
        assert_eq!(
            n,
            vec![
                Neighbour {
                    addr: "10.200.1.1".parse().unwrap(),
                    ifindex: 2,
                    mac: [0x96, 0x60, 0x99, 0xec, 0xcd, 0x8a],
                    local_mac: [0x72, 0x00, 0x58, 0x78, 0x53, 0x26]
                },
                Neighbour {
                    addr: "10.200.2.2".parse().unwrap(),
                    ifindex: 3,
                    mac: [0xe2, 0xca, 0x7e, 0x75, 0x9c, 0x16],
                    local_mac: [0x8e, 0xa8, 0x27, 0x3f, 0x5e, 0x43]
                },
            ]
        );
    }

    #[test]
    fn garbage_gives_nothing() {
        assert!(parse("not json", NEIGH, &["s1u".into()]).is_empty());
        assert!(parse(LINKS, "[{\"dst\":\"x\",\"dev\":\"s1u\",\"lladdr\":\"zz\"}]", &["s1u".into()]).is_empty());
    }
}
