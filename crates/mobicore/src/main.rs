//! `mobicore`: a software-defined LTE packet core in one binary.
//!
//! # Layout
//! - `cli`: the command line (clap).
//! - `config`: the one TOML config file, a section per network function.
//! - `allinone`: starts every network function in this process on loopback.
//! - `demo`: `mobicore demo`, the end-to-end story with a summary.
//! - `bench`: `mobicore bench ...`, measurements with their baselines.
//! - `subscriber`: `mobicore subscriber ...`, the HSS's embedded store.
//! - `capture`: tshark capture and its verdict.
//! - `report`: percentiles, tables, JSON.

mod allinone;
mod bench;
mod capture;
mod cli;
mod config;
mod demo;
mod report;
mod subscriber;

use anyhow::Result;
use clap::Parser;

fn main() -> Result<()> {
    let cli = cli::Cli::parse();
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| cli.log.clone());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.threads)
        .enable_all()
        .build()?;
    rt.block_on(cli::dispatch(cli))
}
