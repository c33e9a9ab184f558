//! The transformers release a job runs (job field `transformers_version`, an extension of the
//! contract's job). Unset, vramscope models transformers 5.24.0, the release its estimates were
//! read from and measured against. The modelling code itself changes what a block saves
//! between releases; the releases modelled are the ones where that code changed, each read
//! from the release's own `transformers/models/*/modeling_*.py`:
//!
//! - **5.17.0**: `mamba2_chunk_scan` (`modeling_mamba2.py`, and the same function in
//!   `modeling_falcon_h1.py`, `modeling_bamba.py`, `modeling_granitemoehybrid.py`,
//!   `modeling_nemotron_h.py`, `modeling_zamba2.py`) contracts by broadcast products summed
//!   afterwards (`(M[..., None] * hidden_states[:, :, None]).sum(dim=3)`), materializing
//!   `[batch, chunks, chunk, chunk, heads, head_dim]` temporaries; the gated RMSNorm of
//!   Mamba2, Bamba and Granite 4.0-H (`MambaRMSNormGated`) normalizes over all of `d_inner`;
//! - **5.18.0**: the same contractions became `torch.einsum` (`"bclhn,bcshn->bclsh"` and
//!   four more), which lower to `bmm` on reshaped operands and never hold the broadcast
//!   product; Nemotron-H's `NemotronHRMSNorm` multiplies its weight in fp32 before the cast
//!   back (`modeling_nemotron_h.py`), where 5.17.0 multiplied after it;
//! - **5.23.0**: that gated RMSNorm normalizes per group of `d_inner / n_groups`
//!   (`group_size`), as Zamba2's and Nemotron-H's already did;
//! - **5.24.0**: unchanged in these (the default).
//!
//! A release between two of them runs the code of the one below it; one older than 5.17.0 is
//! modelled as 5.17.0 and one newer than 5.24.0 as 5.24.0, and the estimate says so. The
//! change points were found by reading the wheels of 5.17.0, 5.18.0, 5.19.0, 5.20.0, 5.22.0,
//! 5.23.0 and 5.24.0.

use crate::error::CoreError;
use serde::{Serialize, Serializer};

/// A transformers release, as written (`5.17.0`, `5.20.1`, `4.57.6.dev0`: the patch and any
/// suffix change nothing modelled, and are kept for the echo).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TransformersVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

/// The releases whose modelling code vramscope models, oldest first (the module's list).
pub const MODELLED: [TransformersVersion; 4] = [
    TransformersVersion::new(5, 17, 0),
    TransformersVersion::new(5, 18, 0),
    TransformersVersion::new(5, 23, 0),
    TransformersVersion::new(5, 24, 0),
];

/// The release an unset `transformers_version` stands for.
pub const DEFAULT: TransformersVersion = TransformersVersion::new(5, 24, 0);

impl TransformersVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        TransformersVersion {
            major,
            minor,
            patch,
        }
    }

    /// Parses `MAJOR.MINOR` or `MAJOR.MINOR.PATCH` as `transformers.__version__` prints it,
    /// the patch allowed a pre-release or local suffix (`5.18.0.dev0`, `5.17.0rc1`,
    /// `5.17.0+local`); majors 2 to 9.
    pub fn parse(field: &str, s: &str) -> Result<Self, CoreError> {
        let bad = || {
            CoreError::field(
                field,
                format!("expected a transformers release such as \"5.17.0\", got {s:?}"),
            )
        };
        let core = s.trim().split('+').next().unwrap_or("");
        let mut parts = core.splitn(4, '.');
        let major = digits(parts.next()).ok_or_else(bad)?;
        let minor = digits(parts.next()).ok_or_else(bad)?;
        let patch = match parts.next() {
            None => 0,
            Some(p) => leading_digits(p).ok_or_else(bad)?,
        };
        if let Some(rest) = parts.next() {
            // Only a dev/rc/post tag may follow the patch (`5.18.0.dev0`).
            if !suffix_ok(rest) {
                return Err(bad());
            }
        }
        if !(2..=9).contains(&major) || minor > 999 {
            return Err(bad());
        }
        Ok(TransformersVersion::new(major, minor, patch))
    }

    /// The modelled release whose code this one runs: the newest of [`MODELLED`] at or below
    /// it, or the oldest when it is older than all.
    pub fn modelled(self) -> TransformersVersion {
        MODELLED
            .iter()
            .rev()
            .find(|m| **m <= self)
            .copied()
            .unwrap_or(MODELLED[0])
    }

    /// `mamba2_chunk_scan` contracts with `torch.einsum` (5.18.0 on), not with broadcast
    /// products summed afterwards (5.17.0 and before).
    pub fn ssd_scan_einsum(self) -> bool {
        self.modelled() >= TransformersVersion::new(5, 18, 0)
    }

    /// Nemotron-H's `NemotronHRMSNorm` multiplies its weight in fp32 before casting back
    /// (`(self.weight.to(torch.float32) * hidden_states).to(input_dtype)`, 5.18.0 on), not
    /// after the cast (5.17.0).
    pub fn nemotron_h_norm_in_fp32(self) -> bool {
        self.modelled() >= TransformersVersion::new(5, 18, 0)
    }

    /// The gated RMSNorm of Mamba2, Bamba and Granite 4.0-H normalizes per group
    /// (`group_size = d_inner // n_groups`, 5.23.0 on), not over all of `d_inner`.
    pub fn mamba2_norm_grouped(self) -> bool {
        self.modelled() >= TransformersVersion::new(5, 23, 0)
    }
}

/// Digits only, one to four of them.
fn digits(part: Option<&str>) -> Option<u32> {
    let p = part?;
    if p.is_empty() || p.len() > 4 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    p.parse().ok()
}

/// A patch number, then at most a PEP 440 pre-release tag (`0rc1`, `0a0`, `0b2`).
fn leading_digits(p: &str) -> Option<u32> {
    let n = p.bytes().take_while(u8::is_ascii_digit).count();
    let (num, tail) = p.split_at(n);
    let tag_ok = tail.is_empty()
        || ["rc", "a", "b"].iter().any(|t| {
            tail.strip_prefix(t).is_some_and(|d| {
                !d.is_empty() && d.len() <= 4 && d.bytes().all(|b| b.is_ascii_digit())
            })
        });
    if tag_ok {
        digits(Some(num))
    } else {
        None
    }
}

/// `dev0`, `post1`: the fourth part of a development or post release.
fn suffix_ok(rest: &str) -> bool {
    ["dev", "post"].iter().any(|t| {
        rest.strip_prefix(t)
            .is_some_and(|d| !d.is_empty() && d.len() <= 4 && d.bytes().all(|b| b.is_ascii_digit()))
    })
}

impl Default for TransformersVersion {
    /// [`DEFAULT`]: the release vramscope models.
    fn default() -> Self {
        DEFAULT
    }
}

impl std::fmt::Display for TransformersVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl Serialize for TransformersVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The sentence a report carries where the estimate depends on the release: which release's
/// code was modelled, and why (the job's own release, the nearest at or below it, or the
/// default).
pub fn release_note(given: Option<TransformersVersion>, what: &str) -> String {
    match given {
        None => format!(
            "{what} modelled as transformers {DEFAULT}'s (the default; set transformers_version \
             for another release's modelling code)"
        ),
        Some(v) if v.modelled() == v => format!("{what} modelled as transformers {v}'s"),
        Some(v) if v < MODELLED[0] => format!(
            "{what} modelled as transformers {}'s: transformers_version {v} is older than any \
             modelled release ({})",
            v.modelled(),
            modelled_list()
        ),
        Some(v) => format!(
            "{what} modelled as transformers {}'s, the nearest modelled release at or below \
             transformers_version {v} (modelled: {})",
            v.modelled(),
            modelled_list()
        ),
    }
}

fn modelled_list() -> String {
    MODELLED
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Result<TransformersVersion, CoreError> {
        TransformersVersion::parse("transformers_version", s)
    }

    #[test]
    fn reads_what_transformers_version_prints() {
        assert_eq!(v("5.17.0").unwrap(), TransformersVersion::new(5, 17, 0));
        assert_eq!(v("5.24").unwrap(), TransformersVersion::new(5, 24, 0));
        assert_eq!(v(" 5.20.1 ").unwrap(), TransformersVersion::new(5, 20, 1));
        assert_eq!(
            v("5.18.0.dev0").unwrap(),
            TransformersVersion::new(5, 18, 0)
        );
        assert_eq!(v("5.17.0rc1").unwrap(), TransformersVersion::new(5, 17, 0));
        assert_eq!(
            v("4.57.6+local").unwrap(),
            TransformersVersion::new(4, 57, 6)
        );
        assert_eq!(v("5.20").unwrap().to_string(), "5.20.0");
    }

    #[test]
    fn refuses_what_is_not_a_release() {
        for s in [
            "",
            "5",
            "5.",
            ".17",
            "x.y",
            "5.1O",
            "-5.17",
            "1.0",
            "10.0",
            "5.1000",
            "5 .17",
            "5.17.0.1",
            "5.17.x",
            "5.17.0rc",
            "5.17.0.dev",
            "5.17.0-1",
            "latest",
        ] {
            let e = v(s).unwrap_err().to_string();
            assert!(e.contains("transformers_version"), "{s:?}: {e}");
        }
    }

    /// Each release runs the code of the newest modelled release at or below it: the einsum
    /// scan from 5.18.0 (read in 5.18.0's `modeling_mamba2.py`, absent from 5.17.0's), the
    /// grouped gated norm from 5.23.0 (absent from 5.22.0's, present in 5.23.0's).
    #[test]
    fn each_release_runs_the_code_below_it() {
        let m = |s: &str| v(s).unwrap().modelled().to_string();
        assert_eq!(m("5.17.0"), "5.17.0");
        assert_eq!(m("4.57.6"), "5.17.0");
        assert_eq!(m("5.17.9"), "5.17.0");
        assert_eq!(m("5.20.2"), "5.18.0");
        assert_eq!(m("5.22.2"), "5.18.0");
        assert_eq!(m("5.23.0"), "5.23.0");
        assert_eq!(m("5.25.0"), "5.24.0");
        let (v517, v518) = (v("5.17.0").unwrap(), v("5.18.0").unwrap());
        assert!(!v517.ssd_scan_einsum() && v518.ssd_scan_einsum());
        assert!(!v517.nemotron_h_norm_in_fp32() && v518.nemotron_h_norm_in_fp32());
        let (v522, v523) = (v("5.22.2").unwrap(), v("5.23.0").unwrap());
        assert!(!v522.mamba2_norm_grouped() && v523.mamba2_norm_grouped());
        assert!(DEFAULT.ssd_scan_einsum() && DEFAULT.mamba2_norm_grouped());
    }

    proptest::proptest! {
        /// Any text either reads as a release that prints back to itself (patch and suffix
        /// normalized away) or is refused in one line naming the field; never a panic.
        #[test]
        fn any_text_reads_or_is_refused_in_one_line(s in "[0-9a-z.+ -]{0,14}") {
            match v(&s) {
                Ok(r) => proptest::prop_assert_eq!(v(&r.to_string()).unwrap(), r),
                Err(e) => {
                    let e = e.to_string();
                    proptest::prop_assert!(e.starts_with("transformers_version"), "{}", e);
                    proptest::prop_assert!(!e.contains('\n'), "{}", e);
                }
            }
        }

        /// Every release `MAJOR.MINOR.PATCH` of majors 2–9 reads back as written.
        #[test]
        fn every_release_reads(major in 2u32..=9, minor in 0u32..=999, patch in 0u32..=9999) {
            let r = v(&format!("{major}.{minor}.{patch}")).unwrap();
            proptest::prop_assert_eq!(r, TransformersVersion::new(major, minor, patch));
        }
    }

    #[test]
    fn the_note_says_which_release() {
        let n = |s: Option<&str>| release_note(s.map(|s| v(s).unwrap()), "the scan");
        assert!(n(None).contains("5.24.0's (the default"));
        assert_eq!(
            n(Some("5.17.0")),
            "the scan modelled as transformers 5.17.0's"
        );
        assert!(n(Some("5.20.1")).contains("5.18.0's, the nearest modelled release at or below"));
        assert!(n(Some("4.46.0")).contains("5.17.0's: transformers_version 4.46.0 is older"));
    }
}
