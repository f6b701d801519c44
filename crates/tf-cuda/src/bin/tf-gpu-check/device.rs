//! The device itself: what it is, and its device-to-device copy bandwidth (the ceiling later kernels are measured against).

use crate::report::{Report, median};
use serde_json::json;
use tf_cuda::error::DriverResultExt;
use tf_cuda::{Error, Gpu, PoolBuf};

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
    let src = gpu.pool().take(COPY_BYTES)?;
    let mut dst = gpu.pool().take(COPY_BYTES)?;
    let copy = |g: &Gpu, dst: &mut PoolBuf<'_>| {
        g.stream().memcpy_dtod(&src.view(), &mut dst.view_mut()).doing(|| format!("copying {COPY_BYTES} bytes on GPU"))
    };
    for _ in 0..COPY_WARMUP {
        copy(gpu, &mut dst)?;
    }
    let mut ms = Vec::with_capacity(COPY_REPS);
    for _ in 0..COPY_REPS {
        ms.push(gpu.time_ms(|g| copy(g, &mut dst))?);
    }
    drop((src, dst));
    gpu.pool().release_free();
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

/// Bytes a timed kernel's inputs are spread over (several times the H200's 60 MB L2), so each run reads DRAM.
const ROTATE_BYTES: usize = 512 << 20;

/// How many copies of `bytes` of inputs exceed [`ROTATE_BYTES`] (at least 2, at most 512).
pub fn copies_for(bytes: usize) -> usize {
    ROTATE_BYTES.div_ceil(bytes.max(1)).clamp(2, 512)
}

/// `copies` device copies of `src` (copied on the GPU), so timed runs can rotate through them.
pub fn replicate<'g>(gpu: &'g Gpu, src: &PoolBuf<'g>, copies: usize) -> Result<Vec<PoolBuf<'g>>, Error> {
    (0..copies)
        .map(|_| {
            let mut dst = gpu.pool().take(src.len())?;
            gpu.stream().memcpy_dtod(&src.view(), &mut dst.view_mut()).doing(|| "replicating a timing input".into())?;
            Ok(dst)
        })
        .collect()
}

/// Median ms per `f(gpu, i)`, replayed from one graph over all copies: no host launch cost, and L2 stays cold.
pub fn cold_median_ms(
    gpu: &Gpu,
    copies: usize,
    reps: usize,
    mut f: impl FnMut(&Gpu, usize) -> Result<(), Error>,
) -> Result<f32, Error> {
    for i in 0..copies {
        f(gpu, i)?;
    }
    let graph = gpu.capture(|g| (0..copies).try_for_each(|i| f(g, i)))?;
    let replay = |_: &Gpu| graph.launch().doing(|| "replaying a timing graph".into());
    gpu.time_ms(replay)?;
    let mut ms = Vec::with_capacity(reps);
    for _ in 0..reps.clamp(3, 20) {
        ms.push(gpu.time_ms(replay)? / copies as f32);
    }
    Ok(median(&ms))
}
