use parking_lot::{Condvar, Mutex, MutexGuard};
use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::op::{self, Contribution, Kind, Op, Payload};
use crate::{Comm, CommError};

/// One rank of a group of threads in this process; the reference communicator for CPU tests.
pub struct InProcessComm {
    rank: usize,
    shared: Arc<Shared>,
    // Not Sync: two threads driving one rank at once would fill its slot twice and break lockstep.
    _not_sync: PhantomData<Cell<()>>,
}

struct Shared {
    world: usize,
    timeout: Option<Duration>,
    state: Mutex<State>,
    changed: Condvar,
}

/// A round is open while `outcome` is None and draining while ranks copy their share out of it.
struct State {
    slots: Vec<Option<Contribution>>,
    arrived: usize,
    outcome: Option<Result<Payload, CommError>>,
    picked: usize,
    broken: Option<CommError>,
    /// Point-to-point messages waiting to be received, at `from * world + to`.
    mail: Vec<VecDeque<Vec<f32>>>,
}

impl InProcessComm {
    /// One communicator per rank, in rank order; waits block forever unless a peer drops.
    pub fn group(world_size: usize) -> Vec<InProcessComm> {
        Self::build(world_size, None)
    }

    /// Like `group`, but a collective that waits longer than `timeout` fails and breaks the group.
    pub fn group_with_timeout(world_size: usize, timeout: Duration) -> Vec<InProcessComm> {
        Self::build(world_size, Some(timeout))
    }

    fn build(world: usize, timeout: Option<Duration>) -> Vec<InProcessComm> {
        let shared = Arc::new(Shared {
            world,
            timeout,
            state: Mutex::new(State {
                slots: (0..world).map(|_| None).collect(),
                arrived: 0,
                outcome: None,
                picked: 0,
                broken: None,
                mail: (0..world * world).map(|_| VecDeque::new()).collect(),
            }),
            changed: Condvar::new(),
        });
        (0..world).map(|rank| InProcessComm { rank, shared: Arc::clone(&shared), _not_sync: PhantomData }).collect()
    }

    /// parking_lot's lock has no poison: a rank that panics under it still breaks the group in Drop, so peers error instead of hanging.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock()
    }

    /// Runs one round: deposit, let the last arrival combine, then copy this rank's share with `take`.
    fn collective(&self, op: Op, data: Payload, take: impl FnOnce(&Payload)) -> Result<(), CommError> {
        self.collective_until(op, data, take, self.shared.timeout)
    }

    fn collective_until(
        &self,
        op: Op,
        data: Payload,
        take: impl FnOnce(&Payload),
        timeout: Option<Duration>,
    ) -> Result<(), CommError> {
        let deadline = timeout.map(|after| (Instant::now() + after, after));
        let mut st = self.lock();
        while st.outcome.is_some() {
            if let Some(err) = &st.broken {
                return Err(err.clone());
            }
            self.wait(&mut st, deadline)?;
        }
        if let Some(err) = &st.broken {
            return Err(err.clone());
        }
        st.slots[self.rank] = Some(Contribution { op, data });
        st.arrived += 1;
        if st.arrived == self.shared.world {
            let parts: Vec<Contribution> = st.slots.iter_mut().filter_map(Option::take).collect();
            st.outcome = Some(op::combine(parts, self.shared.world));
            st.arrived = 0;
            self.shared.changed.notify_all();
        }
        let result = loop {
            // A finished round wins over a break: every contribution arrived, so the result is valid.
            if let Some(outcome) = &st.outcome {
                break match outcome {
                    Ok(payload) => {
                        take(payload);
                        Ok(())
                    }
                    Err(err) => Err(err.clone()),
                };
            }
            if let Some(err) = &st.broken {
                return Err(err.clone());
            }
            self.wait(&mut st, deadline)?;
        };
        st.picked += 1;
        if st.picked == self.shared.world {
            st.outcome = None;
            st.picked = 0;
            self.shared.changed.notify_all();
        }
        result
    }

    fn wait(&self, st: &mut MutexGuard<'_, State>, deadline: Option<(Instant, Duration)>) -> Result<(), CommError> {
        let Some((at, after)) = deadline else {
            self.shared.changed.wait(st);
            return Ok(());
        };
        let now = Instant::now();
        if now >= at {
            let err = CommError::Timeout { after };
            // Our contribution may already sit in a slot, so the round can never be trusted again.
            st.broken.get_or_insert_with(|| err.clone());
            self.shared.changed.notify_all();
            return Err(err);
        }
        self.shared.changed.wait_for(st, at - now);
        Ok(())
    }

    fn peer(&self, peer: usize) -> Result<usize, CommError> {
        op::peer(self.rank, self.shared.world, peer)
    }

    /// Eager: the message waits in the receiver's mailbox, so a send never blocks.
    fn post(&self, buf: &[f32], to: usize) -> Result<(), CommError> {
        let to = self.peer(to)?;
        let mut st = self.lock();
        if let Some(err) = &st.broken {
            return Err(err.clone());
        }
        st.mail[self.rank * self.shared.world + to].push_back(buf.to_vec());
        self.shared.changed.notify_all();
        Ok(())
    }

    fn take(&self, buf: &mut [f32], from: usize) -> Result<(), CommError> {
        let from = self.peer(from)?;
        let deadline = self.shared.timeout.map(|after| (Instant::now() + after, after));
        let mut st = self.lock();
        loop {
            // A message already sent is delivered even if its sender has left since.
            if let Some(msg) = st.mail[from * self.shared.world + self.rank].pop_front() {
                return op::deliver(self.rank, from, &msg, buf);
            }
            if from == self.rank {
                let detail = format!("rank {from} receives from itself, but sent itself nothing");
                return Err(CommError::OpMismatch { detail });
            }
            if let Some(err) = &st.broken {
                return Err(err.clone());
            }
            self.wait(&mut st, deadline)?;
        }
    }
}

impl Drop for InProcessComm {
    fn drop(&mut self) {
        let mut st = self.lock();
        st.broken.get_or_insert(CommError::PeerGone { rank: self.rank });
        self.shared.changed.notify_all();
    }
}

impl fmt::Debug for InProcessComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InProcessComm")
            .field("rank", &self.rank)
            .field("world_size", &self.shared.world)
            .field("timeout", &self.shared.timeout)
            .finish()
    }
}

impl Comm for InProcessComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.shared.world
    }

    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<(), CommError> {
        let op = Op::new(Kind::AllReduceSum, buf.len(), buf.len());
        let data = Payload::floats(buf.to_vec());
        self.collective(op, data, |sum| buf.copy_from_slice(&sum.floats))
    }

    fn all_gather(&self, input: &[f32], output: &mut [f32]) -> Result<(), CommError> {
        let op = Op::new(Kind::AllGather, input.len(), output.len());
        let data = Payload::floats(input.to_vec());
        self.collective(op, data, |all| output.copy_from_slice(&all.floats))
    }

    fn reduce_scatter_sum(&self, input: &[f32], output: &mut [f32]) -> Result<(), CommError> {
        let op = Op::new(Kind::ReduceScatterSum, input.len(), output.len());
        let data = Payload::floats(input.to_vec());
        let start = self.rank * output.len();
        self.collective(op, data, |sum| {
            output.copy_from_slice(&sum.floats[start..start + output.len()]);
        })
    }

    fn broadcast(&self, buf: &mut [f32], root: usize) -> Result<(), CommError> {
        let op = Op::rooted(Kind::Broadcast, buf.len(), root);
        let is_root = self.rank == root;
        let data = Payload::floats(if is_root { buf.to_vec() } else { Vec::new() });
        self.collective(op, data, |from_root| {
            if !is_root {
                buf.copy_from_slice(&from_root.floats);
            }
        })
    }

    fn broadcast_bytes(&self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        // Followers' lengths are free here: a control message's size is only known to the leader.
        let op = Op::rooted(Kind::BroadcastBytes, 0, root);
        let is_root = self.rank == root;
        let data = Payload::bytes(if is_root { buf.clone() } else { Vec::new() });
        self.collective(op, data, |from_root| {
            if !is_root {
                buf.clear();
                buf.extend_from_slice(&from_root.bytes);
            }
        })
    }

    fn broadcast_bytes_idle(&self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        let op = Op::rooted(Kind::BroadcastBytes, 0, root);
        let is_root = self.rank == root;
        let data = Payload::bytes(if is_root { buf.clone() } else { Vec::new() });
        let take = |from_root: &Payload| {
            if !is_root {
                buf.clear();
                buf.extend_from_slice(&from_root.bytes);
            }
        };
        // The follower's wait for the next step has no deadline; the leader's send keeps its own.
        self.collective_until(op, data, take, if is_root { self.shared.timeout } else { None })
    }

    fn barrier(&self) -> Result<(), CommError> {
        self.collective(Op::new(Kind::Barrier, 0, 0), Payload::default(), |_| {})
    }

    fn send(&self, buf: &[f32], to: usize) -> Result<(), CommError> {
        self.post(buf, to)
    }

    fn recv(&self, buf: &mut [f32], from: usize) -> Result<(), CommError> {
        self.take(buf, from)
    }

    fn send_recv(&self, send: &[f32], to: usize, recv: &mut [f32], from: usize) -> Result<(), CommError> {
        self.peer(from)?;
        self.post(send, to)?;
        self.take(recv, from)
    }
}
