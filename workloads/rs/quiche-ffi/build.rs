// SPDX-License-Identifier: GPL-2.0-only
//! The versions the build took from Cargo.lock, for the record: boring-sys,
//! whose vendored BoringSSL quiche runs on (quiche says its own).
include!("../lock_versions.rs");

fn main() {
    emit_lock_versions(&[("boring-sys", "BORING_SYS")]);
}
