//! The modules LoRA adapts, as matched once per model and target list: the type
//! `states::lora_modules` makes and the memo keeps. A leaf.

/// The modules LoRA adapts: for each 2-D weight whose module name is a target, its layer and
/// in + out features, in inventory order; and the first target no module matched. A rank
/// multiplies it into [`lora_adapters`] ([`adapters_of`]); the matching, which reads every
/// tensor's name, depends on the targets alone (remembered per model: `memo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoraModules {
    pub modules: Vec<(Option<u32>, u64)>,
    pub unmatched: Option<usize>,
}
