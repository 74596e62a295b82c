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
    // No transparent huge pages (inherited by the processes we start).
    // mimalloc asks for them on its arenas, so each first touch of 2 MiB
    // faulted in and zeroed a whole huge page: a growing UE table paid it
    // on the signalling path (at 11,000 attaches/s offered, bench mme
    // fig6's hosts and load generator did 12-17% more attaches/s
    // without). Redis, which the store may be, advises the same.
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and touches no memory.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    let cli = cli::Cli::parse();
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| cli.log.clone());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .init();
    // One thread: a current-thread runtime, so that tasks handing each
    // other messages never wake another thread (an elastic MME front end
    // on two workers spent 40% of its CPU switching between them).
    let rt = match cli.threads {
        1 => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        n => tokio::runtime::Builder::new_multi_thread().worker_threads(n).enable_all().build()?,
    };
    rt.block_on(cli::dispatch(cli))
}
