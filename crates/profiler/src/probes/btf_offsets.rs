//! Field offsets read from the running kernel's BTF (/sys/kernel/btf/vmlinux).
//!
//! The BPF programs have no CO-RE relocations, so userspace resolves each field they read and
//! passes the offsets in as globals: the same programs then work on any kernel with BTF.

use std::collections::BTreeMap;

use btf_rs::{Btf, Type};

use crate::error::{Cause, SrvprofError};

pub use crate::procfs::files::VMLINUX_BTF;

/// Byte offsets of the kernel fields the programs read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelOffsets {
    pub task_pid: u64,
    pub task_tgid: u64,
    pub task_comm: u64,
    pub task_exit_code: u64,
    /// task_struct.se.sum_exec_runtime: the scheduler's own on-CPU total for the task.
    pub task_exec_runtime: u64,
    /// bpf_perf_event_data_kern.event and perf_event.hw.hrtimer.node.expires: when the on-CPU
    /// sampler's tick being delivered was due.
    pub perf_ctx_event: u64,

    pub perf_event_expires: u64,
    /// pt_regs.orig_ax: the syscall number, for a syscall whose entry was not seen.
    pub regs_orig_ax: u64,
    pub sock_state: u64,
    pub sock_num: u64,
    pub sock_dport: u64,
    /// sock_common's skc_family, skc_daddr and skc_v6_daddr: where a socket connects to.
    pub sock_family: u64,
    /// sock.sk_protocol: which transport a socket is (IPPROTO_UDP for a datagram service's).
    pub sock_protocol: u64,
    pub sock_daddr: u64,
    pub sock_v6_daddr: u64,
    /// inet_sock.inet_sport (network order): a full socket's own port. Closing a socket
    /// (tcp_set_state to CLOSE) releases its port and zeroes skc_num before an active reset is
    /// sent, so that reset's side is read here.
    pub inet_sport: u64,
    /// sk_buff.data: a received segment's TCP header, for a reset sent with no socket.
    pub skb_data: u64,
    /// sk_buff.cb: a received segment's tcp_skb_cb (seq, end_seq).
    pub skb_cb: u64,
    /// sock.sk_userlocks: whether bind() chose a socket's port.
    pub sock_userlocks: u64,
    /// From a task's file descriptor to its socket: task_struct.files, files_struct.fdt,
    /// fdtable.max_fds and .fd, file.f_inode, inode.i_mode, file.private_data, socket.sk.
    pub task_files: u64,
    pub files_fdt: u64,
    pub fdtable_max_fds: u64,
    pub fdtable_fd: u64,
    pub file_inode: u64,
    pub inode_mode: u64,
    pub file_private_data: u64,
    pub socket_sk: u64,
    /// inet_connection_sock.icsk_rto: a TCP socket's retransmission timeout (jiffies); struct
    /// sock starts inet_connection_sock, so it is an offset from the socket.
    pub icsk_rto: u64,
    /// tcp_sock's write_seq, snd_nxt, snd_una, snd_wnd and mss_cache (offsets from the socket:
    /// struct tcp_sock starts with struct sock): bytes written and not sent, and why.
    pub tcp_write_seq: u64,
    pub tcp_snd_nxt: u64,
    pub tcp_snd_una: u64,
    pub tcp_snd_wnd: u64,
    pub tcp_mss_cache: u64,
}

/// Names of the kernel's TCP numbers, read from its BTF enums: TCP states (an anonymous enum
/// starting TCP_ESTABLISHED) and reset reasons (enum sk_rst_reason, 6.10 and newer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpNames {
    /// State number -> name without the TCP_ prefix ("ESTABLISHED", "TIME_WAIT").
    pub states: BTreeMap<u32, String>,
    /// Reason number -> name without the SK_RST_REASON_ prefix ("TCP_ABORT_ON_CLOSE"); empty on
    /// a kernel whose tcp_send_reset gives no reason.
    pub reasons: BTreeMap<u32, String>,
}

impl TcpNames {
    pub fn from_running_kernel() -> Result<Self, SrvprofError> {
        Self::from_btf(&open_vmlinux()?)
    }

    pub fn from_btf(btf: &Btf) -> Result<Self, SrvprofError> {
        let reasons = btf
            .resolve_types_by_name("sk_rst_reason")
            .ok()
            .and_then(|types| types.into_iter().find_map(|t| enum_values(btf, &t)))
            .map(|values| strip_prefix(values, "SK_RST_REASON_"))
            .unwrap_or_default();
        // The states' enum has no name: find it by its first member.
        let states = (1..)
            .map_while(|id| btf.resolve_type_by_id(id).ok())
            .find_map(|t| {
                enum_values(btf, &t).filter(|v| v.values().any(|n| n == "TCP_ESTABLISHED"))
            })
            .map(|values| strip_prefix(values, "TCP_"))
            .ok_or_else(|| SrvprofError::BtfField {
                field: "enum TCP_ESTABLISHED".into(),
                source: "no enum of TCP states".into(),
            })?;
        Ok(Self { states, reasons })
    }

    /// The number of state `name` (e.g. "SYN_SENT").
    pub fn state(&self, name: &str) -> Option<u32> {
        self.states
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(v, _)| *v)
    }
}

fn enum_values(btf: &Btf, ty: &Type) -> Option<BTreeMap<u32, String>> {
    let Type::Enum(e) = ty else { return None };
    Some(
        e.members
            .iter()
            .map(|m| (m.val(), btf.resolve_name(m).unwrap_or_default()))
            .collect(),
    )
}

fn strip_prefix(values: BTreeMap<u32, String>, prefix: &str) -> BTreeMap<u32, String> {
    values
        .into_iter()
        .map(|(v, n)| (v, n.strip_prefix(prefix).unwrap_or(&n).to_string()))
        .collect()
}

pub fn open_vmlinux() -> Result<Btf, SrvprofError> {
    require_kernel_btf()?;
    Btf::from_file(VMLINUX_BTF).map_err(|e| SrvprofError::BtfField {
        field: "vmlinux".into(),
        source: e.into(),
    })
}

/// Fails with the one-sentence NoKernelBtf when the running kernel exposes no BTF. `run` and
/// `probe` ask first, so on such a kernel they stop before starting a server or loading anything.
pub fn require_kernel_btf() -> Result<(), SrvprofError> {
    if crate::procfs::files::has_kernel_btf() {
        Ok(())
    } else {
        Err(SrvprofError::NoKernelBtf)
    }
}

impl KernelOffsets {
    pub fn from_running_kernel() -> Result<Self, SrvprofError> {
        Self::from_btf(&open_vmlinux()?)
    }

    pub fn from_btf(btf: &Btf) -> Result<Self, SrvprofError> {
        let field = |path: &[&str]| member_offset(btf, path);
        // struct sock starts with struct sock_common __sk_common.
        let sk_common = field(&["sock", "__sk_common"])?;
        Ok(Self {
            task_pid: field(&["task_struct", "pid"])?,
            task_tgid: field(&["task_struct", "tgid"])?,
            task_comm: field(&["task_struct", "comm"])?,
            task_exit_code: field(&["task_struct", "exit_code"])?,
            task_exec_runtime: field(&["task_struct", "se", "sum_exec_runtime"])?,
            perf_ctx_event: field(&["bpf_perf_event_data_kern", "event"])?,

            perf_event_expires: field(&["perf_event", "hw", "hrtimer", "node", "expires"])?,
            regs_orig_ax: field(&["pt_regs", "orig_ax"])?,
            sock_state: sk_common + field(&["sock_common", "skc_state"])?,
            sock_num: sk_common + field(&["sock_common", "skc_num"])?,
            sock_dport: sk_common + field(&["sock_common", "skc_dport"])?,
            sock_family: sk_common + field(&["sock_common", "skc_family"])?,
            sock_protocol: field(&["sock", "sk_protocol"])?,
            sock_daddr: sk_common + field(&["sock_common", "skc_daddr"])?,
            sock_v6_daddr: sk_common + field(&["sock_common", "skc_v6_daddr"])?,
            inet_sport: field(&["inet_sock", "inet_sport"])?,
            skb_data: field(&["sk_buff", "data"])?,
            skb_cb: field(&["sk_buff", "cb"])?,
            sock_userlocks: field(&["sock", "sk_userlocks"])?,
            task_files: field(&["task_struct", "files"])?,
            files_fdt: field(&["files_struct", "fdt"])?,
            fdtable_max_fds: field(&["fdtable", "max_fds"])?,
            fdtable_fd: field(&["fdtable", "fd"])?,
            file_inode: field(&["file", "f_inode"])?,
            inode_mode: field(&["inode", "i_mode"])?,
            file_private_data: field(&["file", "private_data"])?,
            socket_sk: field(&["socket", "sk"])?,
            icsk_rto: field(&["inet_connection_sock", "icsk_rto"])?,
            tcp_write_seq: field(&["tcp_sock", "write_seq"])?,
            tcp_snd_nxt: field(&["tcp_sock", "snd_nxt"])?,
            tcp_snd_una: field(&["tcp_sock", "snd_una"])?,
            tcp_snd_wnd: field(&["tcp_sock", "snd_wnd"])?,
            tcp_mss_cache: field(&["tcp_sock", "mss_cache"])?,
        })
    }
}

/// Offset in bytes of `path[1..]` inside struct `path[0]`, looking through anonymous members.
fn member_offset(btf: &Btf, path: &[&str]) -> Result<u64, SrvprofError> {
    let name = path.join(".");
    let err = |source: Cause| SrvprofError::BtfField {
        field: name.clone(),
        source,
    };
    let (struct_name, members) = path.split_first().ok_or_else(|| err("empty path".into()))?;
    let types = btf
        .resolve_types_by_name(struct_name)
        .map_err(|e| err(e.into()))?;
    let mut current = types
        .into_iter()
        .find(|t| matches!(t, Type::Struct(s) if !s.members.is_empty()))
        .ok_or_else(|| err(format!("no struct {struct_name}").into()))?;
    let mut bits = 0u64;
    for wanted in members {
        let (offset, next) = find_member(btf, &current, wanted)
            .map_err(|e| err(e.into()))?
            .ok_or_else(|| err(format!("no member {wanted}").into()))?;
        bits += offset;
        current = next;
    }
    if !bits.is_multiple_of(8) {
        return Err(err("member is a bitfield".into()));
    }
    Ok(bits / 8)
}

/// (bit offset, type) of member `wanted` of a struct or union, searching anonymous members too.
fn find_member(btf: &Btf, ty: &Type, wanted: &str) -> btf_rs::Result<Option<(u64, Type)>> {
    let members = match ty {
        Type::Struct(s) | Type::Union(s) => &s.members,
        _ => return Ok(None),
    };
    for member in members {
        let name = btf.resolve_name(member).unwrap_or_default();
        let member_type = strip_modifiers(btf, btf.resolve_chained_type(member)?)?;
        if name == wanted {
            return Ok(Some((u64::from(member.bit_offset()), member_type)));
        }
        if name.is_empty()
            && let Some((inner, t)) = find_member(btf, &member_type, wanted)?
        {
            return Ok(Some((u64::from(member.bit_offset()) + inner, t)));
        }
    }
    Ok(None)
}

/// Follows typedefs, const and volatile to the underlying type.
fn strip_modifiers(btf: &Btf, mut ty: Type) -> btf_rs::Result<Type> {
    for _ in 0..16 {
        ty = match &ty {
            Type::Typedef(t) => btf.resolve_chained_type(t)?,
            Type::Const(t) => btf.resolve_chained_type(t)?,
            Type::Volatile(t) => btf.resolve_chained_type(t)?,
            _ => return Ok(ty),
        };
    }
    Ok(ty)
}
