//! srvprof: drive a network server with load and watch the kernel underneath it.

pub mod cli;
pub mod clock;
pub mod commands;
pub mod discover;
pub mod error;
pub mod output;
pub mod probes;
pub mod procfs;
pub mod realtime;
pub mod render;
pub mod sampler;
pub mod sockdiag;
