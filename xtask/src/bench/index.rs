//! index.html: the charts, the tables, and a link to every run's report (or run.json).

use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::tables::thousands;
use super::{Cell, Outcome, rel};

pub fn write(
    out: &Path,
    markdown: &str,
    charts: &[PathBuf],
    results: &[(Cell, Outcome)],
) -> Result<()> {
    let mut html = String::from(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>srvprof bench</title>\n<style>\
         body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child{text-align:left}\
         .failed{color:#b00}pre{white-space:pre-wrap;font-size:12px}</style></head><body>\n<h1>srvprof bench</h1>\n",
    );
    for chart in charts {
        let _ = writeln!(
            html,
            "<p><img src=\"{}\" alt=\"{}\"></p>",
            rel(out, chart),
            rel(out, chart)
        );
    }
    html.push_str("<h2>Runs</h2>\n<table><tr><th>cell</th><th>requests/s</th><th>p50 ms</th><th>p99 ms</th><th>report</th><th>data</th></tr>\n");
    for (cell, outcome) in results {
        let name = cell.name();
        match outcome {
            Outcome::Ran(m) => {
                let report = if m.has_report {
                    format!("<a href=\"{name}/report.html\">report.html</a>")
                } else {
                    "-".to_string()
                };
                let _ = writeln!(
                    html,
                    "<tr><td>{name}</td><td>{}</td><td>{:.2}</td><td>{:.1}</td><td>{report}</td>\
                     <td><a href=\"{name}/run.json\">run.json</a> <a href=\"{name}/timeline.csv\">timeline.csv</a></td></tr>",
                    thousands(m.rps),
                    m.p50_us / 1000.0,
                    m.p99_us / 1000.0
                );
            }
            Outcome::Failed(reason) => {
                let _ = writeln!(
                    html,
                    "<tr><td>{name}</td><td class=\"failed\" colspan=\"4\">failed: {}</td>\
                     <td><a href=\"logs/{name}.log\">log</a></td></tr>",
                    html_escape(reason)
                );
            }
        }
    }
    html.push_str("</table>\n<h2>Tables (BENCH.md)</h2>\n<pre>");
    html.push_str(&html_escape(markdown));
    html.push_str("</pre>\n</body></html>\n");
    let path = out.join("index.html");
    std::fs::write(&path, html).with_context(|| format!("writing {}", path.display()))
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
