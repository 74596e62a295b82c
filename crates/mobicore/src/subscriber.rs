//! `mobicore subscriber ...`: the HSS's embedded persistent store
//! (`$MOBICORE_DATA_DIR/subscribers.json`, default `/var/lib/mobicore`).

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use mobicore_common::Imsi;
use mobicore_hss::subscriber::{parse_amf, parse_key};
use mobicore_hss::{ApnProfile, Subscriber, SubscriberStore};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct StoreArg {
    /// Subscriber store file (default: $MOBICORE_DATA_DIR/subscribers.json or /var/lib/mobicore/subscribers.json).
    #[arg(long)]
    pub store: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum SubscriberCommand {
    /// Add (or replace) one subscriber.
    Add {
        #[command(flatten)]
        store: StoreArg,
        /// IMSI, 6 to 15 digits.
        #[arg(long)]
        imsi: String,
        /// K, 32 hex digits.
        #[arg(long)]
        k: String,
        /// OPc, 32 hex digits (or give --op).
        #[arg(long, conflicts_with = "op", required_unless_present = "op")]
        opc: Option<String>,
        /// OP, 32 hex digits; OPc is derived from it.
        #[arg(long)]
        op: Option<String>,
        /// AMF, 4 hex digits.
        #[arg(long, default_value = "8000")]
        amf: String,
        /// SQN_HE to start from.
        #[arg(long, default_value_t = 0)]
        sqn: u64,
        #[arg(long)]
        msisdn: Option<String>,
        /// APN (Service-Selection) of the default PDN connection.
        #[arg(long, default_value = "internet")]
        apn: String,
        #[arg(long, default_value_t = 9)]
        qci: u8,
    },
    /// List subscribers (IMSI, AMF, SQN, MSISDN, APNs, and the IMEI / Software-Version the last ULR named).
    List {
        #[command(flatten)]
        store: StoreArg,
    },
    /// Remove a subscriber.
    Remove {
        #[command(flatten)]
        store: StoreArg,
        imsi: String,
    },
    /// Import subscribers from CSV. Header line:
    /// `imsi,k,opc,amf,sqn,msisdn,apn,qci,arp,ambr_ul,ambr_dl`; keys in hex,
    /// amf 4 hex digits (empty: 8000), sqn decimal (empty: 0), qci (empty: 9),
    /// arp priority 1..15 (empty: 9), AMBRs in bit/s (empty: 100000000).
    /// Several lines with one IMSI add APNs in order (the first is the default).
    /// Optional columns after ambr_dl (all three in the header, or none; each may be
    /// empty): `,pdn_type,pdn_gw,static_ipv4`: PDN type ipv4 | ipv6 | ipv4v6 (empty: ipv4),
    /// the APN's PDN GW address (sent to the MME in MIP6-Agent-Info) and the UE's static
    /// IPv4 address (Served-Party-IP-Address), e.g. `...,internet,9,9,,,ipv4v6,10.9.0.5,10.45.0.9`.
    Import {
        #[command(flatten)]
        store: StoreArg,
        file: PathBuf,
    },
}

fn open(s: &StoreArg) -> Result<SubscriberStore> {
    let store = match &s.store {
        Some(p) => SubscriberStore::open(p),
        None => SubscriberStore::open_default(),
    };
    store.context("opening the subscriber store (set --store or MOBICORE_DATA_DIR to a writable place)")
}

pub fn run(cmd: SubscriberCommand) -> Result<()> {
    match cmd {
        SubscriberCommand::Add { store, imsi, k, opc, op, amf, sqn, msisdn, apn, qci } => {
            let st = open(&store)?;
            let imsi: Imsi = imsi.parse()?;
            let k = parse_key(&k).map_err(anyhow::Error::msg).context("--k")?;
            let mut sub = Subscriber::new(imsi.clone(), k, [0; 16]);
            sub.opc = opc.map(|o| parse_key(&o)).transpose().map_err(anyhow::Error::msg).context("--opc")?;
            sub.op = op.map(|o| parse_key(&o)).transpose().map_err(anyhow::Error::msg).context("--op")?;
            sub.amf = parse_amf(&amf).map_err(anyhow::Error::msg).context("--amf")?;
            sub.sqn = sqn;
            sub.msisdn = msisdn;
            let mut profile = ApnProfile::new(&apn);
            profile.qci = qci;
            sub.apns = vec![profile];
            st.add(sub)?;
            st.flush()?;
            println!("added {imsi}");
        }
        SubscriberCommand::List { store } => {
            let st = open(&store)?;
            let rows: Vec<Vec<String>> = st
                .list()
                .into_iter()
                .map(|s| {
                    vec![
                        s.imsi.to_string(),
                        format!("{:04x}", s.amf),
                        s.sqn.to_string(),
                        s.msisdn.clone().unwrap_or_default(),
                        s.apns.iter().map(|a| format!("{}(qci {})", a.name, a.qci)).collect::<Vec<_>>().join(","),
                        s.terminal.as_ref().and_then(|t| t.imei.clone()).unwrap_or_default(),
                        s.terminal.as_ref().and_then(|t| t.software_version.clone()).unwrap_or_default(),
                    ]
                })
                .collect();
            print!("{}", crate::report::table(&["imsi", "amf", "sqn", "msisdn", "apns", "imei", "sv"], &rows));
            println!("{} subscriber(s)", rows.len());
        }
        SubscriberCommand::Remove { store, imsi } => {
            let st = open(&store)?;
            let imsi: Imsi = imsi.parse()?;
            anyhow::ensure!(st.remove(&imsi), "no subscriber {imsi}");
            st.flush()?;
            println!("removed {imsi}");
        }
        SubscriberCommand::Import { store, file } => {
            let st = open(&store)?;
            let n = st.import(&file).with_context(|| format!("importing {}", file.display()))?;
            st.flush()?;
            println!(
                "imported {n} subscriber(s) into {}",
                st.path().map(|p| p.display().to_string()).unwrap_or_default()
            );
        }
    }
    Ok(())
}
