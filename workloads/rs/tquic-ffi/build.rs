// SPDX-License-Identifier: GPL-2.0-only
//! The version the build took from Cargo.lock, for the record: tquic's,
//! whose vendored BoringSSL it runs on.
include!("../lock_versions.rs");

fn main() {
    emit_lock_versions(&[("tquic", "TQUIC")]);
}
