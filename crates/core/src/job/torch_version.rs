//! The PyTorch release a job runs on (job field `torch_version`, an extension of the contract's
//! job). Unset, vramscope models today's PyTorch. Set, it changes what the releases before a
//! few dated changes did differently, each a change in PyTorch's own source:
//!
//! - before 1.11, `softmax` and `log_softmax` saved their input for backward beside their output
//!   (`tools/autograd/derivatives.yaml`: `_softmax_backward_data(grad, result, dim, self)`;
//!   pytorch/pytorch#64000, fixed by #65242, relanded as #66018 on 2021-10-01, first released in
//!   1.11): one more attention-score tensor per layer and the loss's logits;
//! - before 1.13, CUDA kernels loaded eagerly unless `CUDA_MODULE_LOADING=LAZY` was set
//!   (pytorch/pytorch#85692, cherry-picked into 1.13 as #86509): the default of
//!   `cuda_module_loading` becomes `eager`;
//! - before 2.0, `zero_grad()` zeroed gradients in place (`set_to_none=False`;
//!   pytorch/pytorch#92731 flipped the default in 2.0): the default of `zero_grad` becomes
//!   `zeros`;
//! - `scaled_dot_product_attention` arrived in 2.0: `attention: sdpa` is refused before it;
//! - which SDPA kernel runs, and whether transformers passes grouped k/v to it, depends on the
//!   release (`estimate/blocks/sdpa.rs`: `enable_gqa` from 2.5, grouped k/v in the
//!   memory-efficient kernel from 2.15), as do the cuBLASLt workspace's life
//!   (`estimate/overhead.rs`: its own from 2.9, cuBLAS's from 2.12).
//!
//! A field the job sets itself always wins over the default the version implies.

use crate::error::CoreError;
use serde::{Serialize, Serializer};

/// A PyTorch release, major and minor (the patch level changes none of the above).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TorchVersion {
    pub major: u32,
    pub minor: u32,
}

impl TorchVersion {
    pub const fn new(major: u32, minor: u32) -> Self {
        TorchVersion { major, minor }
    }

    /// Parses `MAJOR.MINOR`, with an optional patch and local suffix as `torch.__version__`
    /// prints them (`1.10.1+cu111`, `2.4.0a0`).
    pub fn parse(field: &str, s: &str) -> Result<Self, CoreError> {
        let bad = || {
            CoreError::field(
                field,
                format!("expected a PyTorch release such as \"1.10\" or \"2.4.1\", got {s:?}"),
            )
        };
        let core = s.trim().split('+').next().unwrap_or("");
        let mut parts = core.split('.');
        let major = number(parts.next()).ok_or_else(bad)?;
        let minor = number(parts.next()).ok_or_else(bad)?;
        if !(1..=9).contains(&major) || minor > 99 {
            return Err(bad());
        }
        Ok(TorchVersion::new(major, minor))
    }

    /// `softmax`/`log_softmax` keep their input for backward (before 1.11).
    pub fn softmax_saves_input(self) -> bool {
        self < TorchVersion::new(1, 11)
    }

    /// Kernels load eagerly unless the user asked for lazy loading (before 1.13).
    pub fn loads_modules_eagerly(self) -> bool {
        self < TorchVersion::new(1, 13)
    }

    /// `zero_grad()` defaults to `set_to_none=False` (before 2.0).
    pub fn zero_grad_keeps_zeros(self) -> bool {
        self < TorchVersion::new(2, 0)
    }

    /// `torch.nn.functional.scaled_dot_product_attention` exists (2.0 on).
    pub fn has_sdpa(self) -> bool {
        self >= TorchVersion::new(2, 0)
    }
}

/// Digits only, no sign or spaces; the patch part may carry a pre-release suffix, the major and
/// minor may not.
fn number(part: Option<&str>) -> Option<u32> {
    let p = part?;
    if p.is_empty() || p.len() > 4 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    p.parse().ok()
}

impl std::fmt::Display for TorchVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Serialize for TorchVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Result<TorchVersion, CoreError> {
        TorchVersion::parse("torch_version", s)
    }

    #[test]
    fn reads_what_torch_version_prints() {
        assert_eq!(v("1.10").unwrap(), TorchVersion::new(1, 10));
        assert_eq!(v("1.10.1+cu111").unwrap(), TorchVersion::new(1, 10));
        assert_eq!(v("2.4.0a0").unwrap(), TorchVersion::new(2, 4));
        assert_eq!(v(" 2.0 ").unwrap(), TorchVersion::new(2, 0));
        assert_eq!(v("1.10").unwrap().to_string(), "1.10");
    }

    #[test]
    fn refuses_what_is_not_a_release() {
        for s in [
            "", "1", "1.", ".10", "x.y", "1.1O", "-1.10", "0.4", "10.0", "1.100", "1 .10",
        ] {
            let e = v(s).unwrap_err().to_string();
            assert!(e.contains("torch_version"), "{s:?}: {e}");
        }
    }

    /// The three dated changes, at their first releases (1.11, 1.13, 2.0).
    #[test]
    fn each_change_starts_at_its_release() {
        let (v110, v111) = (v("1.10").unwrap(), v("1.11").unwrap());
        assert!(v110.softmax_saves_input() && !v111.softmax_saves_input());
        let (v112, v113) = (v("1.12").unwrap(), v("1.13").unwrap());
        assert!(v112.loads_modules_eagerly() && !v113.loads_modules_eagerly());
        let (v113, v20) = (v("1.13").unwrap(), v("2.0").unwrap());
        assert!(v113.zero_grad_keeps_zeros() && !v20.zero_grad_keeps_zeros());
        assert!(!v113.has_sdpa() && v20.has_sdpa());
    }
}
