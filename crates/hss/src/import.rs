//! CSV import of subscribers.
//!
//! Format: a header line, then one line per subscriber and APN:
//!
//! ```text
//! imsi,k,opc,amf,sqn,msisdn,apn,qci,arp,ambr_ul,ambr_dl
//! 001010000000001,465b5ce8b199b49faa5f0a2ee238a6bc,cd63cb71954a9f4e48a5994e37a02baf,8000,0,46700000001,internet,9,9,100000000,100000000
//! ```
//!
//! - `imsi`: 6 to 15 digits; `k`, `opc`: 32 hex digits; `amf`: 4 hex digits
//!   (empty: 8000); `sqn`: decimal (empty: 0); `msisdn`: digits or empty.
//! - `apn`, `qci` (empty: 9), `arp` (priority level 1..15, empty: 9;
//!   pre-emption capability off, vulnerability on), `ambr_ul`, `ambr_dl`
//!   in bit/s (empty: 100000000). The UE-AMBR is that of the first line.
//! - Several lines with the same IMSI add APNs to that subscriber, in order
//!   (the first APN is the default context). Blank lines and lines starting
//!   with `#` are skipped.
//! - Optional columns after `ambr_dl` (all three or none in the header,
//!   each may be empty): `pdn_type` (`ipv4`, `ipv6` or `ipv4v6`; empty:
//!   ipv4), `pdn_gw` (the APN's PDN GW address, sent in MIP6-Agent-Info,
//!   TS 29.272 7.3.45), `static_ipv4` (the UE's static address,
//!   Served-Party-IP-Address, 7.3.44).

use crate::store::StoreError;
use crate::subscriber::{parse_amf, parse_key, ApnProfile, Subscriber, DEFAULT_AMF};
use mobicore_common::{Ambr, PdnType};

const HEADER: [&str; 11] = ["imsi", "k", "opc", "amf", "sqn", "msisdn", "apn", "qci", "arp", "ambr_ul", "ambr_dl"];
/// The optional columns that may follow [`HEADER`].
const OPTIONAL: [&str; 3] = ["pdn_type", "pdn_gw", "static_ipv4"];

fn pdn_type(s: &str, line: usize) -> Result<PdnType, StoreError> {
    match s.to_ascii_lowercase().as_str() {
        "" | "ipv4" => Ok(PdnType::Ipv4),
        "ipv6" => Ok(PdnType::Ipv6),
        "ipv4v6" => Ok(PdnType::Ipv4v6),
        _ => Err(StoreError::Csv { line, message: format!("bad pdn_type {s:?} (ipv4, ipv6 or ipv4v6)") }),
    }
}

fn addr<T: std::str::FromStr>(s: &str, what: &str, line: usize) -> Result<Option<T>, StoreError> {
    (!s.is_empty())
        .then(|| s.parse().map_err(|_| StoreError::Csv { line, message: format!("bad {what} {s:?}") }))
        .transpose()
}

fn num<T: std::str::FromStr>(s: &str, default: T, what: &str, line: usize) -> Result<T, StoreError> {
    if s.is_empty() {
        return Ok(default);
    }
    s.parse().map_err(|_| StoreError::Csv { line, message: format!("bad {what} {s:?}") })
}

/// Parses the CSV text into subscribers (in file order).
pub fn parse_csv(text: &str) -> Result<Vec<Subscriber>, StoreError> {
    let mut out: Vec<Subscriber> = Vec::new();
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let Some((_, header)) = lines.next() else { return Ok(out) };
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let full: Vec<&str> = HEADER.iter().chain(OPTIONAL.iter()).copied().collect();
    if cols != HEADER && cols != full {
        let message = format!("header must be {} (optionally followed by ,{})", HEADER.join(","), OPTIONAL.join(","));
        return Err(StoreError::Csv { line: 1, message });
    }
    let width = cols.len();
    for (i, l) in lines {
        let line = i + 1;
        let f: Vec<&str> = l.split(',').map(str::trim).collect();
        if f.len() != width {
            return Err(StoreError::Csv { line, message: format!("expected {width} fields, got {}", f.len()) });
        }
        let err = |message: String| StoreError::Csv { line, message };
        let imsi = f[0].parse().map_err(|e: mobicore_common::IdError| err(e.to_string()))?;
        let k = parse_key(f[1]).map_err(err)?;
        let opc = parse_key(f[2]).map_err(err)?;
        let amf = if f[3].is_empty() { DEFAULT_AMF } else { parse_amf(f[3]).map_err(err)? };
        let sqn = num(f[4], 0u64, "sqn", line)?;
        let msisdn = (!f[5].is_empty()).then(|| f[5].to_string());
        if msisdn.as_ref().is_some_and(|m| !m.bytes().all(|b| b.is_ascii_digit())) {
            return Err(StoreError::Csv { line, message: format!("bad msisdn {:?}", f[5]) });
        }
        let ambr = Ambr {
            uplink: num(f[9], 100_000_000, "ambr_ul", line)?,
            downlink: num(f[10], 100_000_000, "ambr_dl", line)?,
        };
        let apn = (!f[6].is_empty()).then(|| -> Result<ApnProfile, StoreError> {
            let mut a = ApnProfile::new(f[6]);
            a.qci = num(f[7], 9, "qci", line)?;
            a.arp_priority = num(f[8], 9, "arp", line)?;
            if !(1..=15).contains(&a.arp_priority) {
                return Err(StoreError::Csv { line, message: "arp must be 1..15".into() });
            }
            a.ambr = ambr;
            if width == HEADER.len() + OPTIONAL.len() {
                a.pdn_type = pdn_type(f[11], line)?;
                a.pdn_gw = addr(f[12], "pdn_gw", line)?;
                a.static_ipv4 = addr(f[13], "static_ipv4", line)?;
            }
            Ok(a)
        });
        let apn = apn.transpose()?;
        if let Some(s) = out.iter_mut().find(|s| s.imsi == imsi) {
            s.apns.extend(apn);
            continue;
        }
        let mut s = Subscriber::new(imsi, k, opc);
        s.amf = amf;
        s.sqn = sqn;
        s.msisdn = msisdn;
        s.ue_ambr = ambr;
        s.apns = apn.into_iter().collect();
        out.push(s);
    }
    Ok(out)
}
