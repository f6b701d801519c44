//! Engram tables read from disk (issue 7): DeepSeek's shards located by the index, or our packed file; mmap or O_DIRECT.

use crate::table::{EngramTable, SCALE_BLOCK, check_gather, dequant_row};
use crate::{EngramError, Result};
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use tf_core::{Checkpoint, DType, bf16};

/// Direct I/O transfers in multiples of this (the logical block size of common disks).
pub const ALIGN: u64 = 4096;
/// Magic and header size of the packed format: `TFENGRM1`, rows u64, dim u64, then rows at `PACKED_DATA`.
const MAGIC: &[u8; 8] = b"TFENGRM1";
const PACKED_DATA: u64 = ALIGN;

/// How rows come off the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoMode {
    /// Memory-mapped: the page cache holds what was read.
    Mmap,
    /// `O_DIRECT` reads into aligned buffers: nothing lands in the page cache.
    Direct,
}

/// Where a row's bytes live: codes at `codes + r·codes_stride`, scales at `scales + r·scales_stride`.
#[derive(Clone, Copy, Debug)]
struct Layout {
    codes: u64,
    codes_stride: u64,
    scales: u64,
    scales_stride: u64,
}

/// An Engram table read from one file on demand.
pub struct FileTable {
    name: String,
    path: PathBuf,
    rows: u64,
    dim: usize,
    layout: Layout,
    file: File,
    map: Option<memmap2::Mmap>,
}

impl std::fmt::Debug for FileTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FileTable({} in {}, {} rows × {})", self.name, self.path.display(), self.rows, self.dim)
    }
}

fn io_err(table: &str, path: &Path, what: &str, e: std::io::Error) -> EngramError {
    EngramError::BadTable { table: table.to_string(), msg: format!("{}: {what}: {e}", path.display()) }
}

impl FileTable {
    fn new(name: &str, path: &Path, (rows, dim): (u64, usize), layout: Layout, mode: IoMode) -> Result<FileTable> {
        let mut opts = std::fs::OpenOptions::new();
        opts.read(true);
        if mode == IoMode::Direct {
            opts.custom_flags(libc::O_DIRECT);
        }
        let file = opts.open(path).map_err(|e| io_err(name, path, &format!("opening ({mode:?})"), e))?;
        let last = rows.saturating_sub(1);
        let codes_end = layout.codes + last * layout.codes_stride + dim as u64;
        let end = codes_end.max(layout.scales + last * layout.scales_stride + (dim / SCALE_BLOCK) as u64);
        let len = file.metadata().map_err(|e| io_err(name, path, "stat", e))?.len();
        if len < end {
            let msg = format!("{}: {len} bytes, but {rows} rows × {dim} need {end} (truncated?)", path.display());
            return Err(EngramError::BadTable { table: name.to_string(), msg });
        }
        // SAFETY: the file is opened read-only and tables are not rewritten while served.
        let map = if mode == IoMode::Mmap {
            Some(unsafe { memmap2::Mmap::map(&file) }.map_err(|e| io_err(name, path, "mmap", e))?)
        } else {
            None
        };
        Ok(FileTable { name: name.to_string(), path: path.to_path_buf(), rows, dim, layout, file, map })
    }

    /// `{prefix}.weight` / `.scale` inside DeepSeek's shards (found through the checkpoint's index), refused unless they are F8_E4M3 `[rows, dim]` and F8_E8M0 `[rows, dim/32]` in the same file.
    pub fn open_shards(ck: &Checkpoint, prefix: &str, (rows, dim): (u64, usize), mode: IoMode) -> Result<FileTable> {
        let bad = |msg: String| EngramError::BadTable { table: prefix.to_string(), msg };
        let entry = |suffix: &str| {
            let n = format!("{prefix}.{suffix}");
            ck.entry(&n).ok_or_else(|| bad(format!("tensor `{n}` is not in the checkpoint (missing shard?)")))
        };
        let ((wpath, w), (spath, s)) = (entry("weight")?, entry("scale")?);
        let sdim = dim / SCALE_BLOCK;
        if w.dtype != DType::F8E4M3 || w.shape != [rows as usize, dim] {
            return Err(bad(format!("weight is {} {:?}; the config needs F8_E4M3 [{rows}, {dim}]", w.dtype, w.shape)));
        }
        if s.dtype != DType::F8E8M0 || s.shape != [rows as usize, sdim] {
            return Err(bad(format!("scale is {} {:?}; the config needs F8_E8M0 [{rows}, {sdim}]", s.dtype, s.shape)));
        }
        if wpath != spath {
            return Err(bad(format!("weight in {} but scale in {}", wpath.display(), spath.display())));
        }
        let layout = Layout {
            codes: w.start as u64,
            codes_stride: dim as u64,
            scales: s.start as u64,
            scales_stride: sdim as u64,
        };
        FileTable::new(prefix, wpath, (rows, dim), layout, mode)
    }

    /// A packed table written by [`write_packed`], refused unless it holds `rows × dim`.
    pub fn open_packed(path: &Path, name: &str, (rows, dim): (u64, usize), mode: IoMode) -> Result<FileTable> {
        let mut head = [0u8; 24];
        File::open(path)
            .and_then(|f| f.read_exact_at(&mut head, 0))
            .map_err(|e| io_err(name, path, "reading the header", e))?;
        let (r, d) = (
            u64::from_le_bytes(head[8..16].try_into().expect("8 bytes")),
            u64::from_le_bytes(head[16..24].try_into().expect("8 bytes")),
        );
        if &head[..8] != MAGIC || (r, d) != (rows, dim as u64) {
            let msg = format!(
                "{}: header says {r} rows × {d} (magic ok: {}), the config needs {rows} × {dim}",
                path.display(),
                &head[..8] == MAGIC
            );
            return Err(EngramError::BadTable { table: name.to_string(), msg });
        }
        let stride = (dim + dim / SCALE_BLOCK) as u64;
        let layout = Layout {
            codes: PACKED_DATA,
            codes_stride: stride,
            scales: PACKED_DATA + dim as u64,
            scales_stride: stride,
        };
        FileTable::new(name, path, (rows, dim), layout, mode)
    }

    /// Reads `len` bytes at `off` into `out`: a slice copy under mmap, an aligned `pread` under direct I/O.
    fn read(&self, off: u64, out: &mut [u8], buf: &mut AlignedBuf) -> Result<()> {
        let short = |got: usize| EngramError::BadTable {
            table: self.name.clone(),
            msg: format!("{}: short read at byte {off}: {got} of {} bytes", self.path.display(), out.len()),
        };
        if let Some(map) = &self.map {
            let src = map.get(off as usize..off as usize + out.len()).ok_or_else(|| short(0))?;
            out.copy_from_slice(src);
            return Ok(());
        }
        let start = off / ALIGN * ALIGN;
        let end = (off + out.len() as u64).div_ceil(ALIGN) * ALIGN;
        let span = buf.get((end - start) as usize);
        let mut got = 0;
        while got < span.len() {
            match self.file.read_at(&mut span[got..], start + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(&self.name, &self.path, &format!("reading byte {start}"), e)),
            }
        }
        let skip = (off - start) as usize;
        if got < skip + out.len() {
            return Err(short(got.saturating_sub(skip)));
        }
        out.copy_from_slice(&span[skip..skip + out.len()]);
        Ok(())
    }
}

/// A heap buffer aligned to [`ALIGN`] for direct I/O, grown on demand.
#[derive(Default)]
pub struct AlignedBuf {
    data: Vec<u8>,
}

impl AlignedBuf {
    /// `len` bytes starting at an [`ALIGN`]-aligned address.
    pub fn get(&mut self, len: usize) -> &mut [u8] {
        let a = ALIGN as usize;
        if self.data.len() < len + a {
            self.data = vec![0u8; len + a];
        }
        let skip = self.data.as_ptr().align_offset(a);
        &mut self.data[skip..skip + len]
    }
}

impl EngramTable for FileTable {
    fn name(&self) -> &str {
        &self.name
    }

    fn rows(&self) -> u64 {
        self.rows
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn gather(&self, ids: &[u64], out: &mut [bf16]) -> Result<()> {
        check_gather(self, ids, out)?;
        let (dim, sdim) = (self.dim, self.dim / SCALE_BLOCK);
        let (mut rec, mut buf, l) = (vec![0u8; dim + sdim], AlignedBuf::default(), self.layout);
        // A packed row holds its scales right after its codes: one read instead of two.
        let together = l.scales == l.codes + dim as u64 && l.scales_stride == l.codes_stride;
        for (&id, row) in ids.iter().zip(out.chunks_exact_mut(dim)) {
            let (codes, scales) = rec.split_at_mut(dim);
            if together {
                self.read(l.codes + id * l.codes_stride, &mut rec, &mut buf)?;
            } else {
                self.read(l.codes + id * l.codes_stride, codes, &mut buf)?;
                self.read(l.scales + id * l.scales_stride, scales, &mut buf)?;
            }
            let (codes, scales) = rec.split_at(dim);
            dequant_row(codes, scales, row);
        }
        Ok(())
    }
}

/// The packed format's header (magic, rows, dim, zero padding to the first row); rows of `dim + dim/32` bytes follow.
pub fn packed_header(rows: u64, dim: usize) -> Vec<u8> {
    let mut head = vec![0u8; PACKED_DATA as usize];
    head[..8].copy_from_slice(MAGIC);
    head[8..16].copy_from_slice(&rows.to_le_bytes());
    head[16..24].copy_from_slice(&(dim as u64).to_le_bytes());
    head
}

/// Writes `rows × dim` FP8 codes and `rows × dim/32` E8M0 scales as a packed table (one contiguous record per row).
pub fn write_packed(path: &Path, (rows, dim): (u64, usize), codes: &[u8], scales: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let sdim = dim / SCALE_BLOCK;
    assert!(
        codes.len() as u64 == rows * dim as u64 && scales.len() as u64 == rows * sdim as u64,
        "write_packed: sizes disagree with {rows} × {dim}"
    );
    let mut f = std::io::BufWriter::new(File::create(path)?);
    f.write_all(&packed_header(rows, dim))?;
    for (c, s) in codes.chunks_exact(dim).zip(scales.chunks_exact(sdim)) {
        f.write_all(c)?;
        f.write_all(s)?;
    }
    f.flush()
}
