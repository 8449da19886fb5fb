//! The run's stacks as pprof profiles (profile.proto of github.com/google/pprof), gzip-compressed:
//! DIR/profile-{server,client}.pb.gz, for `go tool pprof`, Pyroscope and Parca.
//!
//! One profile per group, every sample carrying three values: `samples/count` and
//! `cpu/nanoseconds` for on-CPU samples, `off_cpu/nanoseconds` for off-CPU time, zero where a kind
//! does not apply (a stack seen both on and off the CPU is one sample with both). `go tool pprof`
//! shows one value at a time (`-sample_index`, cpu unless told), and Pyroscope and Parca keep each
//! sample type as its own series, so on- and off-CPU time are never summed, and a group's two
//! kinds stay in one file to open, as `go tool pprof` would not merge two files of unlike types.
//!
//! Frames are names: each name is one function and one location without an address. Kernel frames
//! (`_[k]` in the folded files) point at a `[kernel.kallsyms]` mapping with the running kernel's
//! build-id; a user frame at the mapping of the file symbolize.rs found it in, with that file's
//! GNU build-id (FoldedStacks::modules; a JIT frame, or stacks read back from files, at none);
//! each target process's executable is a mapping too.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use flate2::{Compression, GzBuilder};
use prost::Message;

use crate::error::SrvprofError;
use crate::output;
use crate::stacks::build_id::{Binaries, Executable};
use srvprof_analysis::stacks::{FoldedStacks, GROUPS, StackKind};

/// profile.proto's messages as prost-build emits them, field numbers as in the .proto.
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "7")]
        pub drop_frames: i64,
        #[prost(int64, tag = "8")]
        pub keep_frames: i64,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    /// Type and unit, as string table indices.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// Leaf first.
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
        #[prost(bool, tag = "5")]
        pub is_folded: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

/// Writes DIR/profile-{server,client}.pb.gz (none for a group without stacks). `sample_hz` is the
/// on-CPU sampling frequency; the executables read while the processes ran become the mappings.
pub fn write(
    dir: &srvprof_files::OutDir,
    stacks: &FoldedStacks,
    sample_hz: u64,
    binaries: &Binaries,
    force: bool,
) -> Result<(), SrvprofError> {
    let kernel = binaries.kernel_build_id.as_deref();
    for (group, name) in GROUPS {
        let executables = binaries.of_group(group);
        if let Some(p) = profile(stacks, group, sample_hz, executables, kernel) {
            let file = format!("profile-{name}.pb.gz");
            output::write_atomic(dir, &file, &gzip(&p.encode_to_vec(), &file), force)?;
        }
    }
    Ok(())
}

/// One group's profile; None when the group has no stacks.
pub fn profile(
    stacks: &FoldedStacks,
    group: u32,
    sample_hz: u64,
    executables: &[Executable],
    kernel_build_id: Option<&str>,
) -> Option<proto::Profile> {
    let mut b = Builder::default();
    b.string("");
    for e in executables {
        let id = b.mapping(&e.path, e.build_id.as_deref());
        b.module_mappings.insert(e.path.clone(), id);
    }
    b.modules = stacks.modules.clone();
    let ns_per_sample = 1e9 / sample_hz.max(1) as f64;

    // Leaf-first location ids -> [samples, cpu ns, off-CPU ns].
    let mut samples: BTreeMap<Vec<u64>, [i64; 3]> = BTreeMap::new();
    for kind in StackKind::ALL {
        for line in stacks.lines(kind) {
            if line.group != group || line.value == 0 {
                continue;
            }
            let ids: Vec<u64> = (line.frames.iter().rev())
                .map(|f| b.location(f, kernel_build_id))
                .collect();
            let values = samples.entry(ids).or_default();
            match kind {
                StackKind::OnCpu => values[0] += line.value as i64,
                // Off-CPU values are microseconds.
                StackKind::OffCpu => values[2] += line.value as i64 * 1000,
            }
        }
    }
    if samples.is_empty() {
        return None;
    }
    let value_type = |b: &mut Builder, t: &str, unit: &str| proto::ValueType {
        r#type: b.string(t),
        unit: b.string(unit),
    };
    let sample_type = vec![
        value_type(&mut b, "samples", "count"),
        value_type(&mut b, "cpu", "nanoseconds"),
        value_type(&mut b, "off_cpu", "nanoseconds"),
    ];
    let period_type = Some(value_type(&mut b, "cpu", "nanoseconds"));
    let default_sample_type = b.string("cpu");
    let comment = vec![b.string(&format!(
        "srvprof: on-CPU stacks sampled at {sample_hz} Hz (cpu-clock), off-CPU time from switch-out to switch-in"
    ))];
    let sample = samples
        .into_iter()
        .map(|(location_id, [n, _, off_ns])| proto::Sample {
            location_id,
            value: vec![n, (n as f64 * ns_per_sample).round() as i64, off_ns],
        })
        .collect();
    Some(proto::Profile {
        sample_type,
        sample,
        mapping: b.mappings,
        location: b.locations,
        function: b.functions,
        string_table: b.strings,
        period_type,
        period: ns_per_sample.round() as i64,
        comment,
        default_sample_type,
        ..Default::default()
    })
}

/// The tables of one profile: names interned once, one function and location per frame name.
#[derive(Default)]
struct Builder {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<proto::Function>,
    locations: Vec<proto::Location>,
    location_ids: HashMap<String, u64>,
    mappings: Vec<proto::Mapping>,
    kernel_mapping: Option<u64>,
    /// A user frame's file and build-id (FoldedStacks::modules), and each file's mapping.
    modules: BTreeMap<String, srvprof_analysis::stacks::Module>,
    module_mappings: HashMap<String, u64>,
}

impl Builder {
    fn string(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), id);
        id
    }

    fn mapping(&mut self, path: &str, build_id: Option<&str>) -> u64 {
        let id = self.mappings.len() as u64 + 1;
        let mapping = proto::Mapping {
            id,
            filename: self.string(path),
            build_id: build_id.map_or(0, |b| self.string(b)),
            // Named already: no tool should try to symbolize it again.
            has_functions: true,
            ..Default::default()
        };
        self.mappings.push(mapping);
        id
    }

    /// The location of a folded frame; kernel frames lose their `_[k]` to the kernel's mapping.
    fn location(&mut self, frame: &str, kernel_build_id: Option<&str>) -> u64 {
        if let Some(&id) = self.location_ids.get(frame) {
            return id;
        }
        let (name, mapping_id) = match frame.strip_suffix("_[k]") {
            Some(name) => {
                let kernel = match self.kernel_mapping {
                    Some(id) => id,
                    None => self.mapping("[kernel.kallsyms]", kernel_build_id),
                };
                self.kernel_mapping = Some(kernel);
                (name, kernel)
            }
            None => match self.modules.get(frame).cloned() {
                Some(m) => {
                    let id = match self.module_mappings.get(&m.path) {
                        Some(&id) => id,
                        None => self.mapping(&m.path, m.build_id.as_deref()),
                    };
                    self.module_mappings.insert(m.path, id);
                    (frame, id)
                }
                None => (frame, 0),
            },
        };
        let id = self.locations.len() as u64 + 1;
        let name = self.string(name);
        self.functions.push(proto::Function {
            id,
            name,
            system_name: name,
            ..Default::default()
        });
        self.locations.push(proto::Location {
            id,
            mapping_id,
            line: vec![proto::Line {
                function_id: id,
                line: 0,
            }],
            ..Default::default()
        });
        self.location_ids.insert(frame.to_string(), id);
        id
    }
}

/// gzip with srvprof's marker in the header's comment: output::check_writable then lets a later
/// run replace the file without --force, as it does srvprof's HTML.
fn gzip(bytes: &[u8], file: &str) -> Vec<u8> {
    let mut gz = GzBuilder::new()
        .filename(file.trim_end_matches(".gz"))
        .comment(super::HTML_MARKER)
        .write(Vec::new(), Compression::default());
    gz.write_all(bytes).expect("gzip into memory");
    gz.finish().expect("gzip into memory")
}

#[cfg(test)]
mod tests {
    use super::*;
    use srvprof_analysis::stacks::FoldedLine;
    use srvprof_common::{GROUP_CLIENT, GROUP_SERVER};
    use std::io::Read;

    fn line(group: u32, frames: &[&str], value: u64) -> FoldedLine {
        FoldedLine {
            group,
            frames: frames.iter().map(|s| s.to_string()).collect(),
            value,
            periods: 0,
        }
    }

    fn stacks() -> FoldedStacks {
        FoldedStacks {
            oncpu: vec![
                line(GROUP_SERVER, &["spin", "start_thread", "busy_spin"], 90),
                line(GROUP_SERVER, &["spin", "start_thread", "other"], 9),
                line(GROUP_SERVER, &["io", "start_thread", "tcp_sendmsg_[k]"], 1),
                line(GROUP_CLIENT, &["srvprof", "main", "send"], 5),
            ],
            offcpu: vec![
                line(GROUP_SERVER, &["spin", "start_thread", "other"], 250),
                line(
                    GROUP_SERVER,
                    &["io", "start_thread", "schedule_[k]"],
                    1_000_000,
                ),
            ],
            ..Default::default()
        }
    }

    fn read(path: &std::path::Path) -> proto::Profile {
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
            .read_to_end(&mut bytes)
            .unwrap();
        proto::Profile::decode(bytes.as_slice()).unwrap()
    }

    fn name(p: &proto::Profile, location_id: u64) -> &str {
        let loc = &p.location[location_id as usize - 1];
        let f = &p.function[loc.line[0].function_id as usize - 1];
        &p.string_table[f.name as usize]
    }

    #[test]
    fn a_written_profile_decodes_to_the_folded_totals_leaf_first() {
        let dir = std::env::temp_dir().join(format!("srvprof-pprof-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let server = [std::process::id()];
        let out = crate::output::open_dir(&dir).unwrap();
        write(&out, &stacks(), 100, &Binaries::read(&server, &[]), false).unwrap();
        // A second run replaces srvprof's own files without --force.
        write(&out, &stacks(), 100, &Binaries::read(&server, &[]), false).unwrap();

        let p = read(&dir.join("profile-server.pb.gz"));
        assert_eq!(p.string_table[0], "");
        let types: Vec<(&str, &str)> = (p.sample_type.iter())
            .map(|t| {
                let s = |i: i64| p.string_table[i as usize].as_str();
                (s(t.r#type), s(t.unit))
            })
            .collect();
        assert_eq!(
            types,
            [
                ("samples", "count"),
                ("cpu", "nanoseconds"),
                ("off_cpu", "nanoseconds")
            ]
        );
        assert_eq!(p.string_table[p.default_sample_type as usize], "cpu");
        assert_eq!(p.period, 10_000_000);
        let total = |i: usize| p.sample.iter().map(|s| s.value[i]).sum::<i64>();
        assert_eq!(total(0), 100);
        assert_eq!(total(1), 100 * 10_000_000);
        assert_eq!(total(2), (250 + 1_000_000) * 1000);
        // One sample per distinct stack: `other` carries on- and off-CPU values.
        assert_eq!(p.sample.len(), 4);
        let other = (p.sample.iter())
            .find(|s| name(&p, s.location_id[0]) == "other")
            .unwrap();
        assert_eq!(other.value, [9, 90_000_000, 250_000]);
        let names: Vec<&str> = other.location_id.iter().map(|&l| name(&p, l)).collect();
        assert_eq!(names, ["other", "start_thread", "spin"]);
        // Each name once; kernel frames on the kernel's mapping, without their marker.
        assert_eq!(p.function.len(), 7);
        let kernel = (p.location.iter())
            .find(|l| name(&p, l.id) == "schedule")
            .unwrap();
        let mapping = &p.mapping[kernel.mapping_id as usize - 1];
        assert_eq!(
            p.string_table[mapping.filename as usize],
            "[kernel.kallsyms]"
        );
        // This test's own executable, with the build-id the linker gave it.
        let exe = &p.mapping[0];
        assert!(exe.has_functions && exe.build_id != 0);
        assert_eq!(
            p.string_table[exe.filename as usize],
            std::fs::read_link("/proc/self/exe")
                .unwrap()
                .display()
                .to_string()
        );

        let client = read(&dir.join("profile-client.pb.gz"));
        assert_eq!(client.sample.len(), 1);
        assert_eq!(client.sample[0].value, [5, 50_000_000, 0]);
        assert!(client.mapping.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_user_frame_points_at_the_mapping_of_its_file() {
        let mut st = stacks();
        let exe = Executable {
            path: "/usr/sbin/busy".into(),
            build_id: Some("abcd".into()),
        };
        let module = |path: &str, id: &str| srvprof_analysis::stacks::Module {
            path: path.into(),
            build_id: Some(id.into()),
        };
        st.modules
            .insert("busy_spin".into(), module("/usr/sbin/busy", "abcd"));
        st.modules
            .insert("start_thread".into(), module("/lib/libc.so.6", "ef01"));
        let p = profile(&st, GROUP_SERVER, 99, &[exe], None).unwrap();
        let mapping_of = |fname: &str| -> (String, String) {
            let loc = (p.location.iter())
                .find(|l| name(&p, l.id) == fname)
                .unwrap();
            let m = &p.mapping[loc.mapping_id as usize - 1];
            let s = |i: i64| p.string_table[i as usize].clone();
            (s(m.filename), s(m.build_id))
        };
        // The executable's mapping is reused, not made twice; libc gets one of its own.
        assert_eq!(
            mapping_of("busy_spin"),
            ("/usr/sbin/busy".into(), "abcd".into())
        );
        assert_eq!(
            mapping_of("start_thread"),
            ("/lib/libc.so.6".into(), "ef01".into())
        );
        assert_eq!(p.mapping.len(), 2 + 1, "busy, libc, the kernel");
        // A frame of no known file points at none.
        let other = (p.location.iter())
            .find(|l| name(&p, l.id) == "other")
            .unwrap();
        assert_eq!(other.mapping_id, 0);
    }

    #[test]
    fn no_file_for_a_group_without_stacks() {
        let only_server = FoldedStacks {
            oncpu: vec![line(GROUP_SERVER, &["t", "f"], 1)],
            ..Default::default()
        };
        assert!(profile(&only_server, GROUP_CLIENT, 99, &[], None).is_none());
        assert!(profile(&only_server, GROUP_SERVER, 99, &[], None).is_some());
    }
}
