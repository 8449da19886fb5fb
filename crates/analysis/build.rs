//! Declares the probe families' modules of src/kernel_report (crates/families says how they are
//! found) and joins up those that declare their own part of the record and of the report: each
//! such family's `Counters` goes into KernelCounters and its `Figures` into KernelReport, both
//! flattened (their fields are named in run.json and recordings as in the family's file), and
//! its `figures(start, end, group)` fills the second from the first.
fn main() {
    let modules = srvprof_families::modules("src/kernel_report", &srvprof_families::names());
    let mut report = srvprof_families::declarations(&modules, "pub ");
    let joined: Vec<&str> = (modules.iter())
        .filter(|m| {
            let (counters, figures) = (
                m.declares("pub struct Counters"),
                m.declares("pub struct Figures"),
            );
            assert_eq!(
                counters,
                figures,
                "{}: a family declares both its Counters and its Figures, or neither",
                m.path.display()
            );
            counters
        })
        .map(|m| m.name.as_str())
        .collect();
    let fields = |ty: &str, prefix: &str| -> String {
        (joined.iter())
            .map(|f| format!("    #[serde(flatten)]\n    pub {f}: {prefix}{f}::{ty},\n"))
            .collect()
    };
    let derive =
        "#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]";
    let record = format!(
        "/// Each family's part of the record (its kernel_report/X.rs `Counters`), found by build.rs.\n\
         {derive}\npub struct FamilyCounters {{\n{}}}\n",
        fields("Counters", "crate::kernel_report::")
    );
    let calls: String = (joined.iter())
        .map(|f| format!("        {f}: {f}::figures(start, end, group),\n"))
        .collect();
    report += &format!(
        "/// Each family's part of the report (its `Figures`), found by build.rs.\n\
         {derive}\npub struct FamilyFigures {{\n{}}}\n\n\
         /// Each family's figures for `group` between two readings.\n\
         pub fn family_figures(start: &crate::record::Reading, end: &crate::record::Reading, group: u32) -> FamilyFigures {{\n\
         \x20   FamilyFigures {{\n{calls}    }}\n}}\n",
        fields("Figures", "")
    );
    srvprof_families::write("record_families.rs", &record);
    srvprof_families::write("report_families.rs", &report);
}
