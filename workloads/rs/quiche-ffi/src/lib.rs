// SPDX-License-Identifier: GPL-2.0-only
//! quiche's C API (its "ffi" feature: include/quiche.h) in one static
//! library with the BoringSSL it runs on, which qprof-wl's quiche transport
//! (workloads/quiche/wl_quiche.c) links into a plugin of its own; and what
//! the record says of the build. The transport is C, over qprof-wl's one
//! copy of each pattern; nothing of a pattern is here.
pub use quiche;

/// The boring-sys version the build took from Cargo.lock (NUL-terminated).
#[no_mangle]
pub extern "C" fn qprof_boring_sys_version() -> *const std::ffi::c_char {
    concat!(env!("QPROF_BORING_SYS_VERSION"), "\0").as_ptr().cast()
}
