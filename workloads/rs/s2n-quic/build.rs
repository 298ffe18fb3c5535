// SPDX-License-Identifier: GPL-2.0-only
//! The versions the build took from Cargo.lock, for the record: s2n-quic,
//! its TLS (s2n-tls) and the crypto both run on (aws-lc-rs), and tokio.
include!("../lock_versions.rs");

fn main() {
    emit_lock_versions(&[
        ("s2n-quic", "S2N_QUIC"),
        ("s2n-tls", "S2N_TLS"),
        ("aws-lc-rs", "AWS_LC_RS"),
        ("tokio", "TOKIO"),
    ]);
}
