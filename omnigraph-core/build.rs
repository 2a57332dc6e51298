//! Omnigraph-core needs no generated code. It depends on `protoc-bin-vendored` only so
//! that cargo unpacks a protoc before Lance's build scripts run `tools/protoc`.
fn main() {
    // Touch the crate so the dependency is not reported as unused.
    let _ = protoc_bin_vendored::include_path;
    println!("cargo:rerun-if-changed=build.rs");
}
