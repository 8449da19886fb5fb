//! Every program, map and global the loader names is in the built BPF object, in the section
//! it is attached by, and every program and map of the object is one the loader knows: read from
//! the object's ELF symbols, without a kernel, so a misspelt name fails `cargo test`, not a run.

use std::collections::{BTreeMap, BTreeSet};

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use srvprof_common::{globals, maps};

use super::{BPF_OBJECT, PROGRAMS, Readers, stacks};

/// The object's programs (name -> section), maps and globals.
struct Names {
    programs: BTreeMap<String, String>,
    maps: BTreeSet<String>,
    globals: BTreeSet<String>,
}

fn names() -> Names {
    let file = object::File::parse(BPF_OBJECT).expect("the BPF object parses as ELF");
    let mut out = Names {
        programs: BTreeMap::new(),
        maps: BTreeSet::new(),
        globals: BTreeSet::new(),
    };
    for symbol in file.symbols() {
        let (Ok(name), Some(index)) = (symbol.name(), symbol.section_index()) else {
            continue;
        };
        let section = file.section_by_index(index).expect("a symbol's section");
        let section = section.name().expect("a section's name").to_string();
        match (symbol.kind(), section.as_str()) {
            (SymbolKind::Text, ".text") => {} // helpers the programs call
            (SymbolKind::Text, _) => {
                out.programs.insert(name.to_string(), section);
            }
            (SymbolKind::Data, "maps") => {
                out.maps.insert(name.to_string());
            }
            (SymbolKind::Data, ".rodata") if !name.starts_with("anon.") => {
                out.globals.insert(name.to_string());
            }
            _ => {}
        }
    }
    out
}

/// The programs attached by PROGRAMS' loop, by the families' own attach (their OWN_PROGRAMS) and
/// by the stacks' code, with the section each must be in.
fn loader_programs() -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = (PROGRAMS.iter())
        .map(|program| (program.to_string(), format!("tp_btf/{program}")))
        .collect();
    for &(program, section) in Readers::OWN_PROGRAMS.iter().flat_map(|(_, own)| own.iter()) {
        out.insert(program.into(), section.into());
    }
    out.insert(stacks::OFFCPU_PROGRAM.into(), "tp_btf/sched_switch".into());
    out.insert(stacks::ONCPU_PROGRAM.into(), "perf_event".into());
    out
}

#[test]
fn every_program_map_and_global_the_loader_names_is_in_the_bpf_object() {
    let object = names();
    assert_eq!(
        loader_programs(),
        object.programs,
        "the loader's programs (left) against the object's (right)"
    );
    let named = |families: &[&[&str]]| -> BTreeSet<String> {
        families
            .iter()
            .flat_map(|all| all.iter())
            .map(|s| s.to_string())
            .collect()
    };
    assert_eq!(
        named(maps::ALL),
        object.maps,
        "maps::ALL against the object's maps"
    );
    assert_eq!(
        named(globals::ALL),
        object.globals,
        "globals::ALL against the object's globals"
    );
}
