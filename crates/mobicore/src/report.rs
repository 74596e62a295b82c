//! Bench and demo summaries: latency percentiles, a human table, and JSON.

use serde::Serialize;

/// Percentile of a sorted slice (nearest rank); 0 for an empty slice.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Latency summary in milliseconds of samples given in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub fn from_us(samples: &[u64]) -> Latency {
        let mut s = samples.to_vec();
        s.sort_unstable();
        let ms = |v: u64| v as f64 / 1000.0;
        Latency {
            p50_ms: ms(percentile(&s, 50.0)),
            p90_ms: ms(percentile(&s, 90.0)),
            p99_ms: ms(percentile(&s, 99.0)),
            max_ms: ms(s.last().copied().unwrap_or(0)),
        }
    }
}

/// Renders rows as an aligned text table with a header line.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        cells.iter().enumerate().map(|(i, c)| format!("{:<width$}", c, width = w[i])).collect::<Vec<_>>().join("  ")
    };
    let mut out = line(header.to_vec()) + "\n";
    out += &w.iter().map(|n| "-".repeat(*n)).collect::<Vec<_>>().join("  ");
    out.push('\n');
    for r in rows {
        out += &line(r.iter().map(String::as_str).collect());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&s, 50.0), 50);
        assert_eq!(percentile(&s, 99.0), 99);
        assert_eq!(percentile(&s, 100.0), 100);
        assert_eq!(percentile(&[], 50.0), 0);
        assert_eq!(percentile(&[7], 1.0), 7);
    }

    #[test]
    fn latency_in_ms() {
        let l = Latency::from_us(&[3000, 1000, 2000]);
        assert_eq!(l.p50_ms, 2.0);
        assert_eq!(l.max_ms, 3.0);
    }

    #[test]
    fn table_aligns() {
        let t = table(&["a", "bbb"], &[vec!["10".into(), "x".into()]]);
        assert_eq!(t, "a   bbb\n--  ---\n10  x  \n");
    }
}
