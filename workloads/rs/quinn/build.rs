// SPDX-License-Identifier: GPL-2.0-only
//! The versions the build took from Cargo.lock, for the record: quinn's
//! protocol crate, rustls and its crypto provider.
include!("../lock_versions.rs");

fn main() {
    emit_lock_versions(&[
        ("quinn-proto", "QUINN_PROTO"),
        ("rustls", "RUSTLS"),
        ("aws-lc-rs", "AWS_LC_RS"),
    ]);
}
