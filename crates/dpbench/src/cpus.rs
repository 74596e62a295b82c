//! Where the bench's work runs. A live-frames `BPF_PROG_RUN` transmits on
//! the calling CPU and, by default, the receiving veth's NAPI poll (the
//! device under test, then the sink) runs in the softirq of that same CPU,
//! so generator, DUT and sink would share one core and the DUT's cost would
//! be a fraction of what is measured. With two or more CPUs the bench pins
//! the generator to one CPU and moves the NAPI poll of the DUT's ingress
//! veth `d0` into its kernel thread (`/sys/class/net/d0/threaded`) pinned to
//! another; the DUT's redirect to `d1` then schedules the sink's NAPI on
//! that CPU too, so the measured rate is the DUT's (plus the sink's
//! per-frame drop) rather than the generator's.

use crate::DpBenchError;
use mobicore_netns::exec_in;

/// CPUs of the generator and of the device under test; None when the
/// process may run on fewer than two CPUs (everything then shares one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub gen: usize,
    pub dut: usize,
}

impl Placement {
    /// The first two CPUs this process may use.
    pub fn detect() -> Option<Placement> {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; the kernel fills it.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: set is a valid cpu_set_t of the size we pass.
        if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
            return None;
        }
        // SAFETY: CPU_ISSET reads within the set for cpu < CPU_SETSIZE.
        let cpus: Vec<usize> =
            (0..libc::CPU_SETSIZE as usize).filter(|c| unsafe { libc::CPU_ISSET(*c, &set) }).take(2).collect();
        (cpus.len() == 2).then(|| Placement { gen: cpus[0], dut: cpus[1] })
    }
}

/// Restricts thread `tid` (0 = the calling thread) to `cpu`.
pub fn pin(tid: libc::pid_t, cpu: usize) -> std::io::Result<()> {
    // SAFETY: as in detect().
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu < CPU_SETSIZE (it came from sched_getaffinity).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: set is a valid cpu_set_t of the size we pass.
    if unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// SCHED_FIFO at the priority of the kernel's interrupt threads, so the
/// poll runs as soon as frames arrive, as a softirq would, instead of
/// waiting behind other processes of a shared host (the ring of a veth
/// holds 256 frames; a late poll drops the rest). The poll sleeps when its
/// ring is empty, so this takes no CPU time when there is no traffic.
pub fn realtime(pid: libc::pid_t) {
    let p = libc::sched_param { sched_priority: 50 };
    // SAFETY: p is a valid sched_param; a failure only leaves the policy as it was.
    if unsafe { libc::sched_setscheduler(pid, libc::SCHED_FIFO, &p) } != 0 {
        tracing::warn!(pid, error = %std::io::Error::last_os_error(), "NAPI thread stays SCHED_OTHER");
    }
}

/// Gives `iface` in namespace `ns` threaded NAPI and pins its NAPI threads
/// (kernel threads `napi/<iface>-<id>`) to `cpu`. The veth must be up with
/// an XDP program attached (that is when it has a NAPI context); a new
/// program attachment creates a new NAPI thread, so call it after each.
pub fn threaded_napi(ns: &str, iface: &str, cpu: usize) -> Result<usize, DpBenchError> {
    // `ip netns exec` mounts the namespace's own /sys.
    let cmd = format!("echo 1 > /sys/class/net/{iface}/threaded");
    exec_in(ns, &["sh", "-c", &cmd])?;
    let prefix = format!("napi/{iface}-");
    let mut pinned = 0;
    for e in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<libc::pid_t>().ok()) else { continue };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        // A NAPI thread of a same-named veth of another namespace may be
        // pinned too: harmless, it only moves that poll to our DUT CPU.
        if comm.trim_end().starts_with(&prefix) && pin(pid, cpu).is_ok() {
            realtime(pid);
            pinned += 1;
        }
    }
    Ok(pinned)
}
