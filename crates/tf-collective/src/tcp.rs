//! A group of processes over TCP in a ring: every collective passes each rank's contribution once around, then combines locally.

use crate::CommError;
use crate::op::{self, Contribution, Kind, Loopback, Op, Payload, Rounds};
use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One rank of a TCP ring: it sends to rank `rank + 1` and hears from rank `rank - 1`; point-to-point messages take a link of their own to each peer.
pub struct TcpComm {
    rank: usize,
    world: usize,
    timeout: Option<Duration>,
    ring: Mutex<Option<Ring>>,
    broken: Mutex<Option<CommError>>,
    links: Vec<Option<Link>>,
    own: Loopback,
}

/// Both directions of one peer's point-to-point connection, each locked on its own so a send and a receive overlap.
struct Link {
    out: Mutex<BufWriter<TcpStream>>,
    inp: Mutex<BufReader<TcpStream>>,
}

struct Ring {
    next: BufWriter<TcpStream>,
    prev: BufReader<TcpStream>,
}

/// A wire or setup failure, as the group's error.
fn gone(rank: usize) -> CommError {
    CommError::PeerGone { rank }
}

impl TcpComm {
    /// Joins a group: rank 0 listens on `leader`, the others reach it there; every collective then waits at most `timeout`.
    pub fn join(
        rank: usize,
        world: usize,
        leader: impl ToSocketAddrs,
        timeout: Option<Duration>,
    ) -> std::io::Result<TcpComm> {
        let comm = |ring, links| TcpComm {
            rank,
            world,
            timeout,
            ring: Mutex::new(ring),
            broken: Mutex::new(None),
            links,
            own: Loopback::default(),
        };
        if world <= 1 {
            return Ok(comm(None, Vec::new()));
        }
        let leader = leader.to_socket_addrs()?.next().ok_or(ErrorKind::AddrNotAvailable)?;
        // Ranks start minutes apart (each loads its model): joining waits longer than any collective.
        let setup = Duration::from_secs(600).max(timeout.unwrap_or_default());
        let table = if rank == 0 { lead(world, leader, setup)? } else { enrol(rank, leader, setup)? };
        let (mine, addrs) = (table.listener, table.addrs);
        // Connect forward and accept from behind at once: every rank does both, so no order can deadlock.
        let accept = std::thread::spawn(move || accept_peers(mine, rank, world, setup));
        let next = connect(addrs[(rank + 1) % world], setup)?;
        hello(&next, RING, rank)?;
        let mut peers: Vec<Option<TcpStream>> = (0..world).map(|_| None).collect();
        // Point-to-point links: each rank connects to every higher rank and accepts the lower ones.
        for (q, &at) in addrs.iter().enumerate().skip(rank + 1) {
            let s = connect(at, setup)?;
            hello(&s, P2P, rank)?;
            peers[q] = Some(s);
        }
        let (prev, lower) = accept.join().map_err(|_| std::io::Error::other("accepting the ring"))??;
        for (q, s) in lower {
            peers[q] = Some(s);
        }
        let mut links = Vec::with_capacity(world);
        for p in peers {
            links.push(match p {
                Some(s) => {
                    s.set_nodelay(true)?;
                    let inp = Mutex::new(BufReader::new(s.try_clone()?));
                    Some(Link { out: Mutex::new(BufWriter::new(s)), inp })
                }
                None => None,
            });
        }
        for s in [&next, &prev] {
            s.set_nodelay(true)?;
        }
        Ok(comm(Some(Ring { next: BufWriter::new(next), prev: BufReader::new(prev) }), links))
    }

    /// One point-to-point exchange: the send runs on its own thread while this one receives.
    fn exchange(&self, send: Option<(&[f32], usize)>, from: Option<usize>) -> Result<Option<Vec<f32>>, CommError> {
        if let Some(e) = self.broken.lock().expect("not poisoned").clone() {
            return Err(e);
        }
        let result = std::thread::scope(|sc| {
            let sending = send.map(|(buf, to)| sc.spawn(move || self.write_to(to, buf)));
            let got = from.map(|f| self.read_from(f)).transpose();
            let sent = sending.map_or(Ok(()), |h| h.join().unwrap_or(Err(gone(self.rank))));
            sent.and(got)
        });
        if let Err(e) = &result {
            // A wire error leaves a link mid-message: no later message can be trusted.
            *self.broken.lock().expect("not poisoned") = Some(e.clone());
        }
        result
    }

    fn link(&self, peer: usize) -> &Link {
        self.links[peer].as_ref().expect("every other rank has a link")
    }

    fn write_to(&self, to: usize, buf: &[f32]) -> Result<(), CommError> {
        let mut w = self.link(to).out.lock().expect("not poisoned");
        w.get_ref().set_write_timeout(self.timeout).map_err(|_| gone(to))?;
        let msg: Vec<u8> = buf.iter().flat_map(|f| f.to_le_bytes()).collect();
        send(&mut w, &msg).map_err(|e| match e {
            CommError::PeerGone { .. } => gone(to),
            e => e,
        })
    }

    fn read_from(&self, from: usize) -> Result<Vec<f32>, CommError> {
        let mut r = self.link(from).inp.lock().expect("not poisoned");
        r.get_ref().set_read_timeout(self.timeout).map_err(|_| gone(from))?;
        let msg = recv(&mut r, self.timeout).map_err(|e| match e {
            CommError::PeerGone { .. } => gone(from),
            e => e,
        })?;
        Ok(msg.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
    }

    /// Runs one collective: every rank's contribution goes once around the ring; each rank combines all of them.
    fn collective(&self, op: Op, data: Payload, timeout: Option<Duration>) -> Result<Payload, CommError> {
        if let Some(e) = self.broken.lock().expect("not poisoned").clone() {
            return Err(e);
        }
        let mut guard = self.ring.lock().expect("not poisoned");
        let Some(ring) = guard.as_mut() else {
            return op::combine(vec![Contribution { op, data }], 1);
        };
        let mut parts: Vec<Option<Vec<u8>>> = vec![None; self.world];
        let mut carry = encode(&Contribution { op, data });
        parts[self.rank] = Some(carry.clone());
        let result = (|| {
            for step in 1..self.world {
                ring.prev.get_ref().set_read_timeout(timeout).map_err(|_| gone(self.rank))?;
                let got = std::thread::scope(|s| {
                    let send = s.spawn(|| send(&mut ring.next, &carry));
                    let got = recv(&mut ring.prev, timeout);
                    send.join().unwrap_or(Err(gone(self.rank))).and(got)
                });
                carry = got.map_err(|e| match e {
                    CommError::PeerGone { .. } => gone((self.rank + self.world - step) % self.world),
                    e => e,
                })?;
                parts[(self.rank + self.world - step) % self.world] = Some(carry.clone());
            }
            let parts = parts.into_iter().map(|p| decode(&p.expect("every rank arrived"))).collect::<Result<_, _>>()?;
            op::combine(parts, self.world)
        })();
        if let Err(e) = &result
            && !matches!(
                e,
                CommError::OpMismatch { .. } | CommError::LengthMismatch { .. } | CommError::RootOutOfRange { .. }
            )
        {
            // A wire error leaves the ring mid-message: no later collective can be trusted.
            *self.broken.lock().expect("not poisoned") = Some(e.clone());
        }
        result
    }
}

/// Rank 0's side of the setup: collects every rank's ring address and sends the table back.
fn lead(world: usize, at: SocketAddr, setup: Duration) -> std::io::Result<Table> {
    let boot = TcpListener::bind(at)?;
    let listener = TcpListener::bind(SocketAddr::new(at.ip(), 0))?;
    let mut addrs = vec![listener.local_addr()?; world];
    let mut peers = Vec::new();
    let until = Instant::now() + setup;
    boot.set_nonblocking(true)?;
    while peers.len() < world - 1 {
        match boot.accept() {
            Ok((mut s, _)) => {
                s.set_nonblocking(false)?;
                let (rank, addr) = read_hello(&mut s)?;
                if rank == 0 || rank >= world {
                    return Err(std::io::Error::other(format!("a peer calls itself rank {rank} of {world}")));
                }
                addrs[rank] = addr;
                peers.push(s);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => return Err(e),
        }
    }
    let table: Vec<u8> = addrs.iter().flat_map(|a| format!("{a}\n").into_bytes()).collect();
    for mut p in peers {
        p.write_all(&(table.len() as u64).to_le_bytes())?;
        p.write_all(&table)?;
    }
    Ok(Table { listener, addrs })
}

/// Another rank's side of the setup: sends its ring address to rank 0 and reads back the table.
fn enrol(rank: usize, leader: SocketAddr, setup: Duration) -> std::io::Result<Table> {
    let mut s = connect(leader, setup)?;
    // The ring listener takes the address this host reaches rank 0 from, so rank 0's peers can reach it too.
    let listener = TcpListener::bind(SocketAddr::new(s.local_addr()?.ip(), 0))?;
    let hello = format!("{rank} {}\n", listener.local_addr()?);
    s.write_all(hello.as_bytes())?;
    let mut len = [0u8; 8];
    s.read_exact(&mut len)?;
    let mut table = vec![0u8; u64::from_le_bytes(len) as usize];
    s.read_exact(&mut table)?;
    let addrs: Result<Vec<SocketAddr>, _> =
        String::from_utf8_lossy(&table).lines().map(|l| l.parse().map_err(std::io::Error::other)).collect();
    Ok(Table { listener, addrs: addrs? })
}

/// The first bytes on a ring or point-to-point connection: which it is, and the rank that opened it.
const RING: u8 = 0;
const P2P: u8 = 1;

fn hello(mut s: &TcpStream, kind: u8, rank: usize) -> std::io::Result<()> {
    let mut b = vec![kind];
    b.extend((rank as u64).to_le_bytes());
    s.write_all(&b)
}

/// Accepts the ring from behind and a point-to-point link from each lower rank, within `setup`.
fn accept_peers(
    l: TcpListener,
    rank: usize,
    world: usize,
    setup: Duration,
) -> std::io::Result<(TcpStream, Vec<(usize, TcpStream)>)> {
    let (until, mut prev, mut lower) = (Instant::now() + setup, None, Vec::new());
    l.set_nonblocking(true)?;
    while prev.is_none() || lower.len() < rank {
        match l.accept() {
            Ok((mut s, _)) => {
                s.set_nonblocking(false)?;
                // A connection that never says who it is fails the join at the setup deadline instead of hanging it.
                s.set_read_timeout(Some(
                    until.saturating_duration_since(Instant::now()).max(Duration::from_millis(1)),
                ))?;
                let mut b = [0u8; 9];
                s.read_exact(&mut b)?;
                s.set_read_timeout(None)?;
                let from = u64::from_le_bytes(b[1..].try_into().expect("8 bytes")) as usize;
                match b[0] {
                    RING if from == (rank + world - 1) % world && prev.is_none() => prev = Some(s),
                    P2P if from < rank && lower.iter().all(|(q, _)| *q != from) => lower.push((from, s)),
                    k => {
                        return Err(std::io::Error::other(format!(
                            "unexpected connection (kind {k}) from rank {from}"
                        )));
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => return Err(e),
        }
    }
    Ok((prev.expect("accepted"), lower))
}

struct Table {
    listener: TcpListener,
    addrs: Vec<SocketAddr>,
}

fn read_hello(s: &mut TcpStream) -> std::io::Result<(usize, SocketAddr)> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while s.read(&mut b)? == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    let (rank, addr) = line.split_once(' ').ok_or_else(|| std::io::Error::other(format!("bad hello `{line}`")))?;
    Ok((rank.parse().map_err(std::io::Error::other)?, addr.parse().map_err(std::io::Error::other)?))
}

/// Connects, retrying while the peer is not listening yet.
fn connect(to: SocketAddr, setup: Duration) -> std::io::Result<TcpStream> {
    let until = Instant::now() + setup;
    loop {
        match TcpStream::connect(to) {
            Ok(s) => return Ok(s),
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(e),
        }
    }
}

fn send(w: &mut BufWriter<TcpStream>, msg: &[u8]) -> Result<(), CommError> {
    let wrote = w.write_all(&(msg.len() as u64).to_le_bytes()).and_then(|()| w.write_all(msg)).and_then(|()| w.flush());
    wrote.map_err(|_| gone(usize::MAX))
}

fn recv(r: &mut BufReader<TcpStream>, timeout: Option<Duration>) -> Result<Vec<u8>, CommError> {
    let fail = |e: std::io::Error| match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => CommError::Timeout { after: timeout.unwrap_or_default() },
        _ => gone(usize::MAX),
    };
    let mut len = [0u8; 8];
    r.read_exact(&mut len).map_err(fail)?;
    let mut msg = vec![0u8; u64::from_le_bytes(len) as usize];
    r.read_exact(&mut msg).map_err(fail)?;
    Ok(msg)
}

const KINDS: [Kind; 6] =
    [Kind::AllReduceSum, Kind::AllGather, Kind::ReduceScatterSum, Kind::Broadcast, Kind::BroadcastBytes, Kind::Barrier];

/// A contribution on the wire: kind, lengths, root, then its floats (LE) and bytes, each length-prefixed.
pub(crate) fn encode(c: &Contribution) -> Vec<u8> {
    let mut out = vec![KINDS.iter().position(|&k| k == c.op.kind).expect("every kind is listed") as u8];
    for v in [c.op.input as u64, c.op.output as u64, c.op.root.map_or(u64::MAX, |r| r as u64)] {
        out.extend(v.to_le_bytes());
    }
    out.extend((c.data.floats.len() as u64).to_le_bytes());
    out.extend(c.data.floats.iter().flat_map(|f| f.to_le_bytes()));
    out.extend((c.data.bytes.len() as u64).to_le_bytes());
    out.extend(&c.data.bytes);
    out
}

pub(crate) fn decode(b: &[u8]) -> Result<Contribution, CommError> {
    let bad = || CommError::OpMismatch { detail: "a peer sent a message that does not parse".into() };
    let u64_at = |at: usize| b.get(at..at + 8).map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")));
    let kind = *KINDS.get(usize::from(*b.first().ok_or_else(bad)?)).ok_or_else(bad)?;
    let (input, output, root) = (u64_at(1).ok_or_else(bad)?, u64_at(9).ok_or_else(bad)?, u64_at(17).ok_or_else(bad)?);
    let nf = u64_at(25).ok_or_else(bad)? as usize;
    let floats = b.get(33..33 + nf * 4).ok_or_else(bad)?;
    let floats = floats.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
    let nb = u64_at(33 + nf * 4).ok_or_else(bad)? as usize;
    let bytes = b.get(41 + nf * 4..41 + nf * 4 + nb).ok_or_else(bad)?.to_vec();
    let root = (root != u64::MAX).then_some(root as usize);
    Ok(Contribution {
        op: Op { kind, input: input as usize, output: output as usize, root },
        data: Payload { floats, bytes },
    })
}

impl Rounds for TcpComm {
    fn group(&self) -> (usize, usize, Option<Duration>) {
        (self.rank, self.world, self.timeout)
    }

    fn round(&self, op: Op, data: Payload, timeout: Option<Duration>) -> Result<Payload, CommError> {
        self.collective(op, data, timeout)
    }

    fn p2p(&self, send: Option<(&[f32], usize)>, from: Option<usize>) -> Result<Option<Vec<f32>>, CommError> {
        self.exchange(send, from)
    }

    fn loopback(&self) -> &Loopback {
        &self.own
    }
}

/// A loopback port free now and below Linux's ephemeral range (32768–60999), for a group's meeting address: no `:0` bind (the ranks' own listeners) or outgoing connection can take it before the caller binds it, and calls in one process never repeat one.
pub fn spare_loopback_port() -> std::io::Result<u16> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    let start = std::process::id().wrapping_mul(7_919);
    for _ in 0..SPAN {
        let step = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = (LOW + start.wrapping_add(step) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(ErrorKind::AddrInUse, "no spare loopback port in 20000..32000"))
}
