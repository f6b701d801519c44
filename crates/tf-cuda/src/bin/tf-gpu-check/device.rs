//! The device itself: what it is, and its device-to-device copy bandwidth (the ceiling later kernels are measured against).

use serde_json::json;
use tf_cuda::report::Report;
use tf_cuda::timing::{self, median};
use tf_cuda::{Error, Gpu};

/// Bytes copied per timed copy: large enough that launch and tail effects vanish.
const COPY_BYTES: usize = 4 << 30;
const COPY_WARMUP: usize = 3;
const COPY_REPS: usize = 20;

/// The kernel module's version (e.g. `580.95.05`) from `/proc/driver/nvidia/version`, which the driver API does not give.
fn kernel_driver_version() -> String {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").unwrap_or_default();
    let first = text.lines().next().unwrap_or("");
    let version =
        first.split_whitespace().find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'));
    version.unwrap_or("unknown").to_string()
}

/// Prints and records name, capability, driver, memory, SMs and the NVRTC in use.
pub fn describe(gpu: &Gpu, report: &mut Report) -> Result<(), Error> {
    let i = gpu.info()?;
    let driver = format!("{} (CUDA {}.{})", kernel_driver_version(), i.driver_version.0, i.driver_version.1);
    let nvrtc = format!("{}.{} ({})", i.nvrtc_version.0, i.nvrtc_version.1, i.nvrtc_library.display());
    println!("device {}: {}", i.ordinal, i.name);
    println!("  compute capability {}.{} -> kernels for {}", i.capability.0, i.capability.1, i.arch);
    println!("  driver {driver}, {} SMs, {:.1} GiB", i.sm_count, i.total_mem as f64 / (1u64 << 30) as f64);
    println!("  NVRTC {nvrtc}");
    report.set(
        "device",
        json!({
            "ordinal": i.ordinal, "name": i.name, "capability": format!("{}.{}", i.capability.0, i.capability.1),
            "arch": i.arch.to_string(), "driver": driver, "sm_count": i.sm_count, "total_mem_bytes": i.total_mem,
            "nvrtc": nvrtc,
        }),
    );
    let case = format!("{} cc {}.{}", i.name, i.capability.0, i.capability.1);
    report.row("device", case, format!("driver {driver}, {} SMs, target {}", i.sm_count, i.arch), true);
    Ok(())
}

/// Median GB/s (bytes read + written, 1e9) of 4 GiB device-to-device copies, timed by events.
pub fn copy_bandwidth(gpu: &Gpu, report: &mut Report) -> Result<f64, Error> {
    let ms = timing::copy_ms(gpu, COPY_BYTES, COPY_WARMUP, COPY_REPS)?;
    let gbps = |t: f32| 2.0 * COPY_BYTES as f64 / (f64::from(t) * 1e-3) / 1e9;
    let (med, best, worst) =
        (median(&ms), ms.iter().copied().fold(f32::MAX, f32::min), ms.iter().copied().fold(0.0, f32::max));
    let bw = gbps(med);
    report.set(
        "copy_bandwidth",
        json!({
            "bytes_per_copy": COPY_BYTES, "counted_bytes": 2 * COPY_BYTES, "reps": COPY_REPS,
            "median_ms": med, "min_ms": best, "max_ms": worst, "median_gbps": bw, "best_gbps": gbps(best),
        }),
    );
    let ok = bw.is_finite() && bw > 0.0;
    let result = format!("{bw:.0} GB/s median (best {:.0}, worst {:.0}) read+write", gbps(best), gbps(worst));
    report.row("copy bandwidth", format!("4 GiB d2d ×{COPY_REPS}"), result, ok);
    Ok(bw)
}

pub use timing::{cold_median_ms, copies_for, replicate};
