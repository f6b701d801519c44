use crate::{Comm, CommError};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::time::Duration;

/// A transport that runs each collective as one round: every rank's contribution in, the combined payload (by [`combine`]) out.
pub(crate) trait Rounds: Send {
    /// This rank, the world size, and the deadline of every wait.
    fn group(&self) -> (usize, usize, Option<Duration>);
    fn round(&self, op: Op, data: Payload, timeout: Option<Duration>) -> Result<Payload, CommError>;
    /// Point to point with other ranks: `send` (if any) goes to `to` while a message is received from `from` (if any); with neither, only checks the group.
    fn p2p(&self, send: Option<(&[f32], usize)>, from: Option<usize>) -> Result<Option<Vec<f32>>, CommError>;
    /// Messages this rank sent itself, which never reach the transport.
    fn loopback(&self) -> &Loopback;
}

/// A rank's messages to itself, in the order sent.
#[derive(Debug, Default)]
pub(crate) struct Loopback(Mutex<VecDeque<Vec<f32>>>);

/// One exchange: messages to itself stay in the loopback, the rest go to the transport's `p2p`.
fn exchange<T: Rounds>(
    t: &T,
    send: Option<(&[f32], usize)>,
    from: Option<usize>,
) -> Result<Option<Vec<f32>>, CommError> {
    let rank = t.group().0;
    let remote = match send {
        Some((buf, to)) if to == rank => {
            t.loopback().0.lock().push_back(buf.to_vec());
            None
        }
        s => s,
    };
    if from != Some(rank) {
        return t.p2p(remote, from);
    }
    t.p2p(remote, None)?;
    let got = t.loopback().0.lock().pop_front();
    let detail = || format!("rank {rank} receives from itself, but sent itself nothing");
    got.map(Some).ok_or_else(|| CommError::OpMismatch { detail: detail() })
}

/// Checks a peer index against the group.
pub(crate) fn peer(rank: usize, world: usize, peer: usize) -> Result<usize, CommError> {
    if peer < world { Ok(peer) } else { Err(CommError::PeerOutOfRange { rank, peer, world }) }
}

/// Copies a received message into `buf`, or names both lengths.
pub(crate) fn deliver(rank: usize, from: usize, msg: &[f32], buf: &mut [f32]) -> Result<(), CommError> {
    if msg.len() != buf.len() {
        let detail = format!("recv: rank {from} sent {} elements, rank {rank} expects {}", msg.len(), buf.len());
        return Err(CommError::LengthMismatch { detail });
    }
    buf.copy_from_slice(msg);
    Ok(())
}

impl<T: Rounds> Comm for T {
    fn rank(&self) -> usize {
        self.group().0
    }

    fn world_size(&self) -> usize {
        self.group().1
    }

    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<(), CommError> {
        let op = Op::new(Kind::AllReduceSum, buf.len(), buf.len());
        let sum = self.round(op, Payload::floats(buf.to_vec()), self.group().2)?;
        buf.copy_from_slice(&sum.floats);
        Ok(())
    }

    fn all_gather(&self, input: &[f32], output: &mut [f32]) -> Result<(), CommError> {
        let op = Op::new(Kind::AllGather, input.len(), output.len());
        let all = self.round(op, Payload::floats(input.to_vec()), self.group().2)?;
        output.copy_from_slice(&all.floats);
        Ok(())
    }

    fn reduce_scatter_sum(&self, input: &[f32], output: &mut [f32]) -> Result<(), CommError> {
        let op = Op::new(Kind::ReduceScatterSum, input.len(), output.len());
        let sum = self.round(op, Payload::floats(input.to_vec()), self.group().2)?;
        let start = self.group().0 * output.len();
        output.copy_from_slice(&sum.floats[start..start + output.len()]);
        Ok(())
    }

    fn broadcast(&self, buf: &mut [f32], root: usize) -> Result<(), CommError> {
        let data = Payload::floats(if self.group().0 == root { buf.to_vec() } else { Vec::new() });
        let got = self.round(Op::rooted(Kind::Broadcast, buf.len(), root), data, self.group().2)?;
        buf.copy_from_slice(&got.floats);
        Ok(())
    }

    fn broadcast_bytes(&self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        let data = Payload::bytes(if self.group().0 == root { buf.clone() } else { Vec::new() });
        *buf = self.round(Op::rooted(Kind::BroadcastBytes, 0, root), data, self.group().2)?.bytes;
        Ok(())
    }

    fn broadcast_bytes_idle(&self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        let leader = self.group().0 == root;
        let data = Payload::bytes(if leader { buf.clone() } else { Vec::new() });
        // Followers wait for the leader's next step without a deadline.
        let timeout = if leader { self.group().2 } else { None };
        *buf = self.round(Op::rooted(Kind::BroadcastBytes, 0, root), data, timeout)?.bytes;
        Ok(())
    }

    fn barrier(&self) -> Result<(), CommError> {
        self.round(Op::new(Kind::Barrier, 0, 0), Payload::default(), self.group().2).map(drop)
    }

    fn send(&self, buf: &[f32], to: usize) -> Result<(), CommError> {
        let (rank, world, _) = self.group();
        exchange(self, Some((buf, peer(rank, world, to)?)), None).map(drop)
    }

    fn recv(&self, buf: &mut [f32], from: usize) -> Result<(), CommError> {
        let (rank, world, _) = self.group();
        let msg = exchange(self, None, Some(peer(rank, world, from)?))?.unwrap_or_default();
        deliver(rank, from, &msg, buf)
    }

    fn send_recv(&self, send: &[f32], to: usize, recv: &mut [f32], from: usize) -> Result<(), CommError> {
        let (rank, world, _) = self.group();
        let (to, from) = (peer(rank, world, to)?, peer(rank, world, from)?);
        let msg = exchange(self, Some((send, to)), Some(from))?.unwrap_or_default();
        deliver(rank, from, &msg, recv)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    AllReduceSum,
    AllGather,
    ReduceScatterSum,
    Broadcast,
    BroadcastBytes,
    Barrier,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::AllReduceSum => "all_reduce_sum",
            Kind::AllGather => "all_gather",
            Kind::ReduceScatterSum => "reduce_scatter_sum",
            Kind::Broadcast => "broadcast",
            Kind::BroadcastBytes => "broadcast_bytes",
            Kind::Barrier => "barrier",
        }
    }
}

/// What one rank asked for; ranks validate against each other so a bad call errors everywhere instead of deadlocking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Op {
    pub kind: Kind,
    pub input: usize,
    pub output: usize,
    pub root: Option<usize>,
}

impl Op {
    pub fn new(kind: Kind, input: usize, output: usize) -> Self {
        Op { kind, input, output, root: None }
    }

    pub fn rooted(kind: Kind, len: usize, root: usize) -> Self {
        Op { kind, input: len, output: len, root: Some(root) }
    }
}

/// Data a rank contributes, or the combined result every rank copies its share from.
#[derive(Debug, Default)]
pub(crate) struct Payload {
    pub floats: Vec<f32>,
    pub bytes: Vec<u8>,
}

impl Payload {
    pub fn floats(floats: Vec<f32>) -> Self {
        Payload { floats, bytes: Vec::new() }
    }

    pub fn bytes(bytes: Vec<u8>) -> Self {
        Payload { floats: Vec::new(), bytes }
    }
}

#[derive(Debug)]
pub(crate) struct Contribution {
    pub op: Op,
    pub data: Payload,
}

/// Validates and combines one round; `parts` is indexed by rank and holds exactly `world` entries.
pub(crate) fn combine(parts: Vec<Contribution>, world: usize) -> Result<Payload, CommError> {
    check(&parts, world)?;
    let first = parts[0].op;
    Ok(match first.kind {
        Kind::AllReduceSum | Kind::ReduceScatterSum => Payload::floats(sum_in_rank_order(parts)),
        Kind::AllGather => {
            let mut all = Vec::with_capacity(first.output);
            for part in &parts {
                all.extend_from_slice(&part.data.floats);
            }
            Payload::floats(all)
        }
        Kind::Broadcast | Kind::BroadcastBytes => {
            let root = first.root.unwrap_or(0);
            parts.into_iter().nth(root).map(|part| part.data).unwrap_or_default()
        }
        Kind::Barrier => Payload::default(),
    })
}

/// Left fold `((x0 + x1) + x2) + ...` per element: f32 addition is not associative, so a fixed order is what makes results bit-identical.
fn sum_in_rank_order(parts: Vec<Contribution>) -> Vec<f32> {
    let mut parts = parts.into_iter();
    let mut acc = parts.next().map(|part| part.data.floats).unwrap_or_default();
    for part in parts {
        for (a, x) in acc.iter_mut().zip(&part.data.floats) {
            *a += *x;
        }
    }
    acc
}

fn check(parts: &[Contribution], world: usize) -> Result<(), CommError> {
    let first = parts[0].op;
    for (rank, part) in parts.iter().enumerate() {
        if part.op.kind != first.kind {
            return Err(CommError::OpMismatch {
                detail: format!("rank 0 called {}, rank {rank} called {}", first.kind.name(), part.op.kind.name()),
            });
        }
    }
    for (rank, part) in parts.iter().enumerate() {
        if let Some(root) = part.op.root
            && root >= world
        {
            return Err(CommError::RootOutOfRange { rank, root, world });
        }
    }
    for (rank, part) in parts.iter().enumerate() {
        if part.op.root != first.root {
            return Err(CommError::OpMismatch {
                detail: format!(
                    "{}: rank 0 names root {:?}, rank {rank} names root {:?}",
                    first.kind.name(),
                    first.root,
                    part.op.root
                ),
            });
        }
        if part.op.input != first.input {
            return Err(CommError::LengthMismatch {
                detail: format!(
                    "{}: rank 0 passes {} elements, rank {rank} passes {}",
                    first.kind.name(),
                    first.input,
                    part.op.input
                ),
            });
        }
        check_output(part.op, rank, world)?;
    }
    Ok(())
}

fn check_output(op: Op, rank: usize, world: usize) -> Result<(), CommError> {
    let (fits, want) = match op.kind {
        Kind::AllGather => (op.input.checked_mul(world) == Some(op.output), "input length times world size"),
        Kind::ReduceScatterSum => {
            (op.output.checked_mul(world) == Some(op.input), "input length divided by world size")
        }
        _ => (op.output == op.input, "the input length"),
    };
    if fits {
        return Ok(());
    }
    Err(CommError::LengthMismatch {
        detail: format!(
            "{}: rank {rank} has input {} and output {}, but output must be {want} ({world})",
            op.kind.name(),
            op.input,
            op.output
        ),
    })
}
