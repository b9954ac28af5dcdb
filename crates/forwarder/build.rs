//! Compiles the XDP program `bpf/xfwd.bpf.c` with clang into `$OUT_DIR/xfwd.bpf.o`, which
//! `src/xdp.rs` embeds. Needs clang and libbpf's headers (Debian: clang, libbpf-dev; `cargo
//! xtask setup` installs them).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "bpf/xfwd.bpf.c";
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let object = out.join("xfwd.bpf.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_owned());
    // asm/types.h, which linux/bpf.h includes, lives in the multiarch include directory.
    let multiarch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("aarch64") => "aarch64-linux-gnu",
        _ => "x86_64-linux-gnu",
    };
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf"])
        .arg(format!("-I/usr/include/{multiarch}"))
        .arg("-c")
        .arg(source)
        .arg("-o")
        .arg(&object)
        .status();
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => panic!(
            "{clang} failed ({status}) on {source}; are clang and libbpf-dev installed? (`cargo xtask setup`)"
        ),
        Err(error) => panic!(
            "cannot run {clang}: {error}; install clang and libbpf-dev (`cargo xtask setup`)"
        ),
    }
}
