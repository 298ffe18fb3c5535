// SPDX-License-Identifier: GPL-2.0-only
//! The versions the build took from Cargo.lock, for the record: quinn,
//! rustls and its crypto provider.
fn main() {
    let lock = std::fs::read_to_string("../Cargo.lock").expect("workloads/rs/Cargo.lock");
    println!("cargo:rerun-if-changed=../Cargo.lock");
    for (krate, var) in [("quinn", "QUINN"), ("rustls", "RUSTLS"), ("aws-lc-rs", "AWS_LC_RS")] {
        let needle = format!("name = \"{krate}\"\nversion = \"");
        let at = lock
            .find(&needle)
            .unwrap_or_else(|| panic!("{krate} is not in Cargo.lock"))
            + needle.len();
        let version = &lock[at..at + lock[at..].find('"').unwrap()];
        println!("cargo:rustc-env=QPROF_{var}_VERSION={version}");
    }
}
