//! Every tf-exl3 kernel compiles for every target with NVRTC (no GPU needed), in every specialization the launchers use.

use std::path::{Path, PathBuf};
use tf_cuda::{Arch, KernelSpec, Nvrtc};
use tf_exl3::cuda::{EXL3, EXL3_PROMPT, FP4_GEMV, FP4_MAX_ROWS, Fp4Plan, KERNELS, with_prelude};

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
    let listed: Vec<String> = KERNELS.iter().map(|k| k.name.to_string()).collect();
    assert_eq!(files, listed, "tf_exl3::cuda::KERNELS must list every kernels/*.cu, in name order");
    for k in KERNELS {
        let on_disk = std::fs::read_to_string(kernels_dir().join(format!("{}.cu", k.name))).unwrap();
        assert_eq!(k.source, with_prelude(k.name, &on_disk), "{}: the embedded source is the file", k.name);
    }
}

#[test]
fn every_kernel_compiles_for_every_arch() {
    let nvrtc = nvrtc();
    let mut files: Vec<PathBuf> = std::fs::read_dir(kernels_dir()).unwrap().map(|e| e.unwrap().path()).collect();
    files.retain(|p| p.extension().is_some_and(|e| e == "cu"));
    files.sort();
    assert!(!files.is_empty(), "no kernels/*.cu");
    for file in files {
        let name = file.file_stem().unwrap().to_str().unwrap();
        let source = with_prelude(name, &std::fs::read_to_string(&file).unwrap());
        let names = tf_cuda::kernels::entry_names(&source);
        assert!(!names.is_empty(), "{name}.cu has no extern \"C\" __global__ entry");
        let spec = KernelSpec::new(name, &source, vec![]);
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

/// The (rows, rows per thread) specializations the launchers ask for, over the K values of DeepSeek-V4.1 and a fallback.
fn launched_specs() -> Vec<(usize, usize)> {
    let mut specs: Vec<(usize, usize)> = (1..=FP4_MAX_ROWS)
        .flat_map(|rows| [5120, 2304, 160].map(|k| Fp4Plan::new(rows, k)))
        .map(|p| (p.rows, p.rows_per_thread))
        .collect();
    specs.sort();
    specs.dedup();
    specs
}

#[test]
fn fp4_gemv_specializations_compile_without_local_memory() {
    let nvrtc = nvrtc();
    for (rows, rt) in launched_specs() {
        let (rows_s, rt_s) = (rows.to_string(), rt.to_string());
        let spec = FP4_GEMV.spec(&[("FP4_ROWS", &rows_s), ("FP4_RT", &rt_s)]);
        for arch in Arch::ALL {
            let out = nvrtc.compile(&spec, arch).unwrap_or_else(|e| panic!("rows {rows}, rt {rt}: {e}"));
            // Register arrays demoted to local memory would show as .local in the PTX and cost a memory round trip.
            assert!(!out.ptx.contains(".local"), "fp4_gemv rows {rows}, rt {rt} for {arch}: local memory");
            assert!(out.ptx.contains(".entry fp4_gemv("), "rows {rows}: no fp4_gemv");
            assert_eq!(out.ptx.contains(".entry fp4_gemv_routed("), rows == 1, "the routed entry is the one-row build");
            assert!(
                out.ptx.contains(".entry fp4_gemv_grouped(") && out.ptx.contains(".entry fp4_group("),
                "rows {rows}: no grouped entries"
            );
        }
    }
}

#[test]
fn bad_specializations_fail_with_their_reason() {
    let nvrtc = nvrtc();
    for (defines, reason) in [
        (vec![("FP4_ROWS", "9")], "1..8 activation rows"),
        (vec![("FP4_ROWS", "8"), ("FP4_RT", "8")], "1..32/FP4_ROWS weight rows"),
        (vec![("FP4_MAX_THREADS", "100")], "a multiple of 32"),
    ] {
        let err = nvrtc.compile(&FP4_GEMV.spec(&defines), Arch::Sm90a).unwrap_err();
        assert!(err.to_string().contains(reason), "{defines:?}: {err}");
    }
}

#[test]
fn exl3_specializations_compile_for_every_k_and_codebook() {
    let nvrtc = nvrtc();
    let specs = (1..=8).map(|k| (k, 2)).chain([(3, 0), (3, 1)]);
    for (k, cb) in specs {
        let (k_s, cb_s) = (k.to_string(), cb.to_string());
        // One compile per source and specialization, every entry the launchers take from it checked in its PTX.
        let entries = [
            (EXL3, &["exl3_gemv_exact", "exl3_gemv_mma", "exl3_mul1_bytedot"][..]),
            (EXL3_PROMPT, &["exl3_recon"][..]),
        ];
        for (src, names) in entries {
            let out = nvrtc.compile(&src.spec(&[("EXL3_K", &k_s), ("EXL3_CB", &cb_s)]), Arch::Sm90a);
            let out = out.unwrap_or_else(|e| panic!("{} K={k} cb={cb}: {e}", src.name));
            for entry in names {
                assert!(out.ptx.contains(&format!(".entry {entry}(")), "{} K={k} cb={cb}: no {entry}", src.name);
            }
        }
    }
}

#[test]
fn every_launched_entry_is_defined_by_its_kernel() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let checked = tf_cuda::kernels::check_launched_entries(&src, &KERNELS);
    assert!(checked >= 6, "only {checked} launches were found: the scan no longer reads the calls");
}
