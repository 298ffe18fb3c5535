// SPDX-License-Identifier: GPL-2.0-only
//! The versions the build took from Cargo.lock, for the record: quiche and
//! boring-sys, whose vendored BoringSSL it builds.
include!("../lock_versions.rs");

fn main() {
    emit_lock_versions(&[("quiche", "QUICHE"), ("boring-sys", "BORING_SYS")]);
}
