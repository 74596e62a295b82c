//! `mobicore bench pfcp`: PFCP session establishments and deletions per
//! second against the UPF's PFCP node, with 1 and with N requests in flight.
//! Baseline in the same run: PFCP Heartbeat request/response at the same
//! concurrency (the socket and codec ceiling without session work).

use anyhow::{bail, Context, Result};
use mobicore_spgwc::sxa_build::{self as sxa, msg, SessionSpec};
use serde::Serialize;
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};
use tokio::net::UdpSocket;

#[derive(Debug, Clone, Serialize)]
pub struct PfcpCase {
    pub in_flight: usize,
    pub sessions: usize,
    pub establish_per_s: f64,
    pub delete_per_s: f64,
    pub baseline_heartbeat_per_s: f64,
    pub establish_ratio_to_heartbeat: f64,
}

/// One request/response client with a window of `in_flight` requests.
struct Client {
    sock: UdpSocket,
    upf: SocketAddr,
    seq: u32,
    buf: Vec<u8>,
}

impl Client {
    fn next_seq(&mut self) -> u32 {
        self.seq = (self.seq + 1) & 0x00ff_ffff;
        self.seq
    }

    /// Sends `count` requests made by `make(i, seq)`, keeping `window` in
    /// flight; returns the elapsed time and the responses by index.
    async fn run(
        &mut self,
        count: usize,
        window: usize,
        mut make: impl FnMut(usize, u32) -> Vec<u8>,
    ) -> Result<(Duration, Vec<Vec<rs_pfcp::ie::Ie>>)> {
        let mut pending: HashMap<u32, usize> = HashMap::new();
        let mut answers = vec![Vec::new(); count];
        let (mut sent, mut done) = (0, 0);
        let start = Instant::now();
        while done < count {
            while sent < count && pending.len() < window {
                let seq = self.next_seq();
                let m = make(sent, seq);
                self.sock.send_to(&m, self.upf).await?;
                pending.insert(seq, sent);
                sent += 1;
            }
            let n = tokio::time::timeout(Duration::from_secs(5), self.sock.recv(&mut self.buf))
                .await
                .context("the UPF stopped answering PFCP")??;
            let Some((h, ies)) = sxa::decode(&self.buf[..n]) else { bail!("undecodable PFCP answer") };
            if let Some(i) = pending.remove(&h.seq) {
                answers[i] = ies;
                done += 1;
            }
        }
        Ok((start.elapsed(), answers))
    }
}

pub async fn run(sessions: usize, windows: &[usize]) -> Result<Vec<PfcpCase>> {
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let cfg = mobicore_upf::UpfConfig { pfcp: "127.0.0.1:0".parse()?, ..Default::default() };
    let upf = mobicore_upf::Upf::bind(cfg).await.context("starting the UPF's PFCP node")?;
    let addr = upf.pfcp_addr();
    let task = tokio::spawn(upf.run(stop_rx));
    let sock = UdpSocket::bind("127.0.0.1:0").await?;
    let mut c = Client { sock, upf: addr, seq: 0, buf: vec![0; 65536] };
    let node = Ipv4Addr::LOCALHOST;
    let recovery = SystemTime::now();
    let (_, a) = c
        .run(1, 1, |_, seq| {
            sxa::encode(msg::ASSOCIATION_SETUP_REQUEST, None, seq, &sxa::association_setup_request(node, recovery))
        })
        .await?;
    anyhow::ensure!(sxa::cause_of(&a[0]) == 1, "PFCP association refused");

    let mut out = Vec::new();
    let mut cp_seid = 1u64;
    for &w in windows {
        let (hb, _) = c
            .run(sessions, w, |_, seq| {
                sxa::encode(msg::HEARTBEAT_REQUEST, None, seq, &sxa::heartbeat_request(recovery))
            })
            .await?;
        let base = cp_seid;
        let (est, answers) = c
            .run(sessions, w, |i, seq| {
                let spec = SessionSpec {
                    usage_period: None,
                    node_id: node,
                    cp_seid: base + i as u64,
                    apn: "internet".into(),
                    s1u_teid: 0x10_0000 + i as u32,
                    s1u_addr: node,
                    ue_ipv4: Some(Ipv4Addr::from(0x0a2d_0000 + i as u32)),
                    ue_ipv6: None,
                    apn_ambr: None,
                };
                sxa::encode(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), seq, &sxa::session_establishment(&spec))
            })
            .await?;
        cp_seid += sessions as u64;
        let up: Vec<u64> =
            answers.iter().map(|a| sxa::up_seid_of(a).context("no UP F-SEID in the answer")).collect::<Result<_>>()?;
        let accepted = answers.iter().filter(|a| sxa::cause_of(a) == 1).count();
        anyhow::ensure!(accepted == sessions, "{} of {sessions} establishments refused", sessions - accepted);
        let (del, answers) =
            c.run(sessions, w, |i, seq| sxa::encode(msg::SESSION_DELETION_REQUEST, Some(up[i]), seq, &[])).await?;
        anyhow::ensure!(answers.iter().all(|a| sxa::cause_of(a) == 1), "a deletion was refused");
        let rate = |d: Duration| sessions as f64 / d.as_secs_f64();
        out.push(PfcpCase {
            in_flight: w,
            sessions,
            establish_per_s: rate(est),
            delete_per_s: rate(del),
            baseline_heartbeat_per_s: rate(hb),
            establish_ratio_to_heartbeat: hb.as_secs_f64() / est.as_secs_f64(),
        });
    }
    let _ = stop.send(true);
    let _ = task.await;
    Ok(out)
}
