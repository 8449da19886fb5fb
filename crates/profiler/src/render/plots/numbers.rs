//! Numbers as the plots' ticks and labels print them: SI prefixes, three significant digits.

/// `v` in `unit` with an SI prefix and at most three significant digits: 140000 "req/s" is
/// "140k req/s", 2500 "/s" is "2.5k/s", 0.0017 "s" is "1.7 ms" (seconds take the prefix, and
/// none above 1). Percent takes no prefix: "12 %".
pub fn si(v: f64, unit: &str) -> String {
    let sep = if unit.is_empty() || unit.starts_with('/') {
        ""
    } else {
        " "
    };
    if unit == "%" || v == 0.0 || !v.is_finite() {
        return format!("{}{sep}{unit}", significant(v));
    }
    // Rounded first, so 999.7 reads "1k", not "1000".
    let rounded = round_significant(v, 3);
    let seconds = unit == "s";
    let prefixes = [
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
        (1.0, ""),
        (1e-3, "m"),
        (1e-6, "µ"),
        (1e-9, "n"),
    ];
    let (scale, prefix) = prefixes
        .iter()
        .copied()
        .filter(|(scale, _)| !seconds || *scale <= 1.0)
        .find(|(scale, _)| rounded.abs() >= *scale)
        .unwrap_or((1e-9, "n"));
    let number = significant(rounded / scale);
    if seconds {
        format!("{number} {prefix}s")
    } else {
        format!("{number}{prefix}{sep}{unit}")
    }
}

pub(super) fn round_significant(v: f64, digits: i32) -> f64 {
    if v == 0.0 {
        return 0.0;
    }
    let magnitude = 10f64.powi(digits - 1 - v.abs().log10().floor() as i32);
    (v * magnitude).round() / magnitude
}

/// At most three significant digits, no trailing zeros: 140, 12.5, 1.7, 0.25.
pub(super) fn significant(v: f64) -> String {
    let a = v.abs();
    let decimals = if a >= 100.0 || a == 0.0 {
        0
    } else if a >= 10.0 {
        1
    } else if a >= 1.0 {
        2
    } else {
        (2 - a.log10().floor() as i32).clamp(2, 9) as usize
    };
    let s = format!("{:.*}", decimals, v);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

pub(super) fn trim(v: f64) -> String {
    let s = format!("{v:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A time axis tick: whole seconds, or tenths on a short run.
pub(super) fn seconds(t: f64) -> String {
    format!("{} s", trim((t * 10.0).round() / 10.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_read_with_si_prefixes_and_units() {
        assert_eq!(si(140_000.0, "req/s"), "140k req/s");
        assert_eq!(si(0.0017, "s"), "1.7 ms");
        assert_eq!(si(12.0, "%"), "12 %");
        assert_eq!(si(2500.0, "/s"), "2.5k/s");
        assert_eq!(si(0.0, "s"), "0 s");
        assert_eq!(si(1.108991, "s"), "1.11 s");
        assert_eq!(si(0.000688, "s"), "688 µs");
        assert_eq!(si(999.7, ""), "1k");
        assert_eq!(si(1_500_000.0, "/s"), "1.5M/s");
        assert_eq!(si(35.5, "%"), "35.5 %");
        assert_eq!(si(0.25, "%"), "0.25 %");
        assert_eq!(si(12_000.0, ""), "12k");
        assert_eq!(si(1500.0, "s"), "1500 s");
        assert_eq!(si(10_000.0, "req/s"), "10k req/s");
    }
}
