//! Human renderings of reports. Pure functions from a report to text, so they can be tested
//! without a terminal; the commands decide width and colour. The SVG picture is drawn in the
//! application layer (`app::picture`, the one drawing the CLI, the server and Python share);
//! `svg` re-exports it here, with the labels and order every rendering shares.

pub mod html;
pub mod svg;
pub mod terminal;
pub mod whatif;

pub use crate::app::picture::labels::{fit_of, label_in, SHOWN, TIGHT_HEADROOM};
