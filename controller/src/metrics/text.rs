//! The Prometheus text exposition format (version 0.0.4), which `/metrics` serves.
//!
//! prometheus-client writes OpenMetrics text: a counter family `x` whose samples are
//! `x_total`, the type `unknown`, `# EOF`. Prometheus reads either, but a 0.0.4
//! reader (`promtool check metrics`, most scrapers) then sees a counter `x` without
//! samples and samples `x_total` without help or type. [`from_openmetrics`] rewrites
//! the registry's output; [`header`] and [`sample`] write the metrics Ferrule
//! encodes itself (those whose values are read at scrape time).

use std::fmt::Write;

/// A metric family's type, as 0.0.4 names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (its name ends in `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// No type: for ingress-nginx's counters whose names lack `_total`
    /// (`nginx_ingress_controller_success`): their names are kept, and a counter
    /// without the suffix would fail promtool's lint.
    Untyped,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Untyped => "untyped",
        }
    }
}

/// Writes the `# HELP` and `# TYPE` lines of a family.
pub fn header(out: &mut String, name: &str, kind: Kind, help: &str) {
    let help = help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {}", kind.as_str());
}

/// Writes one sample: `name{labels} value`. Label values are escaped.
pub fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(k);
            out.push_str("=\"");
            escape_label_value(v, out);
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(&value_text(value));
    out.push('\n');
}

/// A sample value: integers without a fraction, `NaN`, `+Inf`, `-Inf`.
fn value_text(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// prometheus-client's OpenMetrics text as 0.0.4: a counter's `# HELP` and `# TYPE`
/// name its samples (`x_total`), `unknown` becomes `untyped`, and `# UNIT` and
/// `# EOF` go.
pub fn from_openmetrics(om: &str) -> String {
    let mut out = String::with_capacity(om.len() + 256);
    let mut help: Option<(&str, &str)> = None;
    let flush = |out: &mut String, help: &mut Option<(&str, &str)>| {
        if let Some((name, text)) = help.take() {
            let _ = writeln!(out, "# HELP {name} {text}");
        }
    };
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush(&mut out, &mut help);
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" | "stateset" => (name.to_owned(), "untyped"),
                "gaugehistogram" => (name.to_owned(), "histogram"),
                k => (name.to_owned(), k),
            };
            if let Some((_, text)) = help.take() {
                let _ = writeln!(out, "# HELP {name} {text}");
            }
            let _ = writeln!(out, "# TYPE {name} {kind}");
            continue;
        }
        flush(&mut out, &mut help);
        out.push_str(line);
        out.push('\n');
    }
    flush(&mut out, &mut help);
    out
}

/// Writes `v` as a label value of the text format (`\\`, `\"` and `\n` escaped).
pub fn escape_label_value(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_counters_become_0_0_4_counters() {
        let om = "# HELP ferrule_reloads NGINX reloads by result.\n\
                  # TYPE ferrule_reloads counter\n\
                  ferrule_reloads_total{result=\"success\"} 2\n\
                  # HELP g A gauge.\n# TYPE g gauge\n# UNIT g bytes\ng 1\n\
                  # HELP u Untyped.\n# TYPE u unknown\nu 3\n# EOF\n";
        assert_eq!(
            from_openmetrics(om),
            "# HELP ferrule_reloads_total NGINX reloads by result.\n\
             # TYPE ferrule_reloads_total counter\n\
             ferrule_reloads_total{result=\"success\"} 2\n\
             # HELP g A gauge.\n# TYPE g gauge\ng 1\n\
             # HELP u Untyped.\n# TYPE u untyped\nu 3\n"
        );
    }

    #[test]
    fn samples_escape_label_values_and_format_values() {
        let mut out = String::new();
        header(&mut out, "x", Kind::Gauge, "two\nlines \\ here");
        sample(&mut out, "x", &[("a", "q\"b\\s\nn"), ("b", "")], 3.0);
        sample(&mut out, "x", &[], 0.25);
        sample(&mut out, "x", &[], f64::NAN);
        sample(&mut out, "x", &[], f64::INFINITY);
        sample(&mut out, "x", &[], 1_700_000_000.0);
        assert_eq!(
            out,
            "# HELP x two\\nlines \\\\ here\n# TYPE x gauge\n\
             x{a=\"q\\\"b\\\\s\\nn\",b=\"\"} 3\nx 0.25\nx NaN\nx +Inf\nx 1700000000\n"
        );
    }
}
