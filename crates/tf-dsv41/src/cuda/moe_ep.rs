//! Expert parallel on GPU ranks (issue 25): a rank runs the pairs routed to its experts, staged through the host, and every rank's outputs are gathered.

use super::layer::GMoe;
use super::model::GpuModel;
use super::ops;
use super::weights::{Acts, Buf, Experts4};
use crate::tp::{SharedComm, gather_owned};
use std::ops::Range;
use tf_cuda::Error;

/// This rank's routed experts `parts[rank]` of a layer, and the group the other ranks' outputs come from.
pub struct GEp {
    pub rank: usize,
    pub parts: Vec<Range<usize>>,
    pub comm: SharedComm,
}

impl GpuModel {
    /// The routed experts' f32 `[rows·topk, dim]` outputs: this rank's pairs compacted (one activation row each), run, and all ranks' gathered in pair order.
    pub(crate) fn routed_ep(
        &self,
        m: &GMoe,
        ep: &GEp,
        x: &Buf,
        (ids, wts): (&Buf, &Buf),
        rows: usize,
    ) -> Result<Buf, Error> {
        let (gpu, cfg) = (self.gpu, self.cfg());
        let (dim, inter, pairs) = (cfg.dim, cfg.moe_inter_dim, rows * m.topk);
        let ids_h = gpu.download::<i32>(ids)?;
        let wts_h = gpu.download::<f32>(wts)?;
        let x_h = gpu.download::<u16>(x)?;
        let owner =
            |e: i32| ep.parts.iter().position(|p| p.contains(&(e as usize))).expect("routes pick existing experts");
        let owners: Vec<usize> = ids_h[..pairs].iter().map(|&e| owner(e)).collect();
        let mine: Vec<usize> = (0..pairs).filter(|&p| owners[p] == ep.rank).collect();
        let n = mine.len();
        let mut local = Vec::new();
        if n > 0 {
            let first = ep.parts[ep.rank].start as i32;
            let lid = gpu.upload(&mine.iter().map(|&p| ids_h[p] - first).collect::<Vec<i32>>())?;
            let lw = gpu.upload(&mine.iter().map(|&p| wts_h[p]).collect::<Vec<f32>>())?;
            let row = |p: usize| &x_h[(p / m.topk) * dim..(p / m.topk + 1) * dim];
            let lx = gpu.upload(&mine.iter().flat_map(|&p| row(p).iter().copied()).collect::<Vec<u16>>())?;
            // The CPU's rule (Moe::forward), on the call's rows: a call of at least min_rows rows runs the MXFP4 copies.
            let [w1, w2, w3]: [&Experts4; 3] = match &m.prefill {
                Some((copies, min_rows)) if rows >= *min_rows => [&copies[0], &copies[1], &copies[2]],
                _ => [&m.w1, &m.w2, &m.w3],
            };
            let xq = Acts::new(&lx, n, dim);
            let g = w1.routed(gpu, (&lid, None), &xq, 1, true, n)?;
            let u = w3.routed(gpu, (&lid, None), &xq, 1, true, n)?;
            let mut h = gpu.pool().take(n * inter * 2)?;
            ops::swiglu(gpu, &g.view(), &u.view(), Some(&lw.view()), &mut h.view_mut(), (n, inter), m.limit)?;
            let down = w2.routed(gpu, (&lid, None), &Acts::new(&h, n, inter), 1, false, n)?;
            local = gpu.download::<f32>(&down)?;
            local.truncate(n * dim);
        }
        let all = gather_owned(&ep.comm, &owners, dim, local);
        gpu.upload(&all)
    }
}
