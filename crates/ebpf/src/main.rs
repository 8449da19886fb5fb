//! srvprof's BPF programs. One module per measurement, each the twin of a module of the same
//! name in crates/profiler/src/probes. All attach to BTF tracepoints (stacks also to the
//! software cpu-clock perf event, pauses to uprobes in a runtime's code): no kprobes, no tracefs.
#![no_std]
#![no_main]
// The BPF atomic add (ebpf/src/tcp.rs): core's atomic types have no read-modify-write here.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod exits;
mod irq;
mod memory;
mod pauses;
mod regs;
mod sched;
mod stacks;
mod syscalls;
mod target;
mod tcp;
mod window;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
