//! Link settings that `ip` does not cover.

use std::io;
use std::os::fd::AsRawFd;

use crate::tun::IfReq;
use crate::NetnsError;

/// ETHTOOL_SGRO and ETHTOOL_STXCSUM (include/uapi/linux/ethtool.h).
const ETHTOOL_SGRO: u32 = 0x0000_002c;
const ETHTOOL_STXCSUM: u32 = 0x0000_0017;

/// Turn GRO on or off on `ifname` in the calling thread's namespace (the
/// ethtool ioctl; no ethtool binary needed). Call it through
/// [`crate::run_in`]. A veth that is the target of an XDP_REDIRECT drops
/// everything unless its peer has an XDP program or GRO on.
pub fn set_gro(ifname: &str, on: bool) -> io::Result<()> {
    ethtool_set(ifname, ETHTOOL_SGRO, on)
}

/// Turn transmit checksum offload on or off on `ifname` (in the calling
/// thread's namespace). A veth with it on hands its peer packets whose
/// TCP/UDP checksum is still partial; an XDP program that re-tunnels them
/// (the UPF's downlink encapsulation) would carry that unfinished checksum
/// to the UE, as no real NIC ever delivers it. So the ends whose locally
/// sent traffic crosses an XDP data path compute checksums in software.
pub fn set_tx_checksum(ifname: &str, on: bool) -> io::Result<()> {
    ethtool_set(ifname, ETHTOOL_STXCSUM, on)
}

fn ethtool_set(ifname: &str, cmd: u32, on: bool) -> io::Result<()> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0")?;
    // struct ethtool_value { __u32 cmd; __u32 data; }
    let mut value = [cmd, u32::from(on)];
    let mut req = IfReq::new(ifname)?;
    let ptr = value.as_mut_ptr() as usize;
    req.data[..std::mem::size_of::<usize>()].copy_from_slice(&ptr.to_ne_bytes());
    // SAFETY: SIOCETHTOOL reads a `struct ifreq` whose ifr_data points at
    // `value`, which outlives the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL as _, &mut req as *mut IfReq) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Counter `name` of link `dev` in namespace `ns`
/// (`/sys/class/net/<dev>/statistics/<name>`, e.g. `tx_dropped`).
pub fn link_stat(ns: &str, dev: &str, name: &str) -> Result<u64, NetnsError> {
    let path = format!("/sys/class/net/{dev}/statistics/{name}");
    let out = crate::exec_in(ns, &["cat", &path])?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim().parse().map_err(|e| NetnsError::Io(std::io::Error::other(format!("{path}: {text:?}: {e}"))))
}

/// The MAC address of link `dev` in namespace `ns` (`aa:bb:cc:dd:ee:ff`).
pub fn link_mac(ns: &str, dev: &str) -> Result<String, NetnsError> {
    let out = crate::exec_in(ns, &["cat", &format!("/sys/class/net/{dev}/address")])?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// UDP datagrams namespace `ns` dropped because a socket's receive buffer
/// was full (`RcvbufErrors` of /proc/net/snmp), all sockets together.
pub fn udp_rcvbuf_errors(ns: &str) -> Result<u64, NetnsError> {
    let out = crate::exec_in(ns, &["cat", "/proc/net/snmp"])?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut udp = text.lines().filter(|l| l.starts_with("Udp: "));
    let bad = || NetnsError::Io(std::io::Error::other(format!("no Udp RcvbufErrors in /proc/net/snmp of {ns}")));
    let (names, values) = (udp.next().ok_or_else(bad)?, udp.next().ok_or_else(bad)?);
    let at = names.split_whitespace().position(|n| n == "RcvbufErrors").ok_or_else(bad)?;
    values.split_whitespace().nth(at).and_then(|v| v.parse().ok()).ok_or_else(bad)
}

/// Packets every link of namespace `ns` dropped (`rx_dropped` +
/// `tx_dropped`, e.g. a veth whose peer's ring was full).
pub fn link_drops(ns: &str) -> Result<u64, NetnsError> {
    let out = crate::exec_in(
        ns,
        &["sh", "-c", "cat /sys/class/net/*/statistics/rx_dropped /sys/class/net/*/statistics/tx_dropped"],
    )?;
    Ok(String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.trim().parse::<u64>().ok()).sum())
}
