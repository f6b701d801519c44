//! Lockstep (issue 25): rank 0 runs the lane host and broadcasts each call as a frame; every rank runs it and reports.

use super::SharedComm;
use crate::{Error, Model};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use tf_family::Family;

/// One call every rank runs on its copy of a lane.
#[derive(Clone, Debug, Serialize, Deserialize)]
enum Frame {
    NewLane { id: u64 },
    Fork { src: u64, dst: u64 },
    Prefill { id: u64, tokens: Vec<u32>, last: bool },
    Decode { id: u64, tokens: Vec<u32> },
    Verify { id: u64, tokens: Vec<u32> },
    Rewind { id: u64, keep: usize },
    Draft { id: u64, next: u32 },
    Stop,
}

/// A frame and the lanes dropped since the last one.
#[derive(Debug, Serialize, Deserialize)]
struct Msg {
    free: Vec<u64>,
    frame: Frame,
}

type Rows = Option<Vec<Vec<f32>>>;

/// One rank's model: any backend's dsv41 family (the CPU model, a GPU model).
pub trait Rank: Family<Error = Error> {}
impl<F: Family<Error = Error>> Rank for F {}

/// Runs `frame` on one rank's lanes; the logits of prefill, decode and verify. A refused step keeps its lane as the step left it.
fn apply<F: Rank>(model: &F, lanes: &mut HashMap<u64, F::Lane>, frame: &Frame) -> Result<Rows, String> {
    let missing = |id: u64| format!("lockstep: no lane {id} on this rank");
    let (id, st) = match frame {
        Frame::NewLane { id } => (*id, model.new_lane().map_err(|e| e.to_string())?),
        Frame::Fork { src, dst } => {
            (*dst, model.fork(lanes.get(src).ok_or_else(|| missing(*src))?).map_err(|e| e.to_string())?)
        }
        Frame::Stop => return Ok(None),
        Frame::Prefill { id, .. }
        | Frame::Decode { id, .. }
        | Frame::Verify { id, .. }
        | Frame::Rewind { id, .. }
        | Frame::Draft { id, .. } => {
            let st = lanes.get_mut(id).ok_or_else(|| missing(*id))?;
            let out = match frame {
                Frame::Prefill { tokens, last, .. } => model.prefill(st, tokens, *last).map(|l| l.map(|l| vec![l])),
                Frame::Decode { tokens, .. } => model.decode(st, tokens).map(Some),
                Frame::Verify { tokens, .. } => model.verify(st, tokens).map(Some),
                Frame::Rewind { keep, .. } => model.rewind(st, *keep).map(|()| None),
                // Drafts travel as two rows: the tokens (exact in f32) and their confidences.
                Frame::Draft { next, .. } => model
                    .draft(st, *next, usize::MAX)
                    .map(|d| d.map(|d| vec![d.tokens.iter().map(|&t| t as f32).collect(), d.confidence])),
                _ => unreachable!("matched above"),
            };
            return out.map_err(|e| e.to_string());
        }
    };
    lanes.insert(id, st);
    Ok(None)
}

/// `apply`, with a panic (a failed collective inside the forward) turned into this rank's refusal.
fn run<F: Rank>(model: &F, lanes: &mut HashMap<u64, F::Lane>, frame: &Frame) -> Result<Rows, String> {
    catch_unwind(AssertUnwindSafe(|| apply(model, lanes, frame)))
        .unwrap_or_else(|p| Err(p.downcast_ref::<String>().cloned().unwrap_or_else(|| "a rank panicked".into())))
}

/// Every rank's verdict on the frame just run, in rank order.
fn verdicts(comm: &SharedComm, ok: bool) -> Result<Vec<bool>, String> {
    let world = comm.world_size();
    let mut all = vec![0.0f32; world];
    comm.with(|c| c.all_gather(&[f32::from(u8::from(ok))], &mut all)).map_err(|e| e.to_string())?;
    Ok(all.iter().map(|&v| v == 1.0).collect())
}

/// A follower rank: runs the leader's frames until `Stop`; an error means the group is lost (the caller exits 70).
pub fn follow<F: Rank>(model: &F, comm: &SharedComm) -> Result<(), String> {
    let mut lanes = HashMap::new();
    loop {
        let mut bytes = Vec::new();
        comm.with(|c| c.broadcast_bytes_idle(&mut bytes, 0)).map_err(|e| format!("waiting for the leader: {e}"))?;
        let msg: Msg = serde_json::from_slice(&bytes).map_err(|e| format!("a frame that does not parse: {e}"))?;
        for id in &msg.free {
            lanes.remove(id);
        }
        if matches!(msg.frame, Frame::Stop) {
            return Ok(());
        }
        let ok = run(model, &mut lanes, &msg.frame).is_ok();
        verdicts(comm, ok)?;
    }
}

/// Rank 0 of a tensor-parallel group as one model family: each call runs on every rank in lockstep.
pub struct Leader<F: Rank = Model> {
    pub model: F,
    comm: SharedComm,
    lanes: Mutex<HashMap<u64, F::Lane>>,
    next_id: Mutex<u64>,
    freed: Arc<Mutex<Vec<u64>>>,
    lost: Mutex<Option<String>>,
    /// Exit the process with code 70 when lockstep is lost (the server; tests look at the error instead).
    pub exit_on_lost: bool,
}

/// A lane of the leader: its id on every rank; dropping it frees the followers' copies with the next frame.
pub struct TpLane {
    pub id: u64,
    freed: Arc<Mutex<Vec<u64>>>,
}

impl Drop for TpLane {
    fn drop(&mut self) {
        self.freed.lock().push(self.id);
    }
}

impl<F: Rank> Leader<F> {
    pub fn new(model: F, comm: SharedComm) -> Leader<F> {
        Leader {
            model,
            comm,
            lanes: Mutex::new(HashMap::new()),
            next_id: Mutex::new(0),
            freed: Arc::default(),
            lost: Mutex::new(None),
            exit_on_lost: false,
        }
    }

    fn lose(&self, why: String) -> Error {
        tracing::error!(reason = %why, "lockstep_lost");
        if self.exit_on_lost {
            std::process::exit(70);
        }
        *self.lost.lock() = Some(why.clone());
        Error::LockstepLost(why)
    }

    /// Broadcasts `frame`, runs it here, and collects every rank's verdict: all ok, all refused (one request fails), or lost.
    fn call(&self, frame: Frame) -> Result<Rows, Error> {
        if let Some(why) = self.lost.lock().clone() {
            return Err(Error::LockstepLost(why));
        }
        let mut free: Vec<u64> = std::mem::take(&mut *self.freed.lock());
        let mut lanes = self.lanes.lock();
        for id in &free {
            lanes.remove(id);
        }
        let msg = Msg { free: std::mem::take(&mut free), frame };
        let mut bytes = serde_json::to_vec(&msg).expect("frames serialize");
        if let Err(e) = self.comm.with(|c| c.broadcast_bytes(&mut bytes, 0)) {
            return Err(self.lose(format!("sending a frame: {e}")));
        }
        let local = run(&self.model, &mut lanes, &msg.frame);
        let all = verdicts(&self.comm, local.is_ok()).map_err(|e| self.lose(format!("collecting verdicts: {e}")))?;
        match local {
            Ok(rows) if all.iter().all(|&v| v) => Ok(rows),
            Err(e) if all.iter().all(|&v| !v) => Err(Error::Refused(e)),
            _ => Err(self.lose(format!("ranks disagree on a frame: {all:?}"))),
        }
    }

    pub(crate) fn new_lane(&self) -> Result<TpLane, Error> {
        let id = self.new_id();
        self.call(Frame::NewLane { id })?;
        Ok(TpLane { id, freed: self.freed.clone() })
    }

    pub(crate) fn fork(&self, src: &TpLane) -> Result<TpLane, Error> {
        let dst = self.new_id();
        self.call(Frame::Fork { src: src.id, dst })?;
        Ok(TpLane { id: dst, freed: self.freed.clone() })
    }

    fn new_id(&self) -> u64 {
        let mut n = self.next_id.lock();
        *n += 1;
        *n
    }

    pub(crate) fn prefill(&self, lane: &TpLane, tokens: &[u32], last: bool) -> Result<Option<Vec<f32>>, Error> {
        let rows = self.call(Frame::Prefill { id: lane.id, tokens: tokens.to_vec(), last })?;
        Ok(rows.and_then(|mut r| r.pop()))
    }

    pub(crate) fn decode(&self, lane: &TpLane, tokens: &[u32], verify: bool) -> Result<Vec<Vec<f32>>, Error> {
        let (id, tokens) = (lane.id, tokens.to_vec());
        let frame = if verify { Frame::Verify { id, tokens } } else { Frame::Decode { id, tokens } };
        Ok(self.call(frame)?.unwrap_or_default())
    }

    pub(crate) fn rewind(&self, lane: &TpLane, keep: usize) -> Result<(), Error> {
        self.call(Frame::Rewind { id: lane.id, keep }).map(drop)
    }

    /// Drafts on every rank: the head and Markov head may be split by vocabulary, and the DSpark stages read rings every rank fills alike.
    pub(crate) fn draft(&self, lane: &TpLane, next: u32) -> Result<Option<tf_family::Draft>, Error> {
        let Some(rows) = self.call(Frame::Draft { id: lane.id, next })? else { return Ok(None) };
        let [tokens, confidence]: [Vec<f32>; 2] =
            rows.try_into().map_err(|_| Error::Refused("lockstep: a draft frame returned no drafts".into()))?;
        Ok(Some(tf_family::Draft { tokens: tokens.iter().map(|&t| t as u32).collect(), confidence }))
    }
}

impl<F: Rank> Drop for Leader<F> {
    fn drop(&mut self) {
        if self.lost.lock().is_none() {
            let mut bytes =
                serde_json::to_vec(&Msg { free: Vec::new(), frame: Frame::Stop }).expect("frames serialize");
            let _ = self.comm.with(|c| c.broadcast_bytes(&mut bytes, 0));
        }
    }
}
