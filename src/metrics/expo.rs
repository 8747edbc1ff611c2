// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The Prometheus text exposition format, version 0.0.4 (the classic one every Prometheus
//! server and `promtool check metrics` read): families of samples, each written once, with
//! its `# HELP` and `# TYPE` lines before its samples.
//!
//! Written here rather than with a client library: natrix's values are mirrors of counts
//! kept elsewhere (the kernel's per-CPU counters, the sweep's counts), which a library's
//! counters cannot be set to, and the format is small (docs/design/metrics.md).

use std::fmt::Write as _;

/// A family's type (`# TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A sample's value: counts are written exactly (an f64 is exact only up to 2^53).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

#[derive(Debug)]
struct Sample {
    /// appended to the family's name: "" or a histogram's "_bucket", "_sum", "_count"
    suffix: &'static str,
    labels: Vec<(&'static str, String)>,
    value: Value,
}

#[derive(Debug)]
pub struct Family {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    samples: Vec<Sample>,
}

impl Family {
    /// Adds a sample with these labels.
    pub fn add(&mut self, labels: &[(&'static str, &str)], value: impl Into<Value>) -> &mut Self {
        self.push("", labels, value.into());
        self
    }

    /// A histogram's samples: `buckets` are (upper bound, observations at most that),
    /// cumulative and ascending; the `+Inf` bucket is `count`.
    pub fn histogram(&mut self, buckets: &[(f64, u64)], sum: f64, count: u64) -> &mut Self {
        debug_assert_eq!(self.kind, Kind::Histogram);
        for (le, n) in buckets {
            let le = float(*le);
            self.push("_bucket", &[("le", &le)], Value::Int(*n));
        }
        self.push("_bucket", &[("le", "+Inf")], Value::Int(count));
        self.push("_sum", &[], Value::Float(sum));
        self.push("_count", &[], Value::Int(count));
        self
    }

    fn push(&mut self, suffix: &'static str, labels: &[(&'static str, &str)], value: Value) {
        debug_assert!(labels.iter().all(|(k, _)| valid_name(k, false)), "{labels:?}");
        let labels = labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        self.samples.push(Sample { suffix, labels, value });
    }
}

/// Families in the order first named; each written once, all its samples together.
#[derive(Debug, Default)]
pub struct Exposition {
    families: Vec<Family>,
}

impl Exposition {
    /// The family `name`: made (with its help and type) when first named, the same one
    /// every later time.
    pub fn family(&mut self, name: &'static str, kind: Kind, help: &'static str) -> &mut Family {
        debug_assert!(valid_name(name, true), "{name}");
        let i = match self.families.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.families.push(Family { name, help, kind, samples: Vec::new() });
                self.families.len() - 1
            }
        };
        let f = &mut self.families[i];
        debug_assert!(f.kind == kind && f.help == help, "{name}: named twice, differently");
        f
    }

    /// Every family's name, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.families.iter().map(|f| f.name).collect()
    }

    /// The text (`text/plain; version=0.0.4`). A family without samples is left out.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(256 * self.families.len());
        for f in self.families.iter().filter(|f| !f.samples.is_empty()) {
            let _ = writeln!(out, "# HELP {} {}", f.name, escape(f.help, false));
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.name());
            for s in &f.samples {
                out += f.name;
                out += s.suffix;
                if !s.labels.is_empty() {
                    out.push('{');
                    for (i, (k, v)) in s.labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        let _ = write!(out, "{k}=\"{}\"", escape(v, true));
                    }
                    out.push('}');
                }
                out.push(' ');
                match s.value {
                    Value::Int(v) => {
                        let _ = write!(out, "{v}");
                    }
                    Value::Float(v) => out += &float(v),
                }
                out.push('\n');
            }
        }
        out
    }
}

/// A float as the format writes one (Go's ParseFloat syntax; `+Inf`, `-Inf`, `NaN`).
pub fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        // Rust's shortest round-trip form: "0.25", "1e-7", "10"
        format!("{v:?}").trim_end_matches(".0").to_owned()
    }
}

/// Escapes help text (backslash, newline) or a label value (also the double quote).
fn escape(s: &str, label: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out += "\\\\",
            '\n' => out += "\\n",
            '"' if label => out += "\\\"",
            c => out.push(c),
        }
    }
    out
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*` for metric names; label names have no colon.
fn valid_name(s: &str, metric: bool) -> bool {
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic() || c == '_' || (metric && c == ':') || (!first && c.is_ascii_digit())
    };
    let mut it = s.chars();
    it.next().is_some_and(|c| ok(c, true)) && it.all(|c| ok(c, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_written_once_with_their_samples_together() {
        let mut e = Exposition::default();
        e.family("x_total", Kind::Counter, "Xs.").add(&[("a", "1")], 3u64);
        e.family("y", Kind::Gauge, "Y.").add(&[], 0.5);
        e.family("x_total", Kind::Counter, "Xs.").add(&[("a", "2")], 4u64);
        e.family("empty", Kind::Gauge, "Never shown.");
        assert_eq!(
            e.render(),
            "# HELP x_total Xs.\n# TYPE x_total counter\nx_total{a=\"1\"} 3\nx_total{a=\"2\"} 4\n\
             # HELP y Y.\n# TYPE y gauge\ny 0.5\n"
        );
        assert_eq!(e.names(), ["x_total", "y", "empty"]);
    }

    #[test]
    fn escaping_and_numbers() {
        let mut e = Exposition::default();
        e.family("z", Kind::Gauge, "a \\ b\nc \"q\"").add(&[("l", "x\"y\\z\nw")], f64::INFINITY);
        let t = e.render();
        assert!(t.contains("# HELP z a \\\\ b\\nc \"q\"\n"), "{t}");
        assert!(t.contains("z{l=\"x\\\"y\\\\z\\nw\"} +Inf\n"), "{t}");
        assert_eq!(float(10.0), "10");
        assert_eq!(float(0.0025), "0.0025");
        assert_eq!(float(1e-7), "1e-7");
        assert_eq!(float(f64::NAN), "NaN");
        assert_eq!(float(u64::MAX as f64), "1.8446744073709552e19");
        e.family("c_total", Kind::Counter, "C.").add(&[], u64::MAX);
        assert!(e.render().ends_with("c_total 18446744073709551615\n"));
    }

    #[test]
    fn histogram_lines() {
        let mut e = Exposition::default();
        e.family("d_seconds", Kind::Histogram, "D.").histogram(&[(0.5, 1), (1.0, 2)], 1.25, 3);
        assert_eq!(
            e.render(),
            "# HELP d_seconds D.\n# TYPE d_seconds histogram\nd_seconds_bucket{le=\"0.5\"} 1\n\
             d_seconds_bucket{le=\"1\"} 2\nd_seconds_bucket{le=\"+Inf\"} 3\nd_seconds_sum 1.25\n\
             d_seconds_count 3\n"
        );
    }

    #[test]
    fn names() {
        assert!(valid_name("natrix_drops_total", true) && valid_name("a:b", true));
        assert!(!valid_name("a:b", false) && !valid_name("1a", true) && !valid_name("", true));
        assert!(!valid_name("a-b", false));
    }
}
