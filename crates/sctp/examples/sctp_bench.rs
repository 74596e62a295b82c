//! Loopback SCTP throughput: `cargo run -p mobicore-sctp --example sctp_bench -- [raw|udp] ASSOCS MESSAGES SIZE`.

use mobicore_sctp::{bench, Transport};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let transport = match args.first().map(String::as_str) {
        Some("udp") => Transport::Udp { port: 0 },
        _ => Transport::RawIp,
    };
    let num = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let r = bench(transport, num(1, 10), num(2, 1_000_000), num(3, 100)).await;
    println!("{r:#?}");
}
