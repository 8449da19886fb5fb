//! `srvprof explain [KIND]`: what a finding's kind means, the evidence it rests on, the usual fix
//! and its rule's file, from docs/findings.md as built into the binary.

use srvprof_analysis::finding::FindingKind;

use crate::error::SrvprofError;
use crate::render::text::wrap;

/// The terminal's width the text keeps within.
const WIDTH: usize = 100;

/// A kind's section, or with no kind every kind with what it means, one line each.
pub fn text(kind: Option<&str>) -> Result<String, SrvprofError> {
    let Some(name) = kind else {
        let mut out = String::from("Finding kinds (srvprof explain KIND says more of one):\n");
        let pad = FindingKind::ALL
            .iter()
            .map(|k| k.name().len())
            .max()
            .unwrap_or(0)
            + 2;
        for &k in FindingKind::ALL {
            let means = k.explanation_parts().first().map_or("", |(_, t)| *t);
            let line = format!("  {:<pad$}{means}", k.name());
            out.push_str(&wrap(&line, pad + 2, WIDTH));
            out.push('\n');
        }
        return Ok(out);
    };
    let kind = FindingKind::from_name(name).ok_or_else(|| {
        SrvprofError::Usage(format!(
            "'{name}' is not a finding kind; `srvprof explain` lists them all, as run.json's findings name them"
        ))
    })?;
    let mut out = format!("{kind}\n");
    for (label, text) in kind.explanation_parts() {
        out.push_str(&wrap(&format!("  {label}: {text}"), 4, WIDTH));
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_in_full_every_kind_listed_an_unknown_kind_in_one_sentence() {
        let one = text(Some("syn_retransmit_tail")).unwrap();
        assert!(
            one.starts_with("syn_retransmit_tail\n  What it means: "),
            "{one}"
        );
        for label in srvprof_analysis::finding::EXPLANATION_LABELS {
            assert!(one.contains(&format!("\n  {label}: ")), "{label}: {one}");
        }
        assert!(one.contains("crates/analysis/src/rules/"), "{one}");
        let all = text(None).unwrap();
        for &k in FindingKind::ALL {
            assert!(all.contains(&format!("\n  {} ", k.name())), "{k}: {all}");
        }
        for t in [&one, &all] {
            assert!(t.lines().all(|l| l.chars().count() <= WIDTH), "{t}");
        }
        let e = text(Some("no_such_kind")).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let sentence = e.to_string();
        assert!(
            !sentence.contains('\n') && sentence.contains("srvprof explain"),
            "{sentence}"
        );
    }
}
