//! The API's routes, one module per command: each reads its body into the application layer's
//! typed input, runs `crate::app` on the blocking pool and answers the JSON the CLI prints
//! with `--json` (or the picture / page that `estimate --svg` / `--html` writes).

pub mod catalog;
pub mod estimate;
pub mod measure;
pub mod plan;
