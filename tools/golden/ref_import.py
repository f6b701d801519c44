"""Imports the vendored DeepSeek V4.1 reference package (README section 1); shared by run_reference.py and ref_speed.py."""

import sys
from pathlib import Path

REF_FILES = ("model.py", "engram.py", "kernel_cpu.py", "vision.py", "image_processor.py")


def import_reference(ref_dir: Path, *modules: str) -> tuple:
    """The named modules of the package in `ref_dir` (its parent goes on sys.path); exits naming any missing file."""
    missing = [f for f in REF_FILES if not (ref_dir / f).is_file()]
    if missing:
        sys.exit(f"reference files {missing} missing in {ref_dir}: see tools/golden/README.md")
    if not (ref_dir / "__init__.py").exists():
        (ref_dir / "__init__.py").touch()
    sys.path.insert(0, str(ref_dir.parent))
    return tuple(__import__(f"{ref_dir.name}.{m}", fromlist=[m]) for m in modules)
