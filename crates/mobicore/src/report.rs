//! Human tables for summaries (latency figures come from `mobicore_ran::report`).

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
    fn table_aligns() {
        let t = table(&["a", "bbb"], &[vec!["10".into(), "x".into()]]);
        assert_eq!(t, "a   bbb\n--  ---\n10  x  \n");
    }
}
