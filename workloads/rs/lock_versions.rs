// SPDX-License-Identifier: GPL-2.0-only
// Shared by the workloads' build scripts (include!): the versions the build
// took from Cargo.lock, for the record, as QPROF_<VAR>_VERSION.
fn emit_lock_versions(crates: &[(&str, &str)]) {
    let lock = std::fs::read_to_string("../Cargo.lock").expect("workloads/rs/Cargo.lock");
    println!("cargo:rerun-if-changed=../Cargo.lock");
    for (krate, var) in crates {
        let needle = format!("name = \"{krate}\"\nversion = \"");
        let at = lock.find(&needle).unwrap_or_else(|| panic!("{krate} is not in Cargo.lock")) + needle.len();
        let version = &lock[at..at + lock[at..].find('"').unwrap()];
        println!("cargo:rustc-env=QPROF_{var}_VERSION={version}");
    }
}
