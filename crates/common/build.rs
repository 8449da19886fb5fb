//! Declares the probe families (the files here that declare their names) and gathers their
//! names: a new family is its file, nothing listed by hand.
fn main() {
    let names = srvprof_families::names();
    let modules = srvprof_families::modules("src", &names);
    let mut code = srvprof_families::declarations(&modules, "pub ");
    for m in &modules {
        // A family may have no public item, or one named as another's (tcp::COUNT and
        // window::COUNT are used by their module's name).
        code += &format!(
            "#[allow(unused_imports, ambiguous_glob_reexports)]\npub use {}::*;\n",
            m.name
        );
    }
    code += &format!("families!({});\n", names.join(", "));
    code += &format!(
        "/// Every family, by the name of its files on each layer.\npub const FAMILIES: &[&str] = &{names:?};\n"
    );
    srvprof_families::write("families.rs", &code);
}
