//! A host's CPU budget (`mme-host --cpu-max`): the process moves itself
//! into a cgroup v2 of its own, `<root>/mobicore-hosts/host<id>-<pid>`,
//! whose `cpu.max` bounds it to a fraction of a core, so that its capacity
//! (`c_i` of seed 004 Eq. 1) is the kernel's, measured, not modelled. The
//! cgroup is removed when the host stops (the process first moves back to
//! the cgroup it came from).

use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// The cgroup v2 hierarchy, where it is mounted by default.
pub const ROOT: &str = "/sys/fs/cgroup";
/// The parent of the hosts' cgroups, under the root.
pub const PARENT: &str = "mobicore-hosts";
/// `cpu.max`'s period, microseconds (the kernel's default).
pub const PERIOD_US: u64 = 100_000;

/// `cpu.max` for `fraction` of a core: "<quota> <period>" in
/// microseconds; the quota at least 1 ms (the kernel's least).
pub fn cpu_max(fraction: f64) -> Result<String> {
    if !fraction.is_finite() || fraction <= 0.0 {
        bail!("--cpu-max {fraction}: a fraction of a core above 0 (0.5: half a core; 2: two cores)");
    }
    let quota = ((fraction * PERIOD_US as f64).round() as u64).max(1000);
    Ok(format!("{quota} {PERIOD_US}"))
}

/// The host's cgroup while it lives.
#[derive(Debug)]
pub struct HostCgroup {
    dir: PathBuf,
    /// The cgroup the process came from, to go back to before removal.
    origin: PathBuf,
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

impl HostCgroup {
    /// Move process `pid` (in cgroup `origin`, relative to `root`) into a
    /// new cgroup for host `id` bounded to `fraction` of a core.
    pub fn enter(root: &Path, origin: &str, id: u8, pid: u32, fraction: f64) -> Result<HostCgroup> {
        let max = cpu_max(fraction)?;
        let controllers = root.join("cgroup.controllers");
        let controllers = fs::read_to_string(&controllers).map_err(|e| {
            anyhow::anyhow!(
                "--cpu-max needs cgroup v2 at {} ({}: {e}); on a cgroup v1 or hybrid system give no --cpu-max",
                root.display(),
                controllers.display()
            )
        })?;
        if !has_cpu(&controllers) {
            bail!(
                "--cpu-max: the cpu controller is not available in {} (cgroup.controllers: {controllers:?})",
                root.display()
            );
        }
        enable_cpu(root)?;
        let parent = root.join(PARENT);
        fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
        enable_cpu(&parent)?;
        let dir = parent.join(format!("host{id}-{pid}"));
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let cg = HostCgroup { dir, origin: root.join(origin.trim_start_matches('/')) };
        fs::write(cg.dir.join("cpu.max"), &max).with_context(|| format!("writing cpu.max {max:?}"))?;
        fs::write(cg.dir.join("cgroup.procs"), pid.to_string()).context("moving the host into its cgroup")?;
        Ok(cg)
    }

    /// This process into a cgroup of its own (see the module).
    pub fn enter_self(id: u8, fraction: f64) -> Result<HostCgroup> {
        let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        // The v2 line is "0::<path>".
        let origin = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("/").to_string();
        HostCgroup::enter(Path::new(ROOT), &origin, id, std::process::id(), fraction)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for HostCgroup {
    /// Back to the cgroup it came from (a cgroup with a process in it
    /// cannot be removed), then remove it.
    fn drop(&mut self) {
        let _ = fs::write(self.origin.join("cgroup.procs"), std::process::id().to_string());
        if let Err(e) = fs::remove_dir(&self.dir) {
            tracing::warn!("removing the host's cgroup {}: {e}", self.dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max_is_quota_and_period() {
        assert_eq!(cpu_max(0.5).unwrap(), "50000 100000");
        assert_eq!(cpu_max(2.0).unwrap(), "200000 100000");
        assert_eq!(cpu_max(0.001).unwrap(), "1000 100000", "at least 1 ms");
        assert!(cpu_max(0.0).is_err() && cpu_max(-1.0).is_err() && cpu_max(f64::NAN).is_err());
    }

    /// A directory laid out like a cgroup v2 root (plain files here).
    fn fake_root(controllers: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("mobicore-cgroup-{}-{}", std::process::id(), controllers.len()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join(PARENT)).unwrap();
        fs::write(root.join("cgroup.controllers"), controllers).unwrap();
        fs::write(root.join("cgroup.subtree_control"), "").unwrap();
        fs::write(root.join(PARENT).join("cgroup.subtree_control"), "cpu").unwrap();
        fs::write(root.join("cgroup.procs"), "").unwrap();
        root
    }

    #[test]
    fn a_host_cgroup_is_made_bounded_and_entered() {
        let root = fake_root("cpuset cpu io memory pids");
        let cg = HostCgroup::enter(&root, "/", 3, 4242, 0.25).unwrap();
        assert_eq!(cg.dir(), root.join(PARENT).join("host3-4242"));
        assert_eq!(fs::read_to_string(cg.dir().join("cpu.max")).unwrap(), "25000 100000");
        assert_eq!(fs::read_to_string(cg.dir().join("cgroup.procs")).unwrap(), "4242");
        assert_eq!(fs::read_to_string(root.join("cgroup.subtree_control")).unwrap(), "+cpu", "enabled in the root");
        assert_eq!(fs::read_to_string(root.join(PARENT).join("cgroup.subtree_control")).unwrap(), "cpu", "kept");
        drop(cg);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn no_cgroup_v2_or_no_cpu_controller_is_a_clear_error() {
        let missing = std::env::temp_dir().join(format!("mobicore-no-cgroup-{}", std::process::id()));
        let e = HostCgroup::enter(&missing, "/", 1, 1, 0.5).unwrap_err().to_string();
        assert!(e.contains("needs cgroup v2"), "{e}");
        let root = fake_root("memory pids");
        let e = HostCgroup::enter(&root, "/", 1, 1, 0.5).unwrap_err().to_string();
        assert!(e.contains("cpu controller is not available"), "{e}");
        fs::remove_dir_all(&root).unwrap();
    }
}
