//! Job flags and job files: moved to `app::jobtext::args` (job-text parsing is the app's).

pub use crate::app::jobtext::args::*;
