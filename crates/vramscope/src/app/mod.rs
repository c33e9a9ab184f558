//! The application layer: one typed function per command, shared by the CLI (flags → input →
//! here → a renderer), the web server (body → input → here → JSON) and the Python package
//! (`call_json`). Each takes a typed input — the contract's job (`../shared/contract.md`) plus
//! the command's options — and returns a typed result whose JSON (`to_json`) is byte for byte
//! what the CLI prints with `--json`. Errors are `AppError`: the CLI's one-line message and
//! exit code.
//!
//! Nothing here prints, exits or spawns a process: the CLI and the server are shells around it.
//! A job's text (flags, job files, framework configs, Python keywords) is read here (`jobtext`),
//! and the SVG picture is drawn here (`picture`), so every shell reads and draws the same way.

pub mod analyze;
pub mod catalog;
pub mod compare;
pub mod diffusion;
mod error;
pub mod estimate;
pub mod fit;
pub mod inspect;
pub mod job;
pub mod jobtext;
mod json;
mod log_kv;
pub mod picture;
pub mod plan;
pub mod validate;

pub use crate::models::Session;
pub use analyze::{analyze, analyze_bytes, AnalyzeInput};
pub use catalog::{gpus, models};
pub use compare::{compare, compare_bytes, CompareInput, Comparison};
pub use error::{escape_controls, AppError};
pub use estimate::{estimate, picture, verdict, EstimateInput, PictureInput};
pub use fit::{fit, fit_calibrated, CalibratedFitInput, FitInput, FitWithAdvice};
pub use inspect::{inspect, InspectInput, InspectReport};
pub use json::{
    analyze_bytes_json, call_json, compare_bytes_json, job_with_keywords_json, to_json, COMMANDS,
};
pub use plan::{plan, PlanInput};
pub use validate::{validate, ValidateInput, Validation};
