#![no_std]
// The library target exists so that crates/profiler can declare a build-dependency on this crate.
