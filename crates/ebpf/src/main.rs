//! srvprof's BPF programs. One module per probe family, each named as its files on the other
//! layers (crates/common/src, crates/profiler/src/probes). All attach to BTF tracepoints (stacks also to the
//! software cpu-clock perf event, pauses to uprobes in a runtime's code): no kprobes, no tracefs.
#![no_std]
#![no_main]
// The BPF atomic add (ebpf/src/tcp.rs): core's atomic types have no read-modify-write here.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod regs;
// Every family's module (build.rs): the files named as crates/common's families.
include!(concat!(env!("OUT_DIR"), "/families.rs"));

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
