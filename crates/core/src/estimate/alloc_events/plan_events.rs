//! The blocks' allocator events a forward plan carries: a leaf that the plan
//! (`forward_plan.rs`) and the event streams both import.

use crate::estimate::tape::BlockEvents;

/// The blocks' events of one forward plan: each distinct block program once, and which one
/// each layer runs (made with the plan and remembered with it, `memo.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanEvents {
    pub blocks: Vec<BlockEvents>,
    pub layer_block: Vec<u32>,
    /// Width of the parameters and the residual stream the plan ran at.
    pub param_width: u64,
    /// `torch.autocast` was on.
    pub autocast: bool,
}
