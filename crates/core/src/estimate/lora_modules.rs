//! The modules LoRA adapts, as matched once per model and target list: the type
//! `states::lora_modules` makes and the memo keeps, and the adapter tensors a rank gives each
//! ([`LoraAdapter`]: the one place that says what PEFT allocates). A leaf.

/// One module LoRA adapts: its layer and its base layer's features (`in_features`,
/// `out_features` as PEFT's `LoraLayer.__init__` reads them: `nn.Linear` `[out, in]`,
/// transformers' `Conv1D` `[in, out]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoraModule {
    pub layer: Option<u32>,
    pub in_features: u64,
    pub out_features: u64,
}

/// The modules LoRA adapts: one [`LoraModule`] per 2-D weight whose module name is a target,
/// in inventory (module) order; and the first target no module matched. A rank turns them
/// into [`LoraAdapter`]s (`states::adapters_of`); the matching, which reads every tensor's
/// name, depends on the targets alone (remembered per model: `memo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoraModules {
    pub modules: Vec<LoraModule>,
    pub unmatched: Option<usize>,
}

/// One adapted module's two trainable tensors at rank `r`, as PEFT makes them (PEFT 0.21.2
/// `tuners/lora/layer.py` `LoraLayer.update_layer`: `lora_A = nn.Linear(in_features, r,
/// bias=False)`, weight `[r, in]`; `lora_B = nn.Linear(r, out_features, bias=False)`, weight
/// `[out, r]`), registered A before B (`adapter_layer_names = ("lora_A", "lora_B", ...)`:
/// `named_parameters` and `_move_adapter_to_device_of_base_layer` walk them in that order).
/// Each is its own allocation and its own parameter to the optimizer, so the caching
/// allocator's rounding and the optimizers' per-tensor thresholds (bitsandbytes'
/// `min_8bit_size`, paged ≥ 1e5 elements) apply to A and B apart. rsLoRA changes only the
/// scaling (`lora_alpha / sqrt(r)`), not the tensors; DoRA's `lora_magnitude_vector` is not
/// modelled (`peft.method: "dora"` is refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoraAdapter {
    pub layer: Option<u32>,
    /// `lora_A.weight`: `[r, in_features]`.
    pub a: [u64; 2],
    /// `lora_B.weight`: `[out_features, r]`.
    pub b: [u64; 2],
}

impl LoraAdapter {
    /// A's and B's shapes, in PEFT's registration order.
    pub fn tensors(&self) -> [[u64; 2]; 2] {
        [self.a, self.b]
    }

    /// Elements of A and B together (r·(in + out)).
    pub fn elements(&self) -> u64 {
        self.tensors()
            .iter()
            .map(|s| s[0].saturating_mul(s[1]))
            .fold(0, u64::saturating_add)
    }
}
