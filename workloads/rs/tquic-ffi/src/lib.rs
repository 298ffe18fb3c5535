// SPDX-License-Identifier: GPL-2.0-only
//! tquic's C API (its "ffi" feature: include/tquic.h) in one static
//! library with the BoringSSL tquic vendors and builds, which qprof-wl's
//! tquic transport (workloads/tquic/wl_tquic.c) links into a plugin of its
//! own. The transport is C, over qprof-wl's one copy of each pattern;
//! nothing of a pattern is here.
pub use tquic;

/// The tquic version the build took from Cargo.lock (NUL-terminated).
#[no_mangle]
pub extern "C" fn qprof_tquic_version() -> *const std::ffi::c_char {
    concat!(env!("QPROF_TQUIC_VERSION"), "\0").as_ptr().cast()
}
