//! Line charts as SVG for `bench ... --plot DIR`: one series per mode,
//! logarithmic axes where the paper's figure has them. Plain SVG text, no
//! drawing library.

use std::fmt::Write;

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub log_x: bool,
    pub log_y: bool,
    pub series: Vec<Series>,
}

const W: f64 = 640.0;
const H: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 160.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLOURS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];

impl Chart<'_> {
    pub fn svg(&self) -> String {
        let pts = || self.series.iter().flat_map(|s| s.points.iter().copied());
        let tx = |v: f64| if self.log_x { v.max(1e-9).log10() } else { v };
        let ty = |v: f64| if self.log_y { v.max(1e-9).log10() } else { v };
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for (x, y) in pts() {
            (x0, x1, y0, y1) = (x0.min(tx(x)), x1.max(tx(x)), y0.min(ty(y)), y1.max(ty(y)));
        }
        if x0 > x1 {
            (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
        }
        if !self.log_y {
            y0 = y0.min(0.0);
        }
        if x1 - x0 < 1e-12 {
            x1 = x0 + 1.0;
        }
        if y1 - y0 < 1e-12 {
            y1 = y0 + 1.0;
        }
        let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
        let px = |v: f64| LEFT + (tx(v) - x0) / (x1 - x0) * pw;
        let py = |v: f64| TOP + ph - (ty(v) - y0) / (y1 - y0) * ph;
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = write!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        let _ =
            write!(s, r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#, W / 2.0, esc(self.title));
        let _ = write!(s, r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#);
        // Ticks: decades on log axes, five steps on linear ones.
        for (v, lx) in ticks(x0, x1, self.log_x) {
            let x = LEFT + (v - x0) / (x1 - x0) * pw;
            let _ = write!(
                s,
                r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="black"/><text x="{x}" y="{}" text-anchor="middle">{lx}</text>"#,
                TOP + ph,
                TOP + ph + 5.0,
                TOP + ph + 18.0
            );
        }
        for (v, ly) in ticks(y0, y1, self.log_y) {
            let y = TOP + ph - (v - y0) / (y1 - y0) * ph;
            let _ = write!(
                s,
                r#"<line x1="{}" y1="{y}" x2="{LEFT}" y2="{y}" stroke="black"/><text x="{}" y="{}" text-anchor="end">{ly}</text>"#,
                LEFT - 5.0,
                LEFT - 8.0,
                y + 4.0
            );
        }
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            H - 15.0,
            esc(self.x_label)
        );
        let _ = write!(
            s,
            r#"<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">{}</text>"#,
            TOP + ph / 2.0,
            TOP + ph / 2.0,
            esc(self.y_label)
        );
        for (i, series) in self.series.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            let path: Vec<String> = series.points.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
            let _ = write!(s, r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"/>"#, path.join(" "));
            for &(x, y) in &series.points {
                let _ = write!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#, px(x), py(y));
            }
            let ly = TOP + 10.0 + 18.0 * i as f64;
            let lx = W - RIGHT + 12.0;
            let _ = write!(
                s,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
                lx + 20.0,
                lx + 25.0,
                ly + 4.0,
                esc(&series.name)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

/// Tick positions (in transformed units) with their labels.
fn ticks(lo: f64, hi: f64, log: bool) -> Vec<(f64, String)> {
    if log {
        let (a, b) = (lo.floor() as i32, hi.ceil() as i32);
        return (a..=b)
            .map(f64::from)
            .filter(|d| *d >= lo - 1e-9 && *d <= hi + 1e-9)
            .map(|d| (d, num(10f64.powf(d))))
            .collect();
    }
    (0..=5).map(|i| lo + (hi - lo) * f64::from(i) / 5.0).map(|v| (v, num(v))).collect()
}

fn num(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.0}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 10.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_series_and_point() {
        let c = Chart {
            title: "t <1>",
            x_label: "x",
            y_label: "y",
            log_x: true,
            log_y: false,
            series: vec![
                Series { name: "a".into(), points: vec![(1.0, 2.0), (10.0, 4.0), (100.0, 8.0)] },
                Series { name: "b".into(), points: vec![(1.0, 1.0)] },
            ],
        };
        let svg = c.svg();
        assert_eq!(svg.matches("<circle").count(), 4);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("t &lt;1&gt;"));
        assert!(svg.contains(">100<"), "decade ticks on the log axis");
    }
}
