//! The matrix: one row per kind, as in `docs/reliability.md`, and the failures behind it.

use std::fmt::Write as _;
use std::time::Duration;

use super::run::KindReport;

fn ms(d: Duration) -> String {
    if d < Duration::from_secs(10) {
        format!("{:.0} ms", d.as_secs_f64() * 1000.0)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

fn opt_ms(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.1} ms", d.as_secs_f64() * 1000.0))
        .unwrap_or_else(|| "–".to_string())
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

/// The matrix: one row per kind. Markdown for `docs/reliability.md`, or aligned text.
pub fn matrix(reports: &[KindReport], markdown: bool) -> String {
    let head = [
        "kind",
        "n (tcp+unix)",
        "outcomes",
        "max time to outcome",
        "due within",
        "ng-true during / after",
        "fds before→after",
        "RSS MiB before→after (peak)",
        "settled in",
        "verdict",
    ];
    let rows: Vec<[String; 10]> = reports
        .iter()
        .map(|r| {
            [
                r.kind.name().to_string(),
                format!("{} ({}+{})", r.count, r.via.0, r.via.1),
                r.outcome_summary(),
                ms(r.max_latency),
                ms(r.bound),
                format!("{} / {}", opt_ms(r.probe_during), opt_ms(r.probe_after)),
                format!("{}→{}", r.fds.0, r.fds.1),
                format!(
                    "{}→{} ({})",
                    mib(r.rss_kib.0),
                    mib(r.rss_kib.1),
                    mib(r.rss_kib.2)
                ),
                ms(r.settled_in),
                if r.passed() {
                    "ok".to_string()
                } else {
                    format!("FAIL ({})", r.failures.len())
                },
            ]
        })
        .collect();
    let mut out = String::new();
    if markdown {
        let _ = writeln!(out, "| {} |", head.join(" | "));
        let _ = writeln!(
            out,
            "|{}",
            head.iter()
                .enumerate()
                .map(|(i, _)| if (1..3).contains(&i) || i == 0 {
                    "---|"
                } else {
                    "---:|"
                })
                .collect::<String>()
        );
        for row in &rows {
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(i, c)| if i == 0 { format!("`{c}`") } else { c.clone() })
                .collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
    } else {
        let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
        for row in &rows {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cells: Vec<&str>| -> String {
            cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        };
        let _ = writeln!(out, "{}", line(head.to_vec()));
        for row in &rows {
            let _ = writeln!(out, "{}", line(row.iter().map(String::as_str).collect()));
        }
    }
    out
}

/// Every failure of every report, for after the matrix.
pub fn failure_details(reports: &[KindReport]) -> String {
    let mut out = String::new();
    for r in reports.iter().filter(|r| !r.passed()) {
        let _ = writeln!(out, "{} ({}):", r.kind, r.kind.what());
        for f in r.failures.iter().take(12) {
            let _ = writeln!(out, "  - {f}");
        }
        if r.failures.len() > 12 {
            let _ = writeln!(out, "  ... and {} more", r.failures.len() - 12);
        }
    }
    out
}
