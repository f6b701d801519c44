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
    // The norms write FP8 codes with tf-cuda's act_quant helpers, so they also take its header.
    let quant = std::fs::read_to_string(kernels_dir().join("../../tf-cuda/kernels/fp8_quant.cuh")).unwrap();
    for k in KERNELS {
        let on_disk = std::fs::read_to_string(kernels_dir().join(format!("{}.cu", k.name))).unwrap();
        let header = if k.name == "norm" { common.clone() + &quant } else { common.clone() };
        assert_eq!(
            k.source,
            header + &on_disk,
            "{}: the embedded source is common.cuh (and its headers) then the file",
            k.name
        );
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

#[test]
fn every_launched_entry_is_defined_by_its_kernel() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let checked = tf_cuda::kernels::check_launched_entries(&src, &KERNELS);
    assert!(checked >= 20, "only {checked} launches were found: the scan no longer reads the calls");
}
