//! Deterministic discovery of the source files the rules apply to.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

const EXTENSIONS: [&str; 3] = ["rs", "cu", "cuh"];

pub(crate) struct SourceFile {
    pub(crate) path: PathBuf,
    pub(crate) label: String,
}

/// Lists source files under `root`, sorted by label; symlinks are skipped so cycles cannot occur.
pub(crate) fn source_files(root: &Path) -> io::Result<Vec<SourceFile>> {
    let mut files = Vec::new();
    visit(root, "", &mut files)?;
    files.sort_by(|a, b| a.label.cmp(&b.label));
    Ok(files)
}

fn visit(dir: &Path, prefix: &str, files: &mut Vec<SourceFile>) -> io::Result<()> {
    let entries = fs::read_dir(dir).map_err(|e| with_path(e, dir))?;
    for entry in entries {
        let entry = entry.map_err(|e| with_path(e, dir))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let label = format!("{prefix}{name}");
        let file_type = entry.file_type().map_err(|e| with_path(e, &path))?;
        if file_type.is_dir() {
            if !is_skipped_dir(&path, &name, prefix) {
                visit(&path, &format!("{label}/"), files)?;
            }
        } else if file_type.is_file() && has_source_extension(&name) {
            files.push(SourceFile { path, label });
        }
    }
    Ok(())
}

/// Only build-output `target` dirs are skipped, since `src/target/` is a plausible module name.
fn is_skipped_dir(path: &Path, name: &str, prefix: &str) -> bool {
    if name.starts_with('.') {
        return true;
    }
    let parent_is_fuzz = Path::new(prefix).file_name().is_some_and(|parent| parent == "fuzz");
    name == "target" && (prefix.is_empty() || parent_is_fuzz || path.join("CACHEDIR.TAG").exists())
}

fn has_source_extension(name: &str) -> bool {
    Path::new(name).extension().and_then(|ext| ext.to_str()).is_some_and(|ext| EXTENSIONS.contains(&ext))
}

fn with_path(err: io::Error, path: &Path) -> io::Error {
    io::Error::new(err.kind(), format!("{}: {err}", path.display()))
}
