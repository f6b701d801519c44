//! FP4 expert linear against dequantize-then-f32-matmul, in one run so the ratio is what counts.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use tf_core::formats::{quant_fp8_pow2, to_bf16};
use tf_core::ops::matmul_nt;
use tf_core::{DType, Tensor, bf16};
use tf_exl3::Fp4Weight;

fn weight(out: usize, inp: usize) -> Fp4Weight {
    let packed: Vec<u8> = (0..out * inp / 2).map(|i| ((i as u32).wrapping_mul(2654435761) >> 24) as u8).collect();
    let scales: Vec<u8> = (0..out * inp / 32).map(|i| 120 + (i % 8) as u8).collect();
    let w = Tensor::from_bytes(DType::I8, &[out, inp / 2], &packed).unwrap();
    let s = Tensor::from_bytes(DType::F8E8M0, &[out, inp / 32], &scales).unwrap();
    Fp4Weight::from_tensors("bench", &w, &s).unwrap()
}

fn dequant_all(w: &Fp4Weight) -> Vec<f32> {
    let mut f = vec![0.0f32; w.out_features() * w.in_features()];
    for (n, row) in f.chunks_exact_mut(w.in_features()).enumerate() {
        w.dequant_row(n, row);
    }
    f
}

/// The f32 path: dequantize both operands, then the blocked f32 matmul.
fn dequant_matmul(w: &Fp4Weight, wf: &[f32], x: &[bf16], rows: usize) -> Vec<bf16> {
    let q = quant_fp8_pow2(x, 32);
    let xd: Vec<f32> = (0..x.len()).map(|i| q.value(i)).collect();
    matmul_nt(&xd, wf, rows, w.out_features(), w.in_features()).into_iter().map(to_bf16).collect()
}

fn bench(c: &mut Criterion) {
    for &(rows, out, inp) in &[(1usize, 2304usize, 2560usize), (32, 2304, 2560)] {
        let w = weight(out, inp);
        let wf = dequant_all(&w);
        let x: Vec<bf16> = (0..rows * inp).map(|i| to_bf16((i % 17) as f32 / 8.0 - 1.0)).collect();
        let mut g = c.benchmark_group(format!("fp4_{rows}x{out}x{inp}"));
        g.throughput(Throughput::Elements((2 * rows * out * inp) as u64));
        g.sample_size(10);
        g.bench_function("fp4_linear", |b| b.iter(|| w.forward(black_box(&x), rows)));
        g.bench_function("f32_matmul_on_predequantized_w", |b| b.iter(|| dequant_matmul(&w, &wf, black_box(&x), rows)));
        g.bench_function("dequant_w_then_f32_matmul", |b| {
            b.iter(|| dequant_matmul(&w, &dequant_all(&w), black_box(&x), rows))
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
