//! `mobicore bench slowpath`: how user space receives the downlink packets
//! of a buffering session in XDP mode, TUN (XDP_PASS + kernel route) versus
//! AF_XDP copy mode, measured in one run on one topology
//! (`mobicore_dpbench::slowpath` does the work).

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct SlowpathArgs {
    /// Inner packet sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "64,1400")]
    pub sizes: Vec<usize>,
    /// Seconds per run (each mechanism runs twice per size).
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Frames of each AF_XDP socket's UMEM (power of two; the UPF's default).
    #[arg(long, default_value_t = mobicore_upf::afxdp::DEFAULT_FRAMES)]
    pub frames: u32,
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub async fn run(a: SlowpathArgs) -> Result<()> {
    let opts = mobicore_dpbench::slowpath::SlowpathOptions {
        sizes: a.sizes,
        duration: std::time::Duration::from_secs_f64(a.seconds),
        frames: a.frames,
        quick: false,
    };
    let report = tokio::task::spawn_blocking(move || mobicore_dpbench::slowpath::run_blocking(&opts)).await??;
    print!("{}", mobicore_dpbench::slowpath::table(&report));
    if let Some(p) = &a.json {
        crate::demo::write_json(p, &serde_json::to_value(&report)?)?;
    }
    Ok(())
}
