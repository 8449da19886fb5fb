//! Text in the plots: fonts, a bound on a string's width (plotters cannot measure one), and
//! fonts pinned against the page's stylesheet.

use plotters::prelude::*;

use super::PLOTTERS_FONT_SCALE;
use super::numbers::trim;

pub(super) fn font(px: f64) -> FontDesc<'static> {
    FontDesc::new(
        FontFamily::SansSerif,
        px * PLOTTERS_FONT_SCALE,
        FontStyle::Normal,
    )
}

pub(super) fn bold(px: f64) -> FontDesc<'static> {
    FontDesc::new(
        FontFamily::SansSerif,
        px * PLOTTERS_FONT_SCALE,
        FontStyle::Bold,
    )
}

/// An upper bound of `text`'s width in px at `px` (DejaVu Sans, the widest common sans-serif;
/// bold adds 10 %).
pub(super) fn text_width(text: &str, px: f64) -> f64 {
    let em: f64 = text
        .chars()
        .map(|c| match c {
            'i' | 'j' | 'l' | 'I' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' => 0.32,
            ' ' | 'f' | 't' | 'r' | '(' | ')' | '[' | ']' | '/' | '-' => 0.45,
            'm' | 'w' | 'M' | 'W' | '%' | '@' | '—' | '…' => 1.0,
            'A'..='Z' | '_' | '–' => 0.8,
            _ => 0.66,
        })
        .sum();
    em * px
}

/// `text`, cut with an ellipsis if it could be wider than `room` px at `px`.
pub(super) fn fit(text: &str, px: f64, room: f64) -> String {
    if text_width(text, px) <= room {
        return text.to_string();
    }
    let mut cut: String = text.to_string();
    while !cut.is_empty() && text_width(&format!("{cut}…"), px) > room {
        cut.pop();
    }
    format!("{cut}…")
}

/// In an HTML page a stylesheet beats an SVG's presentation attributes, and the flamegraphs
/// inlined beside the plots bring a global `text { font-family: monospace; font-size: 12px }`:
/// moved into a style attribute, which no stylesheet beats, each text keeps the font its box was
/// sized for.
pub(super) fn pin_fonts(svg: &str) -> String {
    const FAMILY: &str = " font-family=\"";
    const SIZE: &str = "\" font-size=\"";
    let mut out = String::with_capacity(svg.len() + svg.len() / 8);
    let mut rest = svg;
    while let Some(at) = rest.find(FAMILY) {
        let after = &rest[at + FAMILY.len()..];
        let pinned = after.find(SIZE).and_then(|f| {
            let family = &after[..f];
            if family.contains('"') {
                return None;
            }
            let size_and_rest = &after[f + SIZE.len()..];
            let end = size_and_rest.find('"')?;
            let px: f64 = size_and_rest[..end].parse().ok()?;
            let style = format!(" style=\"font-family:{family};font-size:{}px\"", trim(px));
            Some((style, &size_and_rest[end + 1..]))
        });
        match pinned {
            Some((style, tail)) => {
                out.push_str(&rest[..at]);
                out.push_str(&style);
                rest = tail;
            }
            None => {
                out.push_str(&rest[..at + FAMILY.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_too_wide_for_its_box_is_cut() {
        assert_eq!(fit("CPU 0", 12.0, 100.0), "CPU 0");
        let cut = fit("a very long series name indeed", 12.0, 100.0);
        assert!(
            cut.ends_with('…') && text_width(&cut, 12.0) <= 100.0,
            "{cut}"
        );
    }

    #[test]
    fn fonts_move_into_a_style_attribute_no_stylesheet_overrides() {
        let svg = r#"<text x="1" y="2" text-anchor="end" font-family="sans-serif" font-size="12.000000000000002" opacity="1">a</text>"#;
        assert_eq!(
            pin_fonts(svg),
            r#"<text x="1" y="2" text-anchor="end" style="font-family:sans-serif;font-size:12px" opacity="1">a</text>"#
        );
    }
}
