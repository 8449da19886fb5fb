//! Field offsets read from the running kernel's BTF (/sys/kernel/btf/vmlinux).
//!
//! The BPF programs have no CO-RE relocations, so userspace resolves each field they read and
//! passes the offsets in as globals: the same programs then work on any kernel with BTF.

use btf_rs::{Btf, Type};

use crate::error::SrvprofError;

pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Byte offsets of the kernel fields the programs read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelOffsets {
    pub task_pid: u64,
    pub task_tgid: u64,
    pub task_comm: u64,
    pub task_exit_code: u64,
    /// task_struct.se.sum_exec_runtime: the scheduler's own on-CPU total for the task.
    pub task_exec_runtime: u64,
    /// pt_regs.orig_ax: the syscall number, for a syscall whose entry was not seen.
    pub regs_orig_ax: u64,
    pub sock_state: u64,
    pub sock_num: u64,
    pub sock_dport: u64,
}

/// Fails with the one-sentence NoKernelBtf when the running kernel exposes no BTF. `run` and
/// `probe` ask first, so on such a kernel they stop before starting a server or loading anything.
pub fn require_kernel_btf() -> Result<(), SrvprofError> {
    if std::path::Path::new(VMLINUX_BTF).exists() {
        Ok(())
    } else {
        Err(SrvprofError::NoKernelBtf)
    }
}

impl KernelOffsets {
    pub fn from_running_kernel() -> Result<Self, SrvprofError> {
        require_kernel_btf()?;
        let btf = Btf::from_file(VMLINUX_BTF).map_err(|e| SrvprofError::BtfField {
            field: "vmlinux".into(),
            reason: e.to_string(),
        })?;
        let field = |path: &[&str]| member_offset(&btf, path);
        // struct sock starts with struct sock_common __sk_common.
        let sk_common = field(&["sock", "__sk_common"])?;
        Ok(Self {
            task_pid: field(&["task_struct", "pid"])?,
            task_tgid: field(&["task_struct", "tgid"])?,
            task_comm: field(&["task_struct", "comm"])?,
            task_exit_code: field(&["task_struct", "exit_code"])?,
            task_exec_runtime: field(&["task_struct", "se", "sum_exec_runtime"])?,
            regs_orig_ax: field(&["pt_regs", "orig_ax"])?,
            sock_state: sk_common + field(&["sock_common", "skc_state"])?,
            sock_num: sk_common + field(&["sock_common", "skc_num"])?,
            sock_dport: sk_common + field(&["sock_common", "skc_dport"])?,
        })
    }
}

/// Offset in bytes of `path[1..]` inside struct `path[0]`, looking through anonymous members.
fn member_offset(btf: &Btf, path: &[&str]) -> Result<u64, SrvprofError> {
    let name = path.join(".");
    let err = |reason: String| SrvprofError::BtfField {
        field: name.clone(),
        reason,
    };
    let (struct_name, members) = path.split_first().ok_or_else(|| err("empty path".into()))?;
    let types = btf
        .resolve_types_by_name(struct_name)
        .map_err(|e| err(e.to_string()))?;
    let mut current = types
        .into_iter()
        .find(|t| matches!(t, Type::Struct(s) if !s.members.is_empty()))
        .ok_or_else(|| err(format!("no struct {struct_name}")))?;
    let mut bits = 0u64;
    for wanted in members {
        let (offset, next) = find_member(btf, &current, wanted)
            .map_err(|e| err(e.to_string()))?
            .ok_or_else(|| err(format!("no member {wanted}")))?;
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
