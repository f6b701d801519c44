//! Every tf-dsv41 kernel compiles for every target with NVRTC (no GPU needed) and the embedded list is `kernels/*.cu`.

use std::path::{Path, PathBuf};
use tf_cuda::{Arch, KernelSpec, Nvrtc};
use tf_dsv41::cuda::kernels::KERNELS;

fn kernels_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels")
}

/// Fails, never skips, without NVRTC: a kernel that does not compile must fail CI.
fn nvrtc() -> &'static Nvrtc {
    Nvrtc::load_pinned().unwrap_or_else(|e| panic!("{e}\n{}", tf_cuda::kernels::INSTALL_HINT))
}

#[test]
fn every_kernel_file_is_listed() {
    let files = tf_cuda::kernels::cu_names(&kernels_dir()).unwrap();
    let listed: Vec<String> = KERNELS.iter().map(|k| k.name.to_string()).collect();
    assert_eq!(files, listed, "tf_dsv41::cuda::kernels::KERNELS must list every kernels/*.cu, in name order");
    let common = std::fs::read_to_string(kernels_dir().join("common.cuh")).unwrap();
    for k in KERNELS {
        let on_disk = std::fs::read_to_string(kernels_dir().join(format!("{}.cu", k.name))).unwrap();
        assert_eq!(k.source, common.clone() + &on_disk, "{}: the embedded source is common.cuh then the file", k.name);
    }
}

#[test]
fn every_kernel_compiles_for_every_arch() {
    let nvrtc = nvrtc();
    for k in KERNELS {
        let names = tf_cuda::kernels::entry_names(k.source);
        assert!(!names.is_empty(), "{}.cu has no extern \"C\" __global__ entry", k.name);
        for arch in Arch::ALL {
            let spec = KernelSpec::new(k.name, k.source, vec![]);
            let out = nvrtc.compile(&spec, arch).unwrap_or_else(|e| panic!("{e}"));
            assert!(out.cubin.starts_with(b"\x7fELF"), "{} for {arch}: not a cubin", k.name);
            for entry in &names {
                assert!(
                    out.ptx.contains(&format!(".entry {entry}(")),
                    "{} for {arch}: no `{entry}` in the PTX",
                    k.name
                );
            }
        }
    }
}

#[test]
fn every_dense_build_compiles() {
    let nvrtc = nvrtc();
    let dense = KERNELS.iter().find(|k| k.name == "dense").expect("dense.cu is listed");
    for variant in tf_dsv41::cuda::ops::DENSE_VARIANTS {
        let defines = tf_dsv41::cuda::ops::dense_defines(variant).map(|(k, v)| (k.to_string(), v)).to_vec();
        let spec = KernelSpec::new(dense.name, dense.source, defines);
        for arch in Arch::ALL {
            let out = nvrtc.compile(&spec, arch).unwrap_or_else(|e| panic!("dense {variant:?}: {e}"));
            assert!(out.ptx.contains(".entry dense_xb_wb_yb("), "dense {variant:?} for {arch}: entry missing");
        }
    }
}

/// The Rust files under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The entry a `.function(&K.spec(..), NAME)` call at `at` asks for: `(K, name)`, with a `const NAME: &str` resolved to the last one above; `None` for computed names.
fn launched_entry(text: &str, at: usize) -> Option<(String, String)> {
    let rest = &text[at + ".function(&".len()..];
    let kernel = rest[..rest.find(".spec(&[")?].to_string();
    // `spec` takes a slice of defines, so its call ends at the first `]), `.
    let from = rest.find("]), ")? + 4;
    let arg = &rest[from..from + rest[from..].find(')')?];
    if let Some(lit) = arg.strip_prefix('"') {
        return Some((kernel, lit.trim_end_matches('"').to_string()));
    }
    let decl = format!("const {arg}: &str = \"");
    let start = text[..at].rfind(&decl)? + decl.len();
    Some((kernel, text[start..start + text[start..].find('"')?].to_string()))
}

#[test]
fn every_launched_entry_is_defined_by_its_kernel() {
    let mut files = Vec::new();
    rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    let mut checked = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (at, _) in text.match_indices(".function(&") {
            let Some((kernel, entry)) = launched_entry(&text, at) else { continue };
            let Some(k) = KERNELS.iter().find(|k| k.name.eq_ignore_ascii_case(&kernel)) else { continue };
            let entries = tf_cuda::kernels::entry_names(k.source);
            assert!(
                entries.contains(&entry),
                "{}: `{entry}` is not an entry of {}.cu ({entries:?})",
                f.display(),
                k.name
            );
            checked += 1;
        }
    }
    eprintln!("{checked} launches name an entry of their kernel");
    assert!(checked >= 20, "only {checked} launches were found: the scan no longer reads the calls");
}
