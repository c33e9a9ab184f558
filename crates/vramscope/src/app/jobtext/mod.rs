//! A job from its text, every way it is written: command-line flags and job files (`args`, with
//! RL's flags in `rlargs`), a training framework's own configs laid under it (`from`), the Python
//! package's keyword arguments (`keywords`, read as the flags of the same names). The CLI, the
//! server and the Python package all read a job here, so the same text gives the same job. The
//! flags are clap's (`JobArgs`) because a keyword *is* a flag: the CLI's parser is built from
//! them (`commands::jobargs` re-exports `args` at its old path).
//!
//! Imports run one way: `error` (the shared error and number reading) ← `from`, `rlargs` ←
//! `args` ← `keywords`.

pub mod args;
pub mod error;
pub mod from;
pub mod keywords;
pub mod rlargs;

pub use error::JobError;
