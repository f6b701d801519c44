//! Every kernel compiles for every target with NVRTC (no GPU needed), and compiled modules are cached on disk.

use std::path::{Path, PathBuf};
use tf_cuda::{Arch, Error, KernelSpec, Nvrtc, kernels};

fn kernels_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels")
}

/// Fails, never skips, without NVRTC: a kernel that does not compile must fail CI.
fn nvrtc() -> &'static Nvrtc {
    Nvrtc::load_pinned().unwrap_or_else(|e| panic!("{e}\n{}", tf_cuda::kernels::INSTALL_HINT))
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn every_kernel_file_is_listed() {
    let files = tf_cuda::kernels::cu_names(&kernels_dir()).unwrap();
    let listed: Vec<String> = kernels::ALL.iter().map(|k| k.name.to_string()).collect();
    assert_eq!(files, listed, "tf_cuda::kernels::ALL must list every kernels/*.cu, in name order");
}

#[test]
fn every_kernel_compiles_for_every_arch() {
    let nvrtc = nvrtc();
    assert!(!kernels::ALL.is_empty(), "no kernels listed");
    // The embedded sources, as launched: a file may start with a shared header (act_quant.cu after fp8_quant.cuh).
    for k in kernels::ALL {
        let (name, source) = (k.name, k.source);
        let names = tf_cuda::kernels::entry_names(source);
        assert!(!names.is_empty(), "{name}.cu has no extern \"C\" __global__ entry");
        let spec = KernelSpec::new(name, source, vec![]);
        for arch in Arch::ALL {
            let out = nvrtc.compile(&spec, arch).unwrap_or_else(|e| panic!("{e}"));
            assert!(out.cubin.starts_with(b"\x7fELF"), "{name} for {arch}: not a cubin");
            for entry in &names {
                assert!(out.ptx.contains(&format!(".entry {entry}(")), "{name} for {arch}: no `{entry}` in the PTX");
                assert!(contains(&out.cubin, entry), "{name} for {arch}: no `{entry}` in the cubin");
            }
        }
    }
}

#[test]
fn specializations_compile() {
    let nvrtc = nvrtc();
    for threads in ["32", "128", "1024"] {
        let spec = kernels::RMSNORM.spec(&[("RMSNORM_THREADS", threads)]);
        nvrtc.compile(&spec, Arch::Sm90a).unwrap_or_else(|e| panic!("RMSNORM_THREADS={threads}: {e}"));
    }
    let err = nvrtc.compile(&kernels::RMSNORM.spec(&[("RMSNORM_THREADS", "100")]), Arch::Sm90a).unwrap_err();
    assert!(err.to_string().contains("a multiple of 32"), "the static_assert's message reaches the error: {err}");
}

#[test]
fn compile_errors_name_the_kernel_and_carry_the_log() {
    let spec = KernelSpec::new("broken", "extern \"C\" __global__ void k() { undeclared(); }", vec![]);
    let err = nvrtc().compile(&spec, Arch::Sm121a).unwrap_err();
    assert!(matches!(err, Error::Compile { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("`broken`") && text.contains("sm_121a"), "{text}");
    assert!(text.contains("broken.cu(1)") && text.contains("undeclared"), "NVRTC's log: {text}");
}

#[test]
fn disk_cache_reuses_and_repairs_modules() {
    let nvrtc = nvrtc();
    let dir = tempfile::tempdir().unwrap();
    let spec = kernels::RMSNORM.spec(&[]);
    let first = nvrtc.cubin_cached(dir.path(), &spec, Arch::Sm90a).unwrap();
    assert!(!first.hit && first.path.is_file());
    let again = nvrtc.cubin_cached(dir.path(), &spec, Arch::Sm90a).unwrap();
    assert!(again.hit && again.cubin == first.cubin);
    let other = nvrtc.cubin_cached(dir.path(), &spec, Arch::Sm121a).unwrap();
    assert!(!other.hit && other.path != first.path);
    std::fs::write(&first.path, b"truncated").unwrap();
    let repaired = nvrtc.cubin_cached(dir.path(), &spec, Arch::Sm90a).unwrap();
    assert!(!repaired.hit && std::fs::read(&first.path).unwrap() == first.cubin, "a bad entry is recompiled");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "no temporary files left: {names:?}");
}

#[test]
fn fp8_gemv_specializations_compile_without_local_memory() {
    let nvrtc = nvrtc();
    let variants = (1..=8).map(|r| (r, "0", "0")).chain([(8, "1", "0"), (8, "0", "1"), (3, "1", "1")]);
    for (rows, decode, f32_scales) in variants {
        let rows = rows.to_string();
        let spec =
            kernels::FP8_GEMV.spec(&[("FP8_ROWS", &rows), ("FP8_DECODE", decode), ("FP8_WSCALE_F32", f32_scales)]);
        let out = nvrtc.compile(&spec, Arch::Sm90a).unwrap_or_else(|e| panic!("{e}"));
        // Register arrays demoted to local memory would show as .local in the PTX and cost a memory round trip.
        assert!(!out.ptx.contains(".local"), "fp8_gemv rows={rows} decode={decode} f32={f32_scales}: local memory");
    }
    let err = nvrtc.compile(&kernels::FP8_GEMV.spec(&[("FP8_ROWS", "9")]), Arch::Sm90a).unwrap_err();
    assert!(err.to_string().contains("1..8 activation rows"), "{err}");
}

#[test]
fn fp8_gemm_compiles_without_local_memory() {
    let nvrtc = nvrtc();
    for f32_scales in ["0", "1"] {
        let spec = kernels::FP8_GEMM.spec(&[("FP8_WSCALE_F32", f32_scales)]);
        for arch in Arch::ALL {
            let out = nvrtc.compile(&spec, arch).unwrap_or_else(|e| panic!("{e}"));
            assert!(!out.ptx.contains(".local"), "fp8_gemm f32 scales {f32_scales} for {arch}: local memory");
            assert!(out.ptx.contains(".entry fp8_gemm("), "no fp8_gemm entry");
        }
    }
}

#[test]
fn fp8_gemv_split_specializations_compile_without_local_memory() {
    let nvrtc = nvrtc();
    // Four outputs per warp only for 1-2 rows: at 4+ rows ptxas needs 255 registers and spills (hoisted activations).
    let split = [("1", "4"), ("1", "8"), ("2", "2")];
    let rows = ["1", "4", "8"];
    let mut variants: Vec<_> = split.iter().flat_map(|&(o, u)| rows.map(|r| (r, o, u, "0", "0"))).collect();
    // Plus the other decodes and scales, as tf-gpu-check checks them.
    variants.extend([("1", "4", "1", "0", "0"), ("2", "4", "1", "1", "1"), ("3", "2", "2", "1", "1")]);
    for (rows, outs, unroll, decode, f32_scales) in variants {
        let defines = [
            ("FP8_ROWS", rows),
            ("FP8S_OUTS", outs),
            ("FP8S_UNROLL", unroll),
            ("FP8_DECODE", decode),
            ("FP8_WSCALE_F32", f32_scales),
        ];
        let out = nvrtc.compile(&kernels::FP8_GEMV.spec(&defines), Arch::Sm90a).unwrap_or_else(|e| panic!("{e}"));
        if std::env::var_os("TF_PTXAS_LOG").is_some() {
            println!("rows {rows} outs {outs} unroll {unroll} decode {decode} f32 {f32_scales}: {}", out.log.trim());
        }
        assert!(!out.ptx.contains(".local"), "fp8_gemv_split {defines:?}: local memory");
    }
    let err =
        nvrtc.compile(&kernels::FP8_GEMV.spec(&[("FP8_ROWS", "8"), ("FP8S_OUTS", "5")]), Arch::Sm90a).unwrap_err();
    assert!(err.to_string().contains("one summing lane per (output, row)"), "{err}");
}

#[test]
fn every_launched_entry_is_defined_by_its_kernel() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let checked = kernels::check_launched_entries(&src, &kernels::ALL);
    assert!(checked >= 4, "only {checked} launches were found: the scan no longer reads the calls");
}
