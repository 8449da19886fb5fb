//! The docs' links: every relative link in README.md, CONTRIBUTING.md, docs/ and the crates' and
//! servers' READMEs names a file of the repository, and none leaves it (a reader of a clone or
//! of crates.io has nothing beside it). Checked by this file's test, in `cargo xtask test`.

mod tests {
    use std::path::{Path, PathBuf};

    use crate::workspace_root;

    /// The markdown files users read.
    fn documents(root: &Path) -> Vec<PathBuf> {
        let mut files = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
        for dir in [
            "docs",
            "servers",
            "crates/loadgen",
            "crates/profiler",
            "crates/analysis",
        ] {
            if let Ok(entries) = std::fs::read_dir(root.join(dir)) {
                files.extend(
                    entries
                        .flatten()
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|e| e == "md")),
                );
            }
        }
        files.into_iter().filter(|f| f.exists()).collect()
    }

    /// The targets of `[text](target)` links, without their #anchor.
    fn links(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                let target = rest[..end].split('#').next().unwrap_or_default().trim();
                if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
                    out.push(target.to_string());
                }
                rest = &rest[end..];
            }
        }
        out
    }

    #[test]
    fn every_relative_link_names_a_file_of_the_repository() {
        let root = workspace_root().canonicalize().unwrap();
        let mut broken = Vec::new();
        for doc in documents(&root) {
            let text = std::fs::read_to_string(&doc).unwrap();
            for target in links(&text) {
                let path = doc.parent().unwrap().join(&target);
                match path.canonicalize() {
                    Ok(p) if p.starts_with(&root) => {}
                    Ok(_) => broken.push(format!(
                        "{}: {target} is outside the repository",
                        doc.display()
                    )),
                    Err(_) => broken.push(format!("{}: {target} does not exist", doc.display())),
                }
            }
        }
        assert!(broken.is_empty(), "{}", broken.join("\n"));
    }

    #[test]
    fn links_are_read_as_markdown_writes_them() {
        let text = "see [the report](docs/report.png) and [wrk](https://github.com/wg/wrk), \
                    [a part](CONTRIBUTING.md#adding-a-probe), [up](../shared/X.md)";
        assert_eq!(
            links(text),
            ["docs/report.png", "CONTRIBUTING.md", "../shared/X.md"]
        );
    }
}
