//! srvprof: drive a network server with load and watch the kernel underneath it.
//!
//! This crate wires the libraries together: `commands` (one per subcommand) find the server
//! (`discover`), attach the probes (`probes`, each module the twin of one in crates/ebpf), read
//! them and /proc every interval (`sampler`, `procfs`, `sockdiag`), drive the load
//! (srvprof-loadgen), hand the recorded samples to the analysis (srvprof-analysis, no kernel
//! there), and write what a user reads (`render`, `output`).

pub mod cli;
pub mod clock;
pub mod commands;
pub mod discover;
pub mod error;
pub mod grid;
pub mod output;
pub mod privilege;
pub mod probes;
pub mod procfs;
pub mod realtime;
pub mod render;
pub mod sampler;
pub mod sockdiag;
pub mod stacks;
