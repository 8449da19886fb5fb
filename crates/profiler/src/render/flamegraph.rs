//! Folded stacks to flamegraph SVGs with inferno: static ones (no JavaScript) so several can sit
//! inline in one page, hovering a frame shows its name and value through the SVG <title>; and
//! standalone files with inferno's script, to zoom into a frame, search and reset.

use inferno::flamegraph::{self, Options, Palette, color::BasicPalette};

use super::folded::{FoldedLine, StackKind, to_text};

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
    let svg = draw(opt, lines)?;
    // Marked as srvprof's own file, which a later run may overwrite (output::check_writable).
    let at = svg.find("<svg").unwrap_or(0);
    Some(format!(
        "{}<!-- {} flamegraph -->\n{}",
        &svg[..at],
        super::HTML_MARKER,
        &svg[at..]
    ))
}

/// An inline SVG, or None when there is no stack to draw.
pub fn svg(kind: StackKind, title: &str, lines: &[FoldedLine]) -> Option<String> {
    let mut opt = options(kind, title);
    opt.no_javascript = true;
    let svg = draw(opt, lines)?;
    Some(unique_ids(
        &without_scripts(strip_prolog(&svg)).replacen(" onload=\"init(evt)\"", "", 1),
        title,
    ))
}

/// Several flamegraphs share one HTML document: suffix every id (and the background gradient
/// reference) so each graph keeps its own.
fn unique_ids(svg: &str, title: &str) -> String {
    let slug: String = title
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    svg.replace("id=\"", &format!("id=\"{slug}-"))
        .replace("url(#", &format!("url(#{slug}-"))
}

/// Even with no_javascript inferno declares a few script variables; several flamegraphs in one
/// page would redeclare them, so the page carries none.
fn without_scripts(svg: &str) -> String {
    let mut out = String::with_capacity(svg.len());
    let mut rest = svg;
    while let Some(start) = rest.find("<script") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</script>") {
            Some(end) => rest = &rest[start + end + "</script>".len()..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
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
        let lines = super::super::folded::parse(
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
    fn draws_every_frame_of_a_small_profile() {
        let lines = super::super::folded::parse(
            "spin;start_thread;spin_main;srvprof_busy_spin 90\nspin;start_thread;other 10\n",
            0,
        );
        let svg = svg(StackKind::OnCpu, "on-CPU", &lines).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("srvprof_busy_spin"));
        assert!(!svg.contains("<script") && !svg.contains("onload"));
        assert!(
            svg.contains("id=\"on-CPU-background\"") && svg.contains("url(#on-CPU-background)")
        );
        assert!(svg.trim_end().ends_with("</svg>"));
    }
}
