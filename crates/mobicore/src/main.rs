//! The `mobicore` binary: parses the command line and runs it on a tokio
//! runtime (see the library's crate docs for the layout).

use anyhow::Result;
use clap::Parser;
use mobicore::cli;

// Signalling allocates many small short-lived buffers across threads;
// mimalloc halves the allocator's share of a full-attach run against glibc's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<()> {
    let cli = cli::Cli::parse();
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| cli.log.clone());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(cli.threads).enable_all().build()?;
    rt.block_on(cli::dispatch(cli))
}
