//! The GPU targets we compile every kernel for, with their compute capabilities.

use std::fmt;
use std::str::FromStr;

/// A compile target: `sm_90a` (H100/H200, wgmma and TMA) or `sm_121a` (GB10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    Sm90a,
    Sm121a,
}

impl Arch {
    /// Every target a kernel must compile for, so CI catches one that does not.
    pub const ALL: [Arch; 2] = [Arch::Sm90a, Arch::Sm121a];

    /// Compute capability (major, minor) of the target.
    pub fn capability(self) -> (u32, u32) {
        match self {
            Arch::Sm90a => (9, 0),
            Arch::Sm121a => (12, 1),
        }
    }

    /// The target for a device of this compute capability, if we build for it.
    pub fn for_capability(major: u32, minor: u32) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.capability() == (major, minor))
    }

    /// NVRTC / nvcc option naming this target's architecture-specific features.
    pub fn nvrtc_flag(self) -> String {
        format!("--gpu-architecture={self}")
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (ma, mi) = self.capability();
        write!(f, "sm_{ma}{mi}a")
    }
}

/// A GPU target name tf-cuda does not build for, with the ones it does.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown GPU target `{given}` (known: {known})")]
pub struct UnknownArch {
    pub given: String,
    pub known: String,
}

impl FromStr for Arch {
    type Err = UnknownArch;
    fn from_str(s: &str) -> Result<Arch, UnknownArch> {
        Arch::ALL.into_iter().find(|a| a.to_string() == s).ok_or_else(|| {
            let known: Vec<String> = Arch::ALL.iter().map(Arch::to_string).collect();
            UnknownArch { given: s.into(), known: known.join(", ") }
        })
    }
}
