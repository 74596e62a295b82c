//! The command lines of the elastic MME's processes on loopback, as the
//! system tests and `bench mme` start them: every port chosen by the
//! kernel and read back from the front end's ready line.

/// `mme-frontend` on ephemeral loopback ports (S1-MME as SCTP over UDP,
/// S11) towards the S/P-GW-C at `sgw`, placing new UEs by `scheme`, its
/// hosts connecting at `hosts` (`127.0.0.1:0`, or `unix:/path`).
pub fn frontend_args<'a>(sgw: &'a str, scheme: &'a str, hosts: &'a str) -> Vec<&'a str> {
    vec![
        "mme-frontend",
        "--threads",
        "1",
        "--s1ap",
        "127.0.0.1:0",
        "--sctp",
        "udp",
        "--udp-port",
        "0",
        "--hosts",
        hosts,
        "--s11",
        "127.0.0.1:0",
        "--sgw",
        sgw,
        "--scheme",
        scheme,
    ]
}

/// A host's config file: its S6a peer, the S/P-GW-C, and an ephemeral S11
/// socket of its own.
pub fn host_config(hss: std::net::SocketAddr, sgw: std::net::SocketAddr) -> String {
    format!("[mme]\nhss = \"{hss}\"\nsgw = \"{sgw}\"\ns11_local = \"127.0.0.1:0\"\n")
}
