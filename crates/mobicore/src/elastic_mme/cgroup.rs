//! A host's CPU budget (`mme-host --cpu-max`): the process moves itself
//! into a cgroup of its own, `<cpu hierarchy>/mobicore-hosts/host<id>-<pid>`
//! (into its leaf `main`, beside its NF instances'), bounded to a
//! fraction of a core, so that its capacity (`c_i` of seed 004 Eq. 1,
//! issue 13 item 8) is the kernel's, measured, not modelled. cgroup v2
//! (`cpu.max`) where its root has the cpu controller, else cgroup v1's
//! cpu hierarchy (`cpu.cfs_quota_us` over `cpu.cfs_period_us`, the same
//! quota and period, [`quota_period_us`]: a 10 ms period). The cgroup is
//! removed when the host stops (the process first moves back to the
//! cgroup it came from); a killed host's is removed by whoever reaps it
//! ([`remove_leftovers`]).
//!
//! A host's NF instances ([`NfCgroups`], `mme-host --nf`) get a cgroup per
//! slot under the host's (its `--cpu-max` one, else an unbounded
//! `host<id>-<pid>`), weighted by their kind's priority `P` (cgroup v2
//! `cpu.weight`, v1 `cpu.shares`): the kernel divides a contended core
//! among the runnable cgroups by weight, which is seed 004 Eq. 4
//! (`C_i = P_i / sum P_j` over the busy instances).

use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// The cgroup v2 hierarchy, where it is mounted by default.
pub const ROOT: &str = "/sys/fs/cgroup";
/// cgroup v1's cpu hierarchy, where it is mounted by default (also
/// `cpu,cpuacct`, a link to it on most systems).
pub const V1_ROOT: &str = "/sys/fs/cgroup/cpu";
/// The parent of the hosts' cgroups, under the root.
pub const PARENT: &str = "mobicore-hosts";
/// The leaf of a host's cgroup its process is in ([`HostCgroup::enter`]).
pub const PROCESS_LEAF: &str = "main";
/// The CFS period of a budget, microseconds, at most: 10 ms, a tenth of
/// the kernel's default. A host that spends its quota early in a period
/// waits for the next one; over a 100 ms period a tenth of a core would
/// stall for 90 ms, where a slower core (what a budget stands for) only
/// runs slower. Longer only so that the quota keeps the kernel's least, 1 ms.
pub const PERIOD_US: u64 = 10_000;
/// The least CFS quota the kernel takes, microseconds.
const MIN_QUOTA_US: u64 = 1_000;

/// The CFS quota and period for `fraction` of a core, microseconds: the
/// period [`PERIOD_US`], or longer for a quota of at least 1 ms.
pub fn quota_period_us(fraction: f64) -> Result<(u64, u64)> {
    if !fraction.is_finite() || fraction <= 0.0 {
        bail!("--cpu-max {fraction}: a fraction of a core above 0 (0.5: half a core; 2: two cores)");
    }
    let period = PERIOD_US.max((MIN_QUOTA_US as f64 / fraction).ceil() as u64).min(1_000_000);
    Ok((((fraction * period as f64).round() as u64).max(MIN_QUOTA_US), period))
}

/// `cpu.max` (v2) for `fraction` of a core: "<quota> <period>".
pub fn cpu_max(fraction: f64) -> Result<String> {
    let (quota, period) = quota_period_us(fraction)?;
    Ok(format!("{quota} {period}"))
}

/// The cgroup hierarchy a host's budget is set in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// `cpu.max`, processes in `cgroup.procs`.
    V2,
    /// `cpu.cfs_quota_us` and `cpu.cfs_period_us`, processes in `cgroup.procs`.
    V1,
}

/// The host's cgroup while it lives.
#[derive(Debug)]
pub struct HostCgroup {
    dir: PathBuf,
    /// The cgroup the process came from, to go back to before removal.
    origin: PathBuf,
    /// This process is in it (else another, which must be gone first).
    own: bool,
}

fn has_cpu(controllers: &str) -> bool {
    controllers.split_whitespace().any(|c| c == "cpu")
}

/// `+cpu` in `dir`'s subtree_control unless there already.
fn enable_cpu(dir: &Path) -> Result<()> {
    let file = dir.join("cgroup.subtree_control");
    let now = fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    if !has_cpu(&now) {
        fs::write(&file, "+cpu").with_context(|| format!("enabling the cpu controller in {}", file.display()))?;
    }
    Ok(())
}

/// The process's cgroup in the hierarchy of `version`, from
/// /proc/<pid>/cgroup: the v2 line "0::<path>", or the v1 line whose
/// controllers include cpu ("4:cpu,cpuacct:<path>").
pub fn origin_in(proc_cgroup: &str, version: Version) -> Option<&str> {
    proc_cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        let ours = match version {
            Version::V2 => controllers.is_empty() && l.starts_with("0::"),
            Version::V1 => controllers.split(',').any(|c| c == "cpu"),
        };
        ours.then_some(path)
    })
}

/// Which hierarchy bounds CPU here: v2 if `v2_root` has the cpu
/// controller, else v1 if `v1_root` has the CFS quota; else why neither.
pub fn available(v2_root: &Path, v1_root: &Path) -> Result<Version> {
    let controllers = fs::read_to_string(v2_root.join("cgroup.controllers")).unwrap_or_default();
    if has_cpu(&controllers) {
        return Ok(Version::V2);
    }
    if v1_root.join("cpu.cfs_quota_us").is_file() {
        return Ok(Version::V1);
    }
    bail!(
        "--cpu-max needs root and cgroup v2 with the cpu controller at {} (cgroup.controllers: {:?}) \
         or cgroup v1's cpu hierarchy at {} (cpu.cfs_quota_us); neither is here",
        v2_root.display(),
        controllers.trim(),
        v1_root.display()
    )
}

impl HostCgroup {
    /// Move process `pid` (in cgroup `origin`, relative to `root`) into a
    /// new cgroup for host `id` bounded to `fraction` of a core, in the
    /// hierarchy `root` of `version`.
    pub fn enter(root: &Path, version: Version, origin: &str, id: u8, pid: u32, fraction: f64) -> Result<HostCgroup> {
        let (quota, period) = quota_period_us(fraction)?;
        let dir = make_host_dir(root, version, &format!("host{id}-{pid}"))?;
        let own = pid == std::process::id();
        let cg = HostCgroup { dir, origin: root.join(origin.trim_start_matches('/')), own };
        let write = |file: &str, value: String| {
            fs::write(cg.dir.join(file), &value).with_context(|| format!("writing {file} {value:?}"))
        };
        match version {
            Version::V2 => write("cpu.max", format!("{quota} {period}"))?,
            Version::V1 => {
                write("cpu.cfs_period_us", period.to_string())?;
                write("cpu.cfs_quota_us", quota.to_string())?;
            }
        }
        // The process goes into a leaf below the budget, beside its NF
        // instances' (NfCgroups): a v2 cgroup with processes of its own
        // hands no controller to its children (cgroup-v2.rst, "No
        // Internal Process Constraint"), so the instances could not be
        // weighted. v1 the same, the leaf weighted as a task of its own.
        if version == Version::V2 {
            enable_cpu(&cg.dir)?;
        }
        let leaf = cg.dir.join(PROCESS_LEAF);
        fs::create_dir_all(&leaf).with_context(|| format!("creating {}", leaf.display()))?;
        let (file, w) = (weight_file(version), weight(version, 1.0));
        fs::write(leaf.join(file), w.to_string()).with_context(|| format!("writing {file} {w}"))?;
        fs::write(leaf.join("cgroup.procs"), pid.to_string()).context("moving the host into its cgroup")?;
        Ok(cg)
    }

    /// This process into a cgroup of its own (see the module).
    pub fn enter_self(id: u8, fraction: f64) -> Result<HostCgroup> {
        HostCgroup::enter_child(id, std::process::id(), fraction)
    }

    /// Process `pid`, this one or a child still in this one's cgroup,
    /// into a cgroup of its own (a bench's budgeted stateful MME, as host
    /// `id`). Another process must be gone before this is dropped.
    pub fn enter_child(id: u8, pid: u32, fraction: f64) -> Result<HostCgroup> {
        quota_period_us(fraction)?;
        let version = available(Path::new(ROOT), Path::new(V1_ROOT))?;
        let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let origin = origin_in(&own, version).unwrap_or("/").to_string();
        let root = if version == Version::V2 { ROOT } else { V1_ROOT };
        HostCgroup::enter(Path::new(root), version, &origin, id, pid, fraction)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for HostCgroup {
    /// Back to the cgroup it came from (a cgroup with a process in it
    /// cannot be removed), then remove it (its NF instances' first).
    fn drop(&mut self) {
        if self.own {
            let _ = fs::write(self.origin.join("cgroup.procs"), std::process::id().to_string());
        }
        match remove_host_dir(&self.dir) {
            // Another process's: whoever reaped it may have removed it.
            Err(e) if !self.own && e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("removing the host's cgroup {}: {e}", self.dir.display()),
            Ok(()) => {}
        }
    }
}

/// `<root>/mobicore-hosts/<name>`, the parent made (and, v2, given the
/// cpu controller) as needed. Another host's exit may remove the parent
/// between the two steps ([`remove_host_dir`]): then it is made again.
fn make_host_dir(root: &Path, version: Version, name: &str) -> Result<PathBuf> {
    let parent = root.join(PARENT);
    let dir = parent.join(name);
    let mut tries = 0;
    loop {
        let made = (|| {
            if version == Version::V2 {
                enable_cpu(root)?;
                fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
                enable_cpu(&parent)?;
            }
            fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))
        })();
        match made {
            Ok(()) => return Ok(dir),
            Err(e) if tries < 10 && !parent.is_dir() => {
                tries += 1;
                tracing::debug!("{}: made again ({e:#})", parent.display());
            }
            Err(e) => return Err(e),
        }
    }
}

/// Remove host cgroup `dir` ([`remove_tree`]), then the hosts' parent if
/// it was the last one in it (a cgroup with children cannot be removed:
/// then it stays).
fn remove_host_dir(dir: &Path) -> std::io::Result<()> {
    remove_tree(dir)?;
    if let Some(parent) = dir.parent().filter(|p| p.file_name().is_some_and(|n| n == PARENT)) {
        let _ = fs::remove_dir(parent);
    }
    Ok(())
}

/// Remove cgroup `dir` and its child cgroups; a child whose processes
/// are still exiting is retried for up to a second.
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    for child in fs::read_dir(dir)?.flatten().map(|e| e.path()).filter(|p| p.is_dir()) {
        let mut tries = 0;
        while let Err(e) = remove_tree(&child) {
            tries += 1;
            if tries >= 100 || e.kind() == std::io::ErrorKind::NotFound {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    fs::remove_dir(dir)
}

/// The CPU weight of a cgroup for priority `p` (in (0, 1]), proportional
/// to it: cgroup v2 `cpu.weight` (1..=10000, 100 the default) or v1
/// `cpu.shares` (2..=262144, 1024 the default).
pub fn weight(version: Version, p: f64) -> u64 {
    let p = if p.is_finite() { p.clamp(0.0, 1.0) } else { 1.0 };
    match version {
        Version::V2 => ((p * 1000.0).round() as u64).clamp(1, 10_000),
        Version::V1 => ((p * 1024.0).round() as u64).clamp(2, 262_144),
    }
}

/// The file of a cgroup's CPU weight.
fn weight_file(version: Version) -> &'static str {
    match version {
        Version::V2 => "cpu.weight",
        Version::V1 => "cpu.shares",
    }
}

/// The cgroups of a host's NF instances, one per slot, weighted by `P`.
#[derive(Debug)]
pub struct NfCgroups {
    version: Version,
    /// The host's cgroup (made here if the host has none: then removed
    /// with the slots').
    parent: PathBuf,
    made_parent: bool,
}

impl NfCgroups {
    /// Slot cgroups `nf<slot>` with weights from `priorities`, under
    /// `host_dir` (the host's --cpu-max cgroup) or a new
    /// `<root>/mobicore-hosts/host<id>-<pid>` of this process.
    pub fn create(host_dir: Option<&Path>, id: u8, priorities: &[f64]) -> Result<NfCgroups> {
        let version = available(Path::new(ROOT), Path::new(V1_ROOT))?;
        let root = Path::new(if version == Version::V2 { ROOT } else { V1_ROOT });
        NfCgroups::create_in(root, version, host_dir, id, std::process::id(), priorities)
    }

    pub fn create_in(
        root: &Path,
        version: Version,
        host_dir: Option<&Path>,
        id: u8,
        pid: u32,
        priorities: &[f64],
    ) -> Result<NfCgroups> {
        let (parent, made_parent) = match host_dir {
            Some(d) => (d.to_path_buf(), false),
            None => (make_host_dir(root, version, &format!("host{id}-{pid}"))?, true),
        };
        let cg = NfCgroups { version, parent, made_parent };
        if version == Version::V2 {
            // The host's process is in a leaf beside the slots (or in
            // another cgroup): none in the parent, which may hand on cpu.
            enable_cpu(&cg.parent)?;
        }
        for (slot, &p) in priorities.iter().enumerate() {
            let dir = cg.slot_dir(slot);
            fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            cg.set_weight(slot, p)?;
        }
        Ok(cg)
    }

    /// Slot `slot`'s CPU weight for priority `p` (its instance took
    /// another kind).
    pub fn set_weight(&self, slot: usize, p: f64) -> Result<()> {
        let (file, w) = (weight_file(self.version), weight(self.version, p));
        let path = self.slot_dir(slot).join(file);
        fs::write(&path, w.to_string()).with_context(|| format!("writing {} {w}", path.display()))
    }

    /// A cgroup for a slot added at run time, weighted for `p`.
    pub fn add_slot(&self, slot: usize, p: f64) -> Result<()> {
        let dir = self.slot_dir(slot);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        self.set_weight(slot, p)
    }

    fn slot_dir(&self, slot: usize) -> PathBuf {
        self.parent.join(format!("nf{slot}"))
    }

    /// Process `pid` (slot `slot`'s instance) into the slot's cgroup.
    pub fn enter(&self, slot: usize, pid: u32) -> Result<()> {
        let file = self.slot_dir(slot).join("cgroup.procs");
        fs::write(&file, pid.to_string()).with_context(|| format!("writing {}", file.display()))
    }

    pub fn version(&self) -> Version {
        self.version
    }
}

impl Drop for NfCgroups {
    /// Remove the slots' cgroups (the instances are killed by then) and
    /// the parent if made here.
    fn drop(&mut self) {
        let r = if self.made_parent {
            remove_host_dir(&self.parent)
        } else {
            fs::read_dir(&self.parent).map(|d| {
                for e in d.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("nf")) {
                    let _ = remove_tree(&e.path());
                }
            })
        };
        if let Err(e) = r {
            tracing::warn!("removing the NF instances' cgroups in {}: {e}", self.parent.display());
        }
    }
}

/// The cgroup of host process `pid` under `root`, if there.
pub fn host_dir(root: &Path, pid: u32) -> Option<PathBuf> {
    let suffix = format!("-{pid}");
    fs::read_dir(root.join(PARENT))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("host") && n.ends_with(&suffix)))
}

/// Remove the cgroup a host process `pid` left (it was killed, so never
/// moved out and removed it): called by whoever reaped it. Empty by then,
/// so removable; nothing if there is none.
pub fn remove_leftovers(pid: u32) {
    for root in [ROOT, V1_ROOT] {
        if let Some(dir) = host_dir(Path::new(root), pid) {
            let _ = remove_host_dir(&dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_and_cpu_max() {
        assert_eq!(quota_period_us(0.2).unwrap(), (2_000, 10_000));
        assert_eq!(cpu_max(0.5).unwrap(), "5000 10000");
        assert_eq!(cpu_max(2.0).unwrap(), "20000 10000");
        assert_eq!(cpu_max(0.1).unwrap(), "1000 10000");
        // Below a tenth of a core, the period grows to keep a 1 ms quota.
        assert_eq!(cpu_max(0.05).unwrap(), "1000 20000");
        assert_eq!(cpu_max(0.001).unwrap(), "1000 1000000", "the kernel's longest period");
        assert!(quota_period_us(0.0).is_err() && quota_period_us(-1.0).is_err() && quota_period_us(f64::NAN).is_err());
    }

    #[test]
    fn origin_of_either_hierarchy() {
        let hybrid = "9:name=systemd:/\n4:memory:/a/b\n2:cpu,cpuacct:/user.slice\n0::/init.scope\n";
        assert_eq!(origin_in(hybrid, Version::V1), Some("/user.slice"));
        assert_eq!(origin_in(hybrid, Version::V2), Some("/init.scope"));
        assert_eq!(origin_in("1:cpuset:/\n", Version::V1), None, "cpuset is not cpu");
        assert_eq!(origin_in("", Version::V2), None);
    }

    fn temp(name: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("mobicore-cgroup-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join(PARENT)).unwrap();
        fs::write(root.join("cgroup.procs"), "").unwrap();
        root
    }

    /// A directory laid out like a cgroup v2 root (plain files here).
    fn fake_root(controllers: &str) -> PathBuf {
        let root = temp(&format!("v2-{}", controllers.len()));
        fs::write(root.join("cgroup.controllers"), controllers).unwrap();
        fs::write(root.join("cgroup.subtree_control"), "").unwrap();
        fs::write(root.join(PARENT).join("cgroup.subtree_control"), "cpu").unwrap();
        root
    }

    #[test]
    fn a_host_cgroup_is_made_bounded_and_entered() {
        let root = fake_root("cpuset cpu io memory pids");
        assert_eq!(available(&root, Path::new("/nonexistent")).unwrap(), Version::V2);
        // The kernel makes a cgroup's files with it; here, by hand.
        let dir = root.join(PARENT).join("host3-4242");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("cgroup.subtree_control"), "").unwrap();
        let cg = HostCgroup::enter(&root, Version::V2, "/", 3, 4242, 0.25).unwrap();
        assert_eq!(cg.dir(), dir);
        assert_eq!(host_dir(&root, 4242).as_deref(), Some(cg.dir()));
        assert_eq!(fs::read_to_string(dir.join("cpu.max")).unwrap(), "2500 10000");
        // The process in a leaf, none in the budget's cgroup, which hands
        // cpu on (to the NF instances' slots, weighted against the leaf).
        assert!(!dir.join("cgroup.procs").exists());
        assert_eq!(fs::read_to_string(dir.join("main/cgroup.procs")).unwrap(), "4242");
        assert_eq!(fs::read_to_string(dir.join("main/cpu.weight")).unwrap(), "1000");
        assert_eq!(fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap(), "+cpu");
        assert_eq!(fs::read_to_string(root.join("cgroup.subtree_control")).unwrap(), "+cpu", "enabled in the root");
        assert_eq!(fs::read_to_string(root.join(PARENT).join("cgroup.subtree_control")).unwrap(), "cpu", "kept");
        let nfs = NfCgroups::create_in(&root, Version::V2, Some(&dir), 3, 4242, &[0.5]).unwrap();
        assert_eq!(fs::read_to_string(dir.join("nf0/cpu.weight")).unwrap(), "500");
        // Plain directories keep their files (rmdir of a cgroup does not).
        std::mem::forget((nfs, cg));
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_v1_host_cgroup_has_the_same_quota_and_period() {
        let root = temp("v1");
        fs::write(root.join("cpu.cfs_quota_us"), "-1").unwrap();
        let no_v2 = root.join("no-v2");
        assert_eq!(available(&no_v2, &root).unwrap(), Version::V1);
        let cg = HostCgroup::enter(&root, Version::V1, "/", 2, 77, 0.2).unwrap();
        assert_eq!(cg.dir(), root.join(PARENT).join("host2-77"));
        assert_eq!(fs::read_to_string(cg.dir().join("cpu.cfs_quota_us")).unwrap(), "2000");
        assert_eq!(fs::read_to_string(cg.dir().join("cpu.cfs_period_us")).unwrap(), "10000");
        assert_eq!(fs::read_to_string(cg.dir().join("main/cgroup.procs")).unwrap(), "77");
        assert_eq!(fs::read_to_string(cg.dir().join("main/cpu.shares")).unwrap(), "1024", "a nice-0 task's");
        let other = HostCgroup::enter(&root, Version::V1, "/", 3, 78, 0.2).unwrap();
        // A plain directory keeps its files; a cgroup's go with rmdir.
        for cg in [&cg, &other] {
            for f in ["cpu.cfs_quota_us", "cpu.cfs_period_us", "main/cgroup.procs", "main/cpu.shares"] {
                fs::remove_file(cg.dir().join(f)).unwrap();
            }
        }
        drop(cg);
        assert!(root.join(PARENT).is_dir(), "the other host's is in it");
        drop(other);
        assert!(!root.join(PARENT).exists(), "removed with the last host's");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn nf_cgroups_are_weighted_by_priority_and_removed() {
        assert_eq!((weight(Version::V2, 1.0), weight(Version::V2, 0.25)), (1000, 250));
        assert_eq!((weight(Version::V1, 1.0), weight(Version::V1, 0.0)), (1024, 2));
        let root = temp("nf-v1");
        let cg = NfCgroups::create_in(&root, Version::V1, None, 3, 77, &[1.0, 0.5]).unwrap();
        let host = root.join(PARENT).join("host3-77");
        assert_eq!(fs::read_to_string(host.join("nf1/cpu.shares")).unwrap(), "512");
        cg.enter(0, 1234).unwrap();
        assert_eq!(fs::read_to_string(host.join("nf0/cgroup.procs")).unwrap(), "1234");
        // A plain directory keeps its files; a cgroup's go with rmdir.
        fs::remove_file(host.join("nf0/cgroup.procs")).unwrap();
        for s in ["nf0", "nf1"] {
            fs::remove_file(host.join(s).join("cpu.shares")).unwrap();
        }
        drop(cg);
        assert!(!host.exists());
        let root = fake_root("cpu");
        let host = root.join(PARENT).join("host3-77");
        fs::create_dir_all(&host).unwrap();
        fs::write(host.join("cgroup.subtree_control"), "").unwrap();
        let cg = NfCgroups::create_in(&root, Version::V2, Some(&host), 3, 77, &[0.5]).unwrap();
        assert_eq!(fs::read_to_string(host.join("nf0/cpu.weight")).unwrap(), "500");
        assert_eq!(cg.version(), Version::V2);
        std::mem::forget(cg);
    }

    #[test]
    fn no_cpu_control_is_a_clear_error() {
        let missing = std::env::temp_dir().join(format!("mobicore-no-cgroup-{}", std::process::id()));
        let e = available(&missing, &missing).unwrap_err().to_string();
        assert!(e.contains("cgroup v2") && e.contains("cgroup v1"), "{e}");
        let root = fake_root("memory pids");
        let e = available(&root, &missing).unwrap_err().to_string();
        assert!(e.contains("\"memory pids\""), "{e}");
        fs::remove_dir_all(&root).unwrap();
    }
}
