//! Verify-window undo on the GPU (issue 26): the ring slots a window overwrites, kept on the device and put back.

use super::lane::{GpuLane, copy};
use super::model::GpuModel;
use super::weights::Buf;
use crate::plan::Armed;
use tf_cuda::Error;

/// A verify window's undo record on the GPU.
pub struct GUndo {
    pub armed: Armed,
    /// bf16 `[layers, rows, head_dim]`: each layer's ring slot of each window row before the window wrote it.
    slots: Buf,
    /// Per KV source: its completed groups before the window.
    groups: Vec<Option<usize>>,
}

impl GpuModel {
    /// Copies the ring slots `armed`'s rows will overwrite and marks the compressors to keep their rows; `None` forgets.
    pub(crate) fn arm_undo(&self, lane: &mut GpuLane, armed: Option<Armed>) -> Result<(), Error> {
        for c in lane.compressed.iter_mut().flatten() {
            c.recent = armed.as_ref().map(|_| None);
        }
        let Some(armed) = armed else {
            lane.undo = None;
            return Ok(());
        };
        let (rows, row) = (armed.tokens.len(), self.cfg().head_dim * 2);
        let mut slots = self.gpu.pool().take((lane.windows.len() * rows * row).max(1))?;
        for (l, ring) in lane.windows.iter().enumerate() {
            for r in 0..rows {
                let slot = (armed.pos0 + r) % self.cfg().window_size;
                copy(self.gpu, ring, slot * row, &mut slots, (l * rows + r) * row, row)?;
            }
        }
        let groups = lane.compressed.iter().map(|c| c.as_ref().map(|c| c.groups)).collect();
        lane.undo = Some(GUndo { armed, slots, groups });
        Ok(())
    }

    /// Puts back the ring slots of the armed window's rows from `keep` on, and cuts each compressed cache to `keep` rows.
    pub(crate) fn rewind_undo(&self, lane: &mut GpuLane, keep: usize) -> Result<Armed, Error> {
        let bad = |what: String| Error::Launch { op: "rewind", what };
        let undo = lane.undo.take().ok_or_else(|| bad("rewind without a verify window".into()))?;
        let (pos0, rows, row) = (undo.armed.pos0, undo.armed.tokens.len(), self.cfg().head_dim * 2);
        if keep > rows {
            return Err(bad(format!("rewind keeps {keep} of a {rows}-row window")));
        }
        let end = pos0 + keep;
        for (l, ring) in lane.windows.iter_mut().enumerate() {
            for r in keep..rows {
                let slot = (pos0 + r) % self.cfg().window_size;
                copy(self.gpu, &undo.slots, (l * rows + r) * row, ring, slot * row, row)?;
            }
        }
        let f32_row = self.cfg().head_dim * 4;
        for (c, before) in lane.compressed.iter_mut().zip(undo.groups) {
            let (Some(c), Some(before)) = (c.as_mut(), before) else { continue };
            let ratio = c.ratio.max(1);
            c.groups = before + end / ratio - pos0 / ratio;
            let recent = c.recent.take().flatten();
            if ratio == 1 {
                continue;
            }
            let (skv, sgate) = recent.ok_or_else(|| bad("a ratio-2 source kept no window rows".into()))?;
            // `skv` starts at the open group before the window, `ratio * (pos0 / ratio)`; the open group at `end` at `ratio * (end / ratio)`.
            let from = ratio * (end / ratio) - ratio * (pos0 / ratio);
            c.open_n = end % ratio;
            copy(self.gpu, &skv, from * f32_row, &mut c.open_kv, 0, c.open_n * f32_row)?;
            copy(self.gpu, &sgate, from * f32_row, &mut c.open_gate, 0, c.open_n * f32_row)?;
        }
        Ok(undo.armed)
    }
}
