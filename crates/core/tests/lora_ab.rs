//! LoRA adapters as PEFT makes them: each adapted module's `lora_A` `[r, in]` and `lora_B`
//! `[out, r]` (PEFT 0.21.2 `tuners/lora/layer.py` `LoraLayer.update_layer`:
//! `nn.Linear(in, r)`, `nn.Linear(r, out)`, fp32 by `autocast_adapter_dtype`), two tensors
//! with their own allocations and their own optimizer states, in the walk's states and in the
//! allocator stream alike. Every figure is derived by hand below from bitsandbytes' per-tensor
//! rules (`optimizer.py` `Optimizer2State.init_state`: 32-bit states below `min_8bit_size`
//! 4096 elements, else uint8 `state1`/`state2` and fp32 `absmax1`/`absmax2` per 256-element
//! block, the two 256-entry fp32 `qmap`s once per optimizer; `get_state_buffer`: `state1`/
//! `state2` paged from 1e5 elements) and the caching allocator's 512 B rounding.

mod common;

use common::stream_steps::{allocs_in, assert_stream_meets_walk, stream_of, tiny_llama};
use serde_json::{json, Value};
use vramscope_core::estimate::alloc_events::Phase;

/// One Llama block, hidden 256, MLP 1024 (`tiny_llama` with a wider MLP), bf16, LoRA of
/// `rank` on `up_proj` alone (in 256, out 1024) with `optimizer`.
fn up_proj_lora(rank: u64, optimizer: &str) -> Value {
    let mut cfg = tiny_llama(1);
    cfg["intermediate_size"] = json!(1024);
    json!({"model": {"hf_config": cfg}, "batch": 1, "seq": 64, "precision": "bf16",
           "optimizer": optimizer, "attention": "sdpa",
           "peft": {"method": "lora", "rank": rank, "targets": ["up_proj"], "dropout": 0.0}})
}

#[test]
fn a_and_b_fall_on_either_side_of_min_8bit_size() {
    // r = 8: A [8, 256] = 2,048 elements (< 4096: two fp32 states, 2 × 8,192 B = 16,384),
    // B [1024, 8] = 8,192 elements (8-bit: two uint8 states of 8,192 B, and 32 blocks × 4 B
    // = 128 B of absmax each, rounded to 512: 16,384 + 1,024 = 17,408), and the qmaps,
    // 2 × 1,024 B = 2,048, because B is 8-bit: 35,840 B. (As one tensor of 10,240 elements
    // it was 8-bit whole: 2 × 10,240 + 2 × 512 + 2,048 = 23,552 B.)
    let r = common::run_job(up_proj_lora(8, "adamw-8bit"));
    assert_eq!(r.per_gpu.model_states.optimizer_states, 35_840);
    // Gradients in fp32 like their parameters: 2,048 × 4 + 8,192 × 4 = 40,960 B (both
    // multiples of 512).
    assert_eq!(r.per_gpu.model_states.gradients, 40_960);
    assert_eq!(r.model.params_trainable, 10_240);
    // torch's AdamW: `zeros_like` twice per tensor, 2 × 40,960 = 81,920 B whichever the split.
    let r = common::run_job(up_proj_lora(8, "adamw"));
    assert_eq!(r.per_gpu.model_states.optimizer_states, 81_920);
}

#[test]
fn only_b_is_paged_when_only_b_reaches_1e5_elements() {
    // r = 100: A [100, 256] = 25,600 elements (8-bit, unpaged: 2 × 25,600 + 2 × (100 blocks
    // × 4 B = 400 → 512) = 52,224 B), B [1024, 100] = 102,400 elements (state1/state2 paged,
    // 2 × 102,400 = 204,800 B in unified memory; absmax on the device: 400 blocks × 4 B =
    // 1,600 → 2,048, twice = 4,096 B), qmaps 2,048 B. On the device 52,224 + 4,096 + 2,048 =
    // 58,368 B; in all 263,168 B. (As one tensor of 128,000 elements it was paged whole: on
    // the device 2 × 2,048 + 2,048 = 6,144 B.)
    let r = common::run_job(up_proj_lora(100, "adamw-8bit-paged"));
    assert_eq!(r.per_gpu.paged_states, Some(204_800));
    assert_eq!(r.per_gpu.model_states.optimizer_states, 263_168);
}

/// Llama-3.2-1B, bf16, b1 × 512, LoRA r 16 on all seven linear modules.
fn llama_1b_all_linear(optimizer: &str) -> Value {
    json!({"model": "llama-3.2-1b", "batch": 1, "seq": 512, "precision": "bf16",
           "optimizer": optimizer, "attention": "sdpa",
           "peft": {"method": "lora", "rank": 16, "targets":
               ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}})
}

#[test]
fn the_stream_loads_each_a_and_b_at_its_own_size() {
    // Llama-3.2-1B: hidden 2048, KV 8 × 64 = 512, MLP 8192, 16 layers; fp32 adapters, r 16.
    // Per layer, A [16, in] and B [out, 16], × 4 B:
    //   q, o: A 131,072, B 131,072; k, v: A 131,072, B 512 × 16 × 4 = 32,768;
    //   gate, up: A 131,072, B 8192 × 16 × 4 = 524,288; down: A 524,288, B 131,072.
    // So 9 of 131,072 B, 2 of 32,768 B and 3 of 524,288 B per layer, × 16 layers. No bf16
    // base tensor has any of these sizes (the norms are 4,096 B, the projections ≥ 2 MiB).
    let s = stream_of(&llama_1b_all_linear("adamw"));
    let load = allocs_in(&s, Phase::Load, |_| true);
    let count = |b: u64| load.iter().filter(|&&x| x == b).count();
    assert_eq!(count(131_072), 9 * 16);
    assert_eq!(count(32_768), 2 * 16);
    assert_eq!(count(524_288), 3 * 16);
}

#[test]
fn stream_and_walk_agree_on_llama_1b_lora() {
    for opt in ["adamw", "adamw-8bit-paged"] {
        assert_stream_meets_walk(&llama_1b_all_linear(opt));
    }
}

#[test]
fn llama_8b_paged_8bit_keeps_the_small_halves_on_the_device() {
    // Llama-3.1-8B: hidden 4096, KV 1024, MLP 14336, 32 layers; r 16, all seven modules.
    // Per layer: A [16, 4096] = 65,536 elements for q, k, v, o, gate, up; A down [16, 14336]
    // = 229,376; B q, o, down [4096, 16] = 65,536; B k, v [1024, 16] = 16,384; B gate, up
    // [14336, 16] = 229,376. Paged (≥ 1e5): A down, B gate, B up, their state1/state2 in
    // unified memory: 3 × 2 × 229,376 = 1,376,256 B per layer, × 32 = 44,040,192 B. On the
    // device: nine tensors of 65,536 (2 × 65,536 + 2 × 256 blocks × 4 B = 133,120 B each),
    // two of 16,384 (2 × 16,384 + 2 × (64 × 4 = 256 → 512) = 33,792 B each), and the paged
    // three's absmax (896 blocks × 4 B = 3,584 B, twice: 7,168 B each): 1,198,080 + 67,584 +
    // 21,504 = 1,287,168 B per layer, × 32 = 41,189,376, and the qmaps' 2,048 B: 41,191,424.
    let mut job = llama_1b_all_linear("adamw-8bit-paged");
    job["model"] = json!("llama-3.1-8b");
    let r = common::run_job(job);
    assert_eq!(r.per_gpu.paged_states, Some(44_040_192));
    assert_eq!(r.per_gpu.components.optimizer_states, 41_191_424);
}
