//! Folded stacks to flamegraph SVGs with inferno: static ones (no JavaScript) so several can sit
//! inline in one page, hovering a frame shows its name and value through the SVG <title>; and
//! standalone files with inferno's script, to zoom into a frame, search and reset.

use inferno::flamegraph::{self, Options, Palette, color::BasicPalette};

use srvprof_analysis::stacks::{FoldedLine, StackKind, to_text};

/// inferno's options for a graph of `kind`: its unit, its palette, the same output each time.
fn options(kind: StackKind, title: &str) -> Options<'static> {
    let mut opt = Options::default();
    opt.title = title.to_string();
    opt.count_name = kind.unit().to_string();
    opt.deterministic = true;
    opt.image_width = Some(1200);
    opt.colors = match kind {
        StackKind::OnCpu => Palette::Basic(BasicPalette::Hot),
        StackKind::OffCpu => Palette::Basic(BasicPalette::Blue),
    };
    opt
}

fn draw(mut opt: Options, lines: &[FoldedLine]) -> Option<String> {
    let text = to_text(lines.iter());
    if text.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    flamegraph::from_lines(&mut opt, text.lines(), &mut out).ok()?;
    String::from_utf8(out).ok()
}

/// A standalone SVG file with inferno's script: click a frame to zoom into it, "Reset Zoom",
/// "Search" (highlights the matches and shows their share); `subtitle` says what was sampled.
/// None when there is no stack to draw.
pub fn standalone(
    kind: StackKind,
    title: &str,
    subtitle: &str,
    lines: &[FoldedLine],
) -> Option<String> {
    let mut opt = options(kind, title);
    opt.subtitle = Some(subtitle.to_string());
    Some(marked(&draw(opt, lines)?))
}

/// Marked as srvprof's own file, which a later run may overwrite (output::check_writable).
fn marked(svg: &str) -> String {
    let at = svg.find("<svg").unwrap_or(0);
    format!(
        "{}<!-- {} flamegraph -->\n{}",
        &svg[..at],
        super::HTML_MARKER,
        &svg[at..]
    )
}

/// Frames narrower than this percentage of the total are left out of the graphs in report.html
/// (their samples still count in their parents' width), so a big run's page stays light; the
/// standalone SVGs keep inferno's default, 0.01 %.
pub const PAGE_MIN_WIDTH_PCT: f64 = 0.1;

/// A flamegraph for report.html: the standalone graph's document, fluid to the page's width, in
/// an iframe of its own (`srcdoc`: same origin as the page, nothing fetched), so each graph runs
/// inferno's script apart and zooms and searches in place. With how much of the value sits in
/// frames under PAGE_MIN_WIDTH_PCT (merged into their parents). None when there is no stack.
pub fn embedded(
    kind: StackKind,
    title: &str,
    subtitle: &str,
    lines: &[FoldedLine],
) -> Option<(String, u64)> {
    let mut opt = options(kind, title);
    opt.subtitle = Some(subtitle.to_string());
    opt.image_width = None;
    opt.min_width = PAGE_MIN_WIDTH_PCT;
    let svg = draw(opt, lines)?;
    Some((frame(title, &svg), merged_value(lines, PAGE_MIN_WIDTH_PCT)))
}

/// A differential flamegraph of `after` against `before` (inferno's, both normalised to the same
/// total): widths are `after`'s, red frames grew, blue ones shrank; `negate` swaps the colours,
/// for a graph drawn the other way round (widths of the earlier profile, where what vanished
/// still shows, red still meaning grew). With its folded text (`stack before after` per line,
/// the format inferno and FlameGraph draw differentials from).
pub fn differential(
    kind: StackKind,
    title: &str,
    subtitle: &str,
    before: &[FoldedLine],
    after: &[FoldedLine],
    negate: bool,
) -> Option<(String, String)> {
    let (before, after) = (to_text(before.iter()), to_text(after.iter()));
    if before.is_empty() || after.is_empty() {
        return None;
    }
    let mut diff = Vec::new();
    let opt = inferno::differential::Options {
        normalize: true,
        ..Default::default()
    };
    inferno::differential::from_readers(opt, before.as_bytes(), after.as_bytes(), &mut diff)
        .ok()?;
    let diff = String::from_utf8(diff).ok()?;
    let mut opt = options(kind, title);
    opt.subtitle = Some(subtitle.to_string());
    opt.image_width = None;
    opt.negate_differentials = negate;
    let mut out = Vec::new();
    flamegraph::from_lines(&mut opt, diff.lines(), &mut out).ok()?;
    Some((diff, marked(&String::from_utf8(out).ok()?)))
}

/// A standalone SVG (as `standalone` or `differential` give) in an iframe for report.html.
pub fn frame(title: &str, svg: &str) -> String {
    let height = svg_height(svg).unwrap_or(600);
    // inferno keeps the zoom and search in the URL (history.replaceState), which a srcdoc
    // document may not change: there it would throw and stop the search half way.
    let doc = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>html,body{{margin:0}}svg{{display:block;width:100%}}</style>\
         <script>(function(h){{var r=h.replaceState;h.replaceState=function(){{try{{r.apply(h,arguments)}}catch(e){{}}}}}})(history)</script>\
         </head><body>{}</body></html>",
        strip_prolog(svg)
    );
    let esc = doc.replace('&', "&amp;").replace('"', "&quot;");
    format!(
        "<iframe class=\"flamegraph\" title=\"{}\" style=\"width:100%;height:{height}px;border:0\" srcdoc=\"{esc}\"></iframe>",
        title
            .replace('&', "&amp;")
            .replace('"', "&quot;")
            .replace('<', "&lt;")
    )
}

/// The root <svg>'s height attribute, in pixels.
fn svg_height(svg: &str) -> Option<u32> {
    let root = &svg[svg.find("<svg")?..];
    let root = &root[..root.find('>')?];
    let at = root.find(" height=\"")? + " height=\"".len();
    root[at..].split('"').next()?.parse().ok()
}

/// How much of the lines' value sits in frames narrower than `min_pct` of the total: each
/// line's value counts if its leaf frame (the whole stack, as a path) is that narrow.
pub fn merged_value(lines: &[FoldedLine], min_pct: f64) -> u64 {
    use std::collections::HashMap;
    let total: u64 = lines.iter().map(|l| l.value).sum();
    let mut by_path: HashMap<&[String], u64> = HashMap::new();
    for l in lines {
        *by_path.entry(&l.frames).or_default() += l.value;
    }
    // A path's width is its own value plus every longer path under it.
    let mut width: HashMap<&[String], u64> = HashMap::new();
    for (path, v) in &by_path {
        for depth in 1..=path.len() {
            *width.entry(&path[..depth]).or_default() += v;
        }
    }
    let min = total as f64 * min_pct / 100.0;
    (by_path.iter())
        .filter(|(path, _)| (width[*path] as f64) < min)
        .map(|(_, v)| v)
        .sum()
}

/// Inline SVG in HTML takes no XML declaration or DOCTYPE.
pub fn strip_prolog(svg: &str) -> &str {
    svg.find("<svg").map(|i| &svg[i..]).unwrap_or(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standalone_graph_zooms_and_searches() {
        let lines = srvprof_analysis::stacks::parse(
            "spin;start_thread;spin_main;srvprof_busy_spin 90\nspin;start_thread;other 10\n",
            0,
        );
        let svg = standalone(
            StackKind::OnCpu,
            "server: on-CPU",
            "100 samples at 99 Hz",
            &lines,
        )
        .unwrap();
        for part in [
            "<script",
            "function zoom(",
            "function search(",
            "server: on-CPU",
            "100 samples at 99 Hz",
            "srvprof_busy_spin",
            "srvprof-report flamegraph",
        ] {
            assert!(svg.contains(part), "{part}");
        }
        assert!(standalone(StackKind::OnCpu, "t", "s", &[]).is_none());
    }

    #[test]
    fn an_embedded_graph_keeps_its_script_in_a_frame_of_its_own() {
        let lines = srvprof_analysis::stacks::parse(
            "spin;start_thread;spin_main;srvprof_busy_spin 9990\nspin;start_thread;tiny 5\nspin;start_thread;tiny2 5\n",
            0,
        );
        let (iframe, merged) = embedded(StackKind::OnCpu, "on-CPU", "sub", &lines).unwrap();
        assert!(iframe.starts_with("<iframe class=\"flamegraph\""));
        assert!(
            iframe.contains("srcdoc=\"&lt;!DOCTYPE html&gt;")
                || iframe.contains("srcdoc=\"<!DOCTYPE html>")
        );
        assert!(iframe.contains("function zoom(") && iframe.contains("srvprof_busy_spin"));
        // No raw quote may end the attribute early.
        let srcdoc = &iframe[iframe.find("srcdoc=\"").unwrap() + 8..];
        assert_eq!(srcdoc.find('"'), Some(srcdoc.len() - "\"></iframe>".len()));
        // 5 of 10,000 is 0.05 %, under 0.1 %: both tiny frames are merged, and left out.
        assert_eq!(merged, 10);
        assert!(!iframe.contains("tiny2"));
        assert!(svg_height(&standalone(StackKind::OnCpu, "t", "s", &lines).unwrap()).unwrap() > 50);
    }

    #[test]
    fn a_differential_graph_is_normalised_and_shows_what_grew() {
        let before = srvprof_analysis::stacks::parse("w;main;fast 900\nw;main;slow_path 100\n", 0);
        let after = srvprof_analysis::stacks::parse("w;main;fast 40\nw;main;slow_path 60\n", 0);
        let (diff, svg) = differential(
            StackKind::OnCpu,
            "slow vs rest",
            "sub",
            &before,
            &after,
            false,
        )
        .unwrap();
        // Before scaled to after's total of 100: fast 90, slow_path 10.
        assert!(diff.contains("w;main;slow_path 10 60"), "{diff}");
        assert!(diff.contains("w;main;fast 90 40"), "{diff}");
        assert!(svg.contains("srvprof-report flamegraph") && svg.contains("function search("));
        assert!(differential(StackKind::OnCpu, "t", "s", &[], &after, false).is_none());
    }
}
