//! The command line. Every subcommand runs with sane defaults and no config
//! file; `--config FILE` (TOML, see `mobicore config default`) overrides.

use crate::{bench, config, demo, subscriber};
use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(name = "mobicore", version, about = "A software-defined LTE packet core: MME, HSS, S/P-GW-C, UPF and an emulated RAN in one binary", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log filter (tracing env-filter syntax; RUST_LOG overrides).
    #[arg(long, global = true, default_value = "warn")]
    pub log: String,
    /// Tokio worker threads (1: one thread runs everything, no wake-ups
    /// between threads: what `bench mme` gives the elastic MME's front end
    /// and hosts, processes that share the cores with each other).
    #[arg(long, global = true, default_value_t = 2)]
    pub threads: usize,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run every network function on this machine, attach N emulated UEs, carry some of their traffic through GTP-U, detach them, print a summary.
    Demo(demo::DemoArgs),
    /// Measurements, each with its baseline in the same run.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Run the MME alone (S1-MME over SCTP, S6a client, S11 client).
    Mme(NfArgs),
    /// Run the HSS alone (S6a over Diameter/TCP, embedded subscriber store).
    Hss(NfArgs),
    /// Run the combined S/P-GW control plane alone (S11, PFCP).
    Spgwc(NfArgs),
    /// Run the user-plane function alone (PFCP; XDP or user-space data path, see [upf] datapath).
    Upf(NfArgs),
    /// Run the edge-relocation controller alone: the S11 relay between the MME and the S/P-GW-C, replication into edge anchors, REST API ([controller]).
    Controller(NfArgs),
    /// The elastic MME's front end: the one MME the eNBs see (S1-MME, S1 Setup, eNB contexts) and the S/P-GW-C sees (S11); routes each UE's messages to an MME host (mme-host) by the host number in its identifiers (S1AP IDs, M-TMSI, S11 TEID), new UEs by --scheme; scales hosts out and in (hosts joining at run time; drains on --admin requests or by the EPS controller, --autoscale).
    MmeFrontend(crate::elastic_mme::FrontendArgs),
    /// One MME host of the elastic MME: the MME core for the UEs the front end routes to it, its own S6a, S11 through the front end, UE contexts in a store shared by all hosts (Redis) or its own replicated to its replica hosts (--store local), written cold or hot; takes over the UEs of a host that died or was drained (of its replica groups).
    MmeHost(crate::elastic_mme::HostArgs),
    /// One NF instance of an mme-host started with --nf-instances (the host starts it).
    #[command(hide = true)]
    MmeNf(crate::elastic_mme::NfInstanceArgs),
    /// Run the emulated RAN against an MME: attach (and detach) UEs.
    Ran(RanArgs),
    /// Detach a UE from the network through the MME's admin endpoint ([mme] admin): network-initiated detach (TS 24.301 5.5.2.3), the idle UE paged first.
    Detach(DetachArgs),
    /// Manage the HSS's subscribers.
    #[command(subcommand)]
    Subscriber(subscriber::SubscriberCommand),
    /// Configuration helpers.
    #[command(subcommand)]
    Config(ConfigCommand),
}

#[derive(Args, Debug)]
pub struct NfArgs {
    /// TOML config file (sections [mme], [hss], [spgwc], [upf], [controller], [ran], [sctp]).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Serve Prometheus metrics (the NF's counters) on this address, e.g. 127.0.0.1:9100.
    #[arg(long)]
    pub metrics: Option<std::net::SocketAddr>,
}

#[derive(Args, Debug)]
pub struct RanArgs {
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Number of UEs (overrides [ran] ues).
    #[arg(long)]
    pub ues: Option<u64>,
    /// Number of eNBs (overrides [ran] enbs).
    #[arg(long)]
    pub enbs: Option<u32>,
    /// UE arrivals per second (default: as fast as possible).
    #[arg(long)]
    pub rate: Option<f64>,
    #[command(flatten)]
    pub moving: MovingArgs,
    /// Write the report as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The emulated RAN's mobility model, as flags (`mobicore ran`, `mobicore
/// demo`): each overrides its `[ran]` / `[ran.moving]` option.
#[derive(Args, Debug, Clone, Default)]
pub struct MovingArgs {
    /// Mobility model ([ran.moving]): after the attach phase the
    /// registered UEs move to random other eNBs, this many times per UE
    /// per second, for --moving-s seconds: a connected UE by handover, an
    /// idle one by cell reselection (with a tracking area update when the
    /// new cell is outside its TAI list). In the demo it replaces the
    /// fixed mobility phases and runs with the demo's traffic.
    #[arg(long)]
    pub handover_rate: Option<f64>,
    /// Handover type of the model's moves: x2, s1 or mixed (per handover).
    #[arg(long)]
    pub handover_type: Option<mobicore_ran::HandoverType>,
    /// Seconds the UEs move (with --handover-rate or [ran.moving]).
    #[arg(long)]
    pub moving_s: Option<f64>,
    /// Milliseconds without user-plane activity after which an eNB releases
    /// a connected UE to idle ([ran] inactivity_ms): idle UEs reselect
    /// cells, come back by service request or paging.
    #[arg(long)]
    pub inactivity_ms: Option<u64>,
    /// eNBs per tracking area ([ran] enbs_per_tac; default: one TA for
    /// all): 1 puts each eNB in a TA of its own, so that moving idle UEs
    /// cross TA boundaries and update.
    #[arg(long)]
    pub enbs_per_tac: Option<u32>,
}

impl MovingArgs {
    /// Whether a flag asks for the mobility model.
    pub fn model_asked(&self) -> bool {
        self.handover_rate.is_some() || self.handover_type.is_some() || self.moving_s.is_some()
    }

    /// Apply the flags given to `ran`; the model's flags make a
    /// `[ran.moving]` of the defaults if the config has none.
    pub fn apply(&self, ran: &mut mobicore_ran::RanConfig) {
        if self.model_asked() {
            let m = ran.moving.get_or_insert_with(Default::default);
            if let Some(r) = self.handover_rate {
                m.handover_rate = r;
            }
            if let Some(t) = self.handover_type {
                m.handover_type = t;
            }
            if let Some(s) = self.moving_s {
                m.duration_ms = (s * 1000.0) as u64;
            }
        }
        if self.inactivity_ms.is_some() {
            ran.inactivity_ms = self.inactivity_ms;
        }
        if self.enbs_per_tac.is_some() {
            ran.enbs_per_tac = self.enbs_per_tac;
        }
    }
}

#[derive(Args, Debug)]
pub struct DetachArgs {
    /// The MME's admin endpoint ([mme] admin), e.g. 127.0.0.1:9300.
    #[arg(long)]
    pub admin: std::net::SocketAddr,
    /// Its bearer token ([mme] admin_token); default: $MOBICORE_ADMIN_TOKEN.
    #[arg(long)]
    pub token: Option<String>,
    /// The UE's IMSI.
    pub imsi: String,
    /// Ask the UE to attach again (detach type "re-attach required").
    #[arg(long)]
    pub reattach: bool,
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Print the default configuration as TOML, every option with its default.
    Default,
    /// Parse a config file (or the defaults), report errors, and list who may
    /// use each interface, warning about every one that accepts anyone.
    Check { file: Option<PathBuf> },
}

/// How S1-MME SCTP is carried.
#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SctpTransport {
    /// Raw IP where the kernel has no SCTP, else UDP encapsulation (raw
    /// sockets would fight the kernel's SCTP stack).
    #[default]
    Auto,
    /// User-space SCTP over raw IP protocol 132 (needs root).
    Raw,
    /// User-space SCTP over UDP (RFC 6951).
    Udp,
    /// Kernel SCTP: not implemented yet (these machines have none to test
    /// against); refused with an error that names the alternatives.
    Kernel,
}

pub async fn dispatch(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Demo(a) => demo::run(a).await,
        Command::Bench(b) => bench::run(b).await,
        Command::Mme(a) => crate::allinone::run_nf("mme", a).await,
        Command::Hss(a) => crate::allinone::run_nf("hss", a).await,
        Command::Spgwc(a) => crate::allinone::run_nf("spgwc", a).await,
        Command::Upf(a) => crate::allinone::run_nf("upf", a).await,
        Command::Controller(a) => crate::allinone::run_nf("controller", a).await,
        Command::Ran(a) => crate::allinone::run_ran(a).await,
        Command::MmeFrontend(a) => crate::elastic_mme::run_frontend(a).await,
        Command::MmeHost(a) => crate::elastic_mme::run_host(a).await,
        Command::MmeNf(a) => crate::elastic_mme::run_nf_instance(a).await,
        Command::Detach(a) => detach(a).await,
        Command::Subscriber(c) => subscriber::run(c),
        Command::Config(ConfigCommand::Default) => {
            print!("{}", config::default_toml()?);
            Ok(())
        }
        Command::Config(ConfigCommand::Check { file }) => {
            let c = config::load(file.as_deref())?;
            let name = file.as_ref().map_or("defaults".into(), |f| f.display().to_string());
            println!("{name}: ok; who may use each interface:");
            print!("{}", config::exposure_report(&c));
            Ok(())
        }
    }
}

/// `mobicore detach`: `POST /v1/ues/{imsi}/detach` on the MME's admin
/// endpoint; the answer is printed, an error status is an error.
async fn detach(a: DetachArgs) -> Result<()> {
    let token = a.token.or_else(|| std::env::var("MOBICORE_ADMIN_TOKEN").ok());
    let Some(token) = token else {
        anyhow::bail!("no token: give --token or set MOBICORE_ADMIN_TOKEN ([mme] admin_token)");
    };
    let path = format!("/v1/ues/{}/detach", a.imsi);
    let body = format!("{{\"reattachRequired\":{}}}", a.reattach);
    let (status, answer) = mobicore_controller::site::http(a.admin, "POST", &path, Some(&token), &body)
        .await
        .with_context(|| format!("reaching the MME's admin endpoint at {}", a.admin))?;
    if status != 202 {
        anyhow::bail!("{status}: {}", answer.trim());
    }
    println!("{}", answer.trim());
    Ok(())
}
