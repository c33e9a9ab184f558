//! The report as one self-contained HTML page: the SVG picture inline, the breakdown table, the
//! what-if table and the warnings. No scripts, no external stylesheets or fonts.

use super::svg::{esc, hex, render_svg, segments};
use super::terminal::job_summary;
use crate::units::{bytes, gib, gib_signed, thousands};
use vramscope_core::fit::WhatIf;
use vramscope_core::report::Report;

/// The breakdown table alone (also used by the web UI's page through the same markup).
pub fn breakdown_table(r: &Report) -> String {
    let p = &r.per_gpu;
    let base = p.peaks.device_total.filter(|d| *d > 0);
    let mut t = String::from(
        "<table class=\"breakdown\">\n<thead><tr><th></th><th>at the peak</th><th>size</th>\
         <th>% device</th></tr></thead>\n<tbody>\n",
    );
    for (c, b) in segments(r) {
        let share = base.map_or_else(
            || "-".into(),
            |d| format!("{:.1}%", b as f64 * 100.0 / d as f64),
        );
        t.push_str(&format!(
            "<tr data-category=\"{}\"><td><span class=\"sw\" style=\"background:{}\"></span></td>\
             <td>{}</td><td class=\"n\" title=\"{} bytes\">{}</td><td class=\"n\">{share}</td></tr>\n",
            c.name(),
            hex(c),
            esc(super::label_in(r, c)),
            thousands(b),
            bytes(b)
        ));
    }
    t.push_str("</tbody>\n<tfoot>\n");
    let mut total = |label: &str, v: Option<u64>| {
        t.push_str(&format!(
            "<tr><td></td><th>{label}</th><td class=\"n\">{}</td><td></td></tr>\n",
            v.map_or_else(|| "n/a".into(), bytes)
        ));
    };
    total("peak allocated", p.peaks.peak_allocated);
    total("peak reserved", p.peaks.peak_reserved);
    total("device total", p.peaks.device_total);
    if let Some(kv) = p.kv_pool {
        total("KV pool (engine)", Some(kv));
    }
    t.push_str("</tfoot>\n</table>\n");
    t
}

/// The page: title, picture, tables.
pub fn render_html(r: &Report, rows: &[WhatIf]) -> String {
    let mut page = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{title}</title>\n<style>\n\
         body{{font-family:\"DejaVu Sans\",Verdana,Arial,sans-serif;margin:24px;color:#222}}\n\
         table{{border-collapse:collapse;margin:12px 0}}\n\
         td,th{{padding:3px 10px;text-align:left}}\n\
         td.n{{text-align:right;font-variant-numeric:tabular-nums}}\n\
         tbody tr:nth-child(odd){{background:#f6f6f6}}\n\
         .sw{{display:inline-block;width:12px;height:12px;border:1px solid #999}}\n\
         .warn{{color:#8a6d00}}\n svg{{max-width:100%;height:auto}}\n\
         </style>\n</head>\n<body>\n<h1>{title}</h1>\n<p>{job}</p>\n",
        title = esc(&format!("GPU memory of {}", r.model.name)),
        job = esc(&job_summary(&r.job))
    );
    page.push_str(&render_svg(r, rows));
    page.push_str("<h2>Breakdown</h2>\n");
    page.push_str(&breakdown_table(r));
    if !rows.is_empty() {
        page.push_str(
            "<h2>What if</h2>\n<table class=\"what-if\">\n<thead><tr><th>technique</th>\
             <th>change</th><th>device GiB</th><th>saved GiB</th><th>fits</th></tr></thead>\n<tbody>\n",
        );
        for w in rows {
            page.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
                esc(&w.technique),
                esc(&w.change),
                w.device_total.map_or_else(|| "n/a".into(), gib),
                // vLLM / SGLang: the pool is preallocated, so the gain is KV tokens.
                match w.kv_tokens_gained {
                    Some(g) => format!("{g:+} KV tokens"),
                    None => w.saved.map_or_else(|| "n/a".into(), gib_signed),
                },
                match w.fits {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "-",
                }
            ));
        }
        page.push_str("</tbody>\n</table>\n");
    }
    if !r.warnings.is_empty() {
        page.push_str("<h2>Warnings</h2>\n<ul>\n");
        for w in &r.warnings {
            page.push_str(&format!("<li class=\"warn\">{}</li>\n", esc(w)));
        }
        page.push_str("</ul>\n");
    }
    page.push_str("<p><small>Made by vramscope.</small></p>\n</body>\n</html>\n");
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_contained_page_with_picture_and_table() {
        let job: vramscope_core::job::Job =
            serde_json::from_str(r#"{"model": "gpt2", "batch": 2, "gpu": "t4-16gb"}"#).unwrap();
        let r = crate::app::job::estimate_job(&crate::app::Session::default(), &job).unwrap();
        let page = render_html(&r, &[]);
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert_eq!(page.matches("<svg").count(), 1);
        // Nothing to fetch: no scripts, links, sources or imports.
        for needle in ["<script", "<link", "src=", "href=", "@import", "url("] {
            assert!(!page.contains(needle), "{needle}");
        }
        // One table row per non-zero category at the peak.
        let nonzero = crate::render::SHOWN
            .iter()
            .filter(|c| r.per_gpu.components.get(**c) > 0)
            .count();
        assert!(nonzero >= 3);
        assert_eq!(page.matches("<tr data-category=").count(), nonzero);
        assert!(page.contains("peak allocated"));
    }
}
