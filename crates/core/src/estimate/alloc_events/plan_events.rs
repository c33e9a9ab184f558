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
    /// A vision-language training step's vision tower, where the stream writes it
    /// (`estimate/vision_events.rs`); `None` for a step without images.
    pub tower: Option<TowerEvents>,
}

/// A vision tower's forward and backward as the stream writes them (`alloc_events/tower.rs`):
/// what the tower makes before its blocks, its blocks from their tapes (the same programs the
/// walk's `vision::tower_forward` runs), the projector, and the merge of the image features
/// into the text embeddings. Sizes are as requested (the allocator rounds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TowerEvents {
    /// Made before the blocks and kept to the tower's backward (the pixels' 16-bit copy the
    /// patch convolution saves, its weight's copy under autocast); 0 when the tower is frozen.
    pub inputs_kept: u64,
    /// Made before the blocks and freed once the first block has read them (the same tensors
    /// when the tower is frozen; nothing else is written).
    pub inputs_transient: u64,
    /// The embeddings' output, the first block's input (batch · patches · width).
    pub embeddings: u64,
    /// The tower's block (every layer runs the same program).
    pub block: BlockEvents,
    /// Layers run.
    pub layers: u32,
    /// The tower's weights train: its blocks run their backward.
    pub trains: bool,
    /// Checkpointed blocks (full checkpointing of a training tower).
    pub checkpointed: bool,
    /// What the projector keeps to its backward, and its forward's transient beyond it.
    pub projector_kept: u64,
    pub projector_transient: u64,
    /// The projector's weights train (its backward runs).
    pub projector_trains: bool,
    /// The projected image features (image tokens · text width) and the `[b, s]` bool
    /// placeholder mask `masked_scatter` saves (`get_placeholder_mask`).
    pub features: u64,
    pub mask: u64,
    /// CUDA's `maskPrefixSum` for `masked_scatter_`: int64 of the embeddings' shape.
    pub prefix_sum: u64,
    /// What the walk's embeddings stage counts for the tower (`vision::tower_forward`'s
    /// kept bytes), which the stream writes here instead of in the embeddings' lump.
    pub walk_kept: u64,
    /// The text embeddings' own transient (the stage's top less its kept bytes, the tower
    /// left out).
    pub embedding_transient: u64,
    /// The tower's backward at its fullest over what the walk holds when it begins (the
    /// walk's mark, `vision_events::backward_top`); 0 when the tower is frozen.
    pub backward_top: u64,
}
