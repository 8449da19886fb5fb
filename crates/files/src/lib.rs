//! The files srvprof writes and reads, made safe for a tool that runs as root on a shared host
//! and reads folders copied from other hosts.
//!
//! - Written (out_dir.rs): into a folder opened once, never through a symbolic link at its last
//!   step; each file created beside its final name with `O_EXCL | O_NOFOLLOW`, then renamed into
//!   place; folder and files given to the user who ran sudo by handle, not by path.
//! - Read (input.rs): regular files only, never through a symbolic link, up to a size cap.

mod input;
mod out_dir;
mod owner;

pub use input::{MAX_INPUT, read_input, read_input_string};
pub use out_dir::{Kind, OutDir, PendingFile};
pub use owner::invoking_user;
