//! A job from its text, every way it is written: command-line flags (`args`, with RL's flags in
//! `rlargs`), job files and the server's bodies (`file`), a training framework's own configs
//! laid under it (`from`), the Python package's keyword arguments (`keywords`, read as the
//! flags of the same names). The CLI, the server and the Python package all read a job here,
//! so the same text gives the same job. The flags are clap's (`JobArgs`) because a keyword *is*
//! a flag: the CLI's parser is built from them (`commands::jobargs` re-exports `args` at its
//! old path).
//!
//! Imports run one way: `error` (the shared error and number reading) ← `from` ← `file`;
//! `error` ← `rlargs`; all of them ← `args` ← `keywords`.

pub mod args;
pub mod error;
pub mod file;
pub mod from;
pub mod keywords;
pub mod rlargs;

pub use error::JobError;
