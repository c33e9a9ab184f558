//! The SVG picture: drawn in the application layer (`app::picture`), re-exported here.

pub use crate::app::picture::*;
