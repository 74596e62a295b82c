//! Anchors started on demand (issue 11 item 3): a site is where an anchor
//! can run; the first relocation towards a site that runs nothing starts
//! `mobicore upf` and `mobicore spgwc` processes for it, their data path in
//! the site's namespace, their control sockets on the site's loopback
//! addresses. Ready means the S/P-GW-C holds a PFCP association with its
//! UPF (its `pfcp_associations_set_up` counter), so the first replayed
//! Create Session finds a user plane.
//!
//! The processes get SIGINT when the controller stops (and, through
//! `PR_SET_PDEATHSIG`, when it dies), so the UPF detaches its XDP program.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use crate::context::Anchor;

/// `[[controller.sites]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SiteConfig {
    /// The anchor's name once started (what relocations name), e.g. `edge1`.
    pub name: String,
    /// The `mobicore` executable; this process's own when unset.
    pub program: Option<PathBuf>,
    /// The S/P-GW-C's loopback address (S11 on 2123, PFCP on 8805, metrics
    /// on 9101); the UPF's is the next one (PFCP on 8805, metrics on 9102).
    pub loopback: Ipv4Addr,
    /// Namespace of the UPF's data path (both interfaces); none: this one.
    pub netns: Option<String>,
    /// The UPF's S1-U address, and its interfaces towards the steering
    /// switch and the data network.
    pub s1u_addr: Ipv4Addr,
    pub access_interface: String,
    pub core_interface: String,
    /// The UPF's data path: "auto", "xdp" or "userspace".
    pub datapath: String,
    /// The APN and the address pool its sessions draw from (a selective
    /// move asks for the UE's own address, which is honoured outside it).
    pub apn: String,
    pub ue_pool: Ipv4Addr,
    pub ue_pool_prefix: u8,
    /// Longest wait for the pair to be ready.
    pub ready_timeout_ms: u64,
}

impl Default for SiteConfig {
    fn default() -> Self {
        SiteConfig {
            name: "edge1".into(),
            program: None,
            loopback: Ipv4Addr::new(127, 0, 0, 41),
            netns: None,
            s1u_addr: Ipv4Addr::new(10, 201, 1, 2),
            access_interface: "s1u".into(),
            core_interface: "sgi".into(),
            datapath: "auto".into(),
            apn: "internet".into(),
            ue_pool: Ipv4Addr::new(10, 60, 0, 0),
            ue_pool_prefix: 16,
            ready_timeout_ms: 20_000,
        }
    }
}

impl SiteConfig {
    pub fn s11(&self) -> SocketAddr {
        SocketAddr::new(self.loopback.into(), 2123)
    }
    fn upf_loopback(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.loopback) + 1)
    }
    fn spgwc_metrics(&self) -> SocketAddr {
        SocketAddr::new(self.loopback.into(), 9101)
    }
    fn upf_metrics(&self) -> SocketAddr {
        SocketAddr::new(self.upf_loopback().into(), 9102)
    }

    /// The config file both processes read (`[spgwc]`, `[upf]`).
    pub fn toml(&self) -> String {
        let (cp, up) = (self.loopback, self.upf_loopback());
        let ns =
            self.netns.as_deref().map_or(String::new(), |n| format!("access_netns = \"{n}\"\ncore_netns = \"{n}\"\n"));
        format!(
            "[spgwc]\ns11 = \"{cp}:2123\"\npfcp = \"{cp}:8805\"\nnode_id = \"{cp}\"\n\
             [[spgwc.apns]]\nname = \"{apn}\"\npool = \"{pool}\"\nprefix_len = {plen}\n\
             [[spgwc.upfs]]\npfcp = \"{up}:8805\"\ns1u_addr = \"{s1u}\"\nteid_base = 65536\nteid_count = 16711680\n\
             [upf]\npfcp = \"{up}:8805\"\nnode_id = \"{up}\"\ns1u_addr = \"{s1u}\"\ndatapath = \"{dp}\"\n\
             access_interface = \"{ai}\"\ncore_interface = \"{ci}\"\n{ns}ue_pools = [\"{pool}/{plen}\"]\n",
            apn = self.apn,
            pool = self.ue_pool,
            plen = self.ue_pool_prefix,
            s1u = self.s1u_addr,
            dp = self.datapath,
            ai = self.access_interface,
            ci = self.core_interface,
        )
    }
}

/// A started site: its two processes and their working directory.
pub struct RunningSite {
    pub anchor: Anchor,
    children: Vec<Child>,
    dir: PathBuf,
}

impl RunningSite {
    /// SIGINT to both (the UPF detaches XDP), then SIGKILL after 5 s.
    pub async fn stop(mut self) {
        for c in &self.children {
            if let Some(pid) = c.id() {
                // SAFETY: kill(2) on a child we own.
                unsafe { libc::kill(pid as i32, libc::SIGINT) };
            }
        }
        for c in &mut self.children {
            if tokio::time::timeout(Duration::from_secs(5), c.wait()).await.is_err() {
                let _ = c.kill().await;
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts the UPF, waits for it to serve, starts the S/P-GW-C and waits
/// for its association; on any failure what was started is stopped.
pub async fn launch(cfg: &SiteConfig) -> Result<RunningSite, String> {
    let program = match &cfg.program {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(|e| format!("the controller's own executable: {e}"))?,
    };
    let dir = std::env::temp_dir().join(format!("mobicore-site-{}-{}", cfg.name, std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let conf = dir.join("site.toml");
    std::fs::write(&conf, cfg.toml()).map_err(|e| format!("{}: {e}", conf.display()))?;
    let mut site = RunningSite {
        anchor: Anchor { name: cfg.name.clone(), s11: cfg.s11() },
        children: Vec::new(),
        dir: dir.clone(),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(cfg.ready_timeout_ms);
    let r = async {
        site.children.push(spawn(&program, "upf", &conf, cfg.upf_metrics(), &dir)?);
        wait_for(&mut site.children[0], cfg.upf_metrics(), None, deadline, &dir, "upf").await?;
        site.children.push(spawn(&program, "spgwc", &conf, cfg.spgwc_metrics(), &dir)?);
        let ready = Some("mobicore_spgwc_pfcp_associations_set_up ");
        wait_for(&mut site.children[1], cfg.spgwc_metrics(), ready, deadline, &dir, "spgwc").await
    }
    .await;
    match r {
        Ok(()) => {
            tracing::info!(site = %cfg.name, s11 = %cfg.s11(), "anchor started");
            Ok(site)
        }
        Err(e) => {
            site.stop().await;
            Err(format!("starting anchor {}: {e}", cfg.name))
        }
    }
}

fn spawn(program: &Path, nf: &str, conf: &Path, metrics: SocketAddr, dir: &Path) -> Result<Child, String> {
    let log = std::fs::File::create(dir.join(format!("{nf}.log"))).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(program);
    cmd.arg(nf)
        .arg("--config")
        .arg(conf)
        .arg("--metrics")
        .arg(metrics.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true);
    // SAFETY: prctl in the child before exec; async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGINT);
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| format!("{} {nf}: {e}", program.display()))
}

/// Polls `metrics` until it answers (with `want`: has that counter, which
/// is there once counted), the child exits, or `deadline`.
async fn wait_for(
    child: &mut Child,
    metrics: SocketAddr,
    want: Option<&str>,
    deadline: tokio::time::Instant,
    dir: &Path,
    nf: &str,
) -> Result<(), String> {
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(dir.join(format!("{nf}.log"))).unwrap_or_default();
            return Err(format!("{nf} exited ({status}): {}", log.trim()));
        }
        if let Ok(text) = http_get(metrics, "/metrics").await {
            if want.is_none_or(|w| text.lines().any(|l| l.starts_with(w))) {
                return Ok(());
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("{nf} not ready in time ({} at {metrics})", want.unwrap_or("no answer")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A plain HTTP/1.0 GET; the body.
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    Ok(http(addr, "GET", path, None, "").await?.1)
}

/// A minimal HTTP/1.0 request (the REST API's clients: readiness probes,
/// the demo, tests): status and body. `token` goes as a bearer token.
pub async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let limit = Duration::from_secs(30);
    let mut c = tokio::time::timeout(limit, tokio::net::TcpStream::connect(addr)).await??;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let head = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).await?;
    c.write_all(body.as_bytes()).await?;
    let mut out = Vec::new();
    tokio::time::timeout(limit, c.read_to_end(&mut out)).await??;
    let text = String::from_utf8_lossy(&out);
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((status, text.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| b.to_string())))
}
