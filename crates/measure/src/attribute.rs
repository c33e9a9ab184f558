//! Attribution: which of the shared categories (`vramscope_core::report::Category`) an
//! allocation belongs to, from what the record says about it.
//!
//! In order of trust: the profiler's own `category` (only in profiler-derived data,
//! `torch/profiler/_memory_profiler.py`); `user_metadata` set with
//! `torch.cuda.memory._set_memory_metadata` (a JSON object with `"category"`); then the
//! allocation's stack and lifetime:
//! - under `torch/optim/` (`step`, `_multi_tensor_adamw`, ...): created in `_init_group` or
//!   alive at the end of the record → optimizer states, freed within → step temporaries;
//! - under backward / the autograd engine: `AccumulateGrad`, alive at the end, or freed by
//!   `zero_grad`/the optimizer → gradients; freed within backward → temporaries;
//! - a cuBLAS handle's workspace (`at::cuda::getCurrentCUDABlasHandle` /
//!   `getCUDABlasLtWorkspace`, aten/src/ATen/cuda/CublasHandlePool.cpp: one workspace per
//!   (handle, stream), taken through the caching allocator and kept) → temporaries, whichever
//!   thread asked for it (the autograd engine's own thread gets its own handle);
//! - `load_state_dict` / `_apply` (`.to()`, `.cuda()`) / `reset_parameters` → parameters;
//! - built with the model (a module's `__init__` in torch/nn/modules/, transformers'
//!   `from_config` / `_init_weights` / `post_init`, or any `__init__` whose factory call
//!   `torch.device(...)`'s context redirected, torch/utils/_device.py `__torch_function__`):
//!   alive at the end, or freed later than construction → parameters (with the model's buffers,
//!   which the allocator cannot tell apart); freed while still constructing → temporaries;
//!   a module's globals made while it is imported during construction stay unattributed;
//! - a module `forward`: freed again inside forward → temporaries, else activations
//!   (saved for backward).
//!
//! Anything else stays unattributed and is reported as such.

use crate::snapshot::{Frame, ProfCategory};
use vramscope_core::report::Category;

/// The step phase an event happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Setup,
    Forward,
    Backward,
    Optimizer,
    Unknown,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Setup => "setup",
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
            Phase::Unknown => "unknown",
        }
    }

    fn parse(s: &str) -> Option<Phase> {
        let s = s.trim().trim_matches('#').trim().to_ascii_lowercase();
        Some(match s.as_str() {
            "forward" | "fwd" => Phase::Forward,
            "backward" | "bwd" => Phase::Backward,
            "optimizer" | "optimizer_step" | "optim" | "step" => Phase::Optimizer,
            "setup" | "init" | "load" => Phase::Setup,
            _ => return None,
        })
    }
}

/// Profiler category → shared category. INPUT counts as activations (the contract counts the
/// model inputs there); AUTOGRAD_DETAIL (outputs of backward ops, e.g. dlogits) as temporaries.
pub fn from_profiler(c: ProfCategory) -> Option<Category> {
    Some(match c {
        ProfCategory::Parameter => Category::Parameters,
        ProfCategory::OptimizerState => Category::OptimizerStates,
        ProfCategory::Input | ProfCategory::Activation => Category::Activations,
        ProfCategory::Temporary | ProfCategory::AutogradDetail => Category::Temporaries,
        ProfCategory::Gradient => Category::Gradients,
        ProfCategory::Unknown => return None,
    })
}

/// What a stack says, as flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Signals {
    pub optimizer: bool,
    pub init_group: bool,
    pub zero_grad: bool,
    pub backward: bool,
    pub accumulate_grad: bool,
    pub forward: bool,
    pub params: bool,
    /// Under a compiled graph's forward: AOTAutograd's `CompiledFunction.forward`
    /// (torch/_functorch/_aot_autograd/runtime_wrappers.py) or an inductor-generated `call`
    /// (the module inductor writes to its cache dir, `torchinductor_<user>/xx/<hash>.py`).
    pub compiled_forward: bool,
    /// Under a compiled graph's backward: `CompiledFunction.backward` / `_backward_impl` in
    /// runtime_wrappers.py.
    pub compiled_backward: bool,
    /// Under a KV cache's code: transformers/cache_utils.py or a copy of it (`DynamicCache.update`,
    /// `StaticCache`, `QuantizedCache`, ...), vLLM's cache engine / KV cache allocation
    /// (vllm/worker/cache_engine.py, `*kv_cache*` functions of vllm/v1/worker), SGLang's pools
    /// (sglang/srt/mem_cache/memory_pool.py).
    pub kv_cache: bool,
    /// Under model construction (see the module doc): a module's `__init__` in
    /// torch/nn/modules/, transformers' `from_config` / `_from_config` / `_init_weights` /
    /// `init_weights` / `post_init`, or an `__init__` under `torch.device(...)`'s factory
    /// redirection (torch/utils/_device.py `DeviceContext.__torch_function__`).
    pub construct: bool,
    /// A cuBLAS / cuBLASLt handle's workspace (aten/src/ATen/cuda/CublasHandlePool.cpp:
    /// `getCurrentCUDABlasHandle` sets a workspace per (handle, stream) from the caching
    /// allocator, `getCUDABlasLtWorkspace` likewise; kept until the handle goes).
    pub blas_workspace: bool,
}

/// Functions that build a model: transformers' `PreTrainedModel` construction
/// (modeling_utils.py `_from_config`, auto_factory.py `from_config`, `post_init` →
/// `init_weights` → `_init_weights`).
const CONSTRUCTION: [&str; 5] = [
    "from_config",
    "_from_config",
    "_init_weights",
    "init_weights",
    "post_init",
];

/// What a stack says about model construction ([`Signals::construct`]), frame by frame.
#[derive(Default)]
struct Building {
    /// A module's `__init__` in torch/nn/modules/, or a `CONSTRUCTION` function.
    sure: bool,
    /// Some `__init__`, and torch/utils/_device.py's factory redirection.
    init: bool,
    device_ctx: bool,
    /// Under an import (importlib's frames).
    importing: bool,
}

impl Building {
    fn see(&mut self, file: &str, name: &str, fun: &str) {
        let in_file = |p: &str| file.contains(p) || name.contains(p);
        if fun == "__init__" {
            self.init = true;
            self.sure |= in_file("torch/nn/modules/");
        }
        self.sure |= CONSTRUCTION.contains(&fun);
        self.device_ctx |= in_file("torch/utils/_device.py");
        self.importing |= in_file("importlib") || fun == "exec_module";
    }

    /// A module imported while the model is built (transformers imports lazily) makes its
    /// globals under the same device context: they are the module's, not the model's.
    fn finish(&self) -> bool {
        (self.sure || self.init && self.device_ctx) && !self.importing
    }
}

/// Whether a C++ frame is a BLAS handle's workspace being set up (see
/// [`Signals::blas_workspace`]).
pub(crate) fn is_blas_workspace(name: &str) -> bool {
    name.contains("getCurrentCUDABlasHandle")
        || name.contains("getCurrentCUDABlasLtHandle")
        || name.contains("getCUDABlasLtWorkspace")
        || name.contains("CublasHandlePool")
}

/// Whether a frame is a KV cache's (see [`Signals::kv_cache`]). Research code often carries
/// its own copy of transformers' cache module (`cache_utils_V2.py` in KIVI forks): any
/// `cache_utils*.py` counts.
fn is_kv_cache(file: &str, fun: &str) -> bool {
    let base = file.rsplit('/').next().unwrap_or(file);
    (base.starts_with("cache_utils") && base.contains(".py"))
        || file.contains("sglang/srt/mem_cache/")
        || file.contains("vllm/worker/cache_engine.py")
        || (file.contains("vllm/") && fun.contains("kv_cache"))
}

/// Whether a frame is the autograd engine running backward: `torch.autograd.backward` /
/// `grad` (torch/autograd/__init__.py, graph.py `_engine_run_backward`), `Tensor.backward`,
/// the C++ engine. `torch/autograd/function.py` (`Function.apply`) is not: it runs a custom
/// function's *forward* (torch.compile's `CompiledFunction` among them).
fn is_backward(file: &str, name: &str, fun: &str) -> bool {
    let autograd_file = |f: &str| f.contains("torch/autograd/") && !f.contains("function.py");
    fun == "backward"
        || fun.contains("run_backward")
        || autograd_file(file)
        || autograd_file(name)
        || name.contains("autograd::engine")
        || name.contains("torch::autograd::Engine")
}

/// The function name of a frame: profiler-derived frames put `file.py(123): func` in `name`.
fn func(name: &str) -> &str {
    match name.rfind("): ") {
        Some(i) => &name[i + 3..],
        None => name,
    }
}

pub fn signals<'a>(frames: impl Iterator<Item = &'a Frame>) -> Signals {
    let mut s = Signals::default();
    let mut building = Building::default();
    for f in frames {
        // Windows paths (`site-packages\\torch\\optim\\adamw.py`) read as POSIX ones.
        let name_n = f.name.replace('\\', "/");
        let file_n = f.filename.replace('\\', "/");
        let name = name_n.as_str();
        let file = file_n.as_str();
        let fun = func(name);
        if file.contains("torch/optim/")
            || name.contains("torch/optim/")
            || name.starts_with("Optimizer.step")
            || fun.starts_with("_multi_tensor_")
            || fun.starts_with("_single_tensor_")
            || fun.starts_with("_fused_adam")
        {
            s.optimizer = true;
        }
        if fun == "_init_group" {
            s.init_group = true;
        }
        if fun == "zero_grad" || name.starts_with("Optimizer.zero_grad") {
            s.zero_grad = true;
        }
        if name.contains("AccumulateGrad") {
            s.accumulate_grad = true;
            s.backward = true;
        }
        if is_backward(file, name, fun) {
            s.backward = true;
        }
        let aot = file.contains("_aot_autograd/") || name.contains("_aot_autograd/");
        if aot && fun == "forward" || fun == "call" && file.contains("torchinductor") {
            s.compiled_forward = true;
        }
        if aot && (fun == "backward" || fun == "_backward_impl") {
            s.compiled_backward = true;
        }
        if is_kv_cache(file, fun) || is_kv_cache(name, fun) {
            s.kv_cache = true;
        }
        if matches!(
            fun,
            "load_state_dict"
                | "_load_from_state_dict"
                | "_apply"
                | "reset_parameters"
                | "from_pretrained"
                | "load_checkpoint"
        ) || (fun == "to" || fun == "cuda")
            && (file.contains("torch/nn/") || name.contains("torch/nn/"))
        {
            s.params = true;
        }
        if fun == "forward" || name.starts_with("nn.Module: ") {
            s.forward = true;
        }
        if is_blas_workspace(name) {
            s.blas_workspace = true;
        }
        building.see(file, name, fun);
    }
    s.construct = building.finish();
    s
}

/// The phase an allocation stack belongs to.
pub fn phase_of(s: &Signals) -> Phase {
    if s.kv_cache {
        Phase::Forward
    } else if s.optimizer || s.zero_grad {
        Phase::Optimizer
    } else if s.backward {
        Phase::Backward
    } else if s.params || s.construct && !s.forward {
        Phase::Setup
    } else if s.forward {
        Phase::Forward
    } else {
        Phase::Unknown
    }
}

/// `user_metadata`: a phase name, or a JSON object with `"phase"` and/or `"category"`.
pub fn parse_metadata(meta: &str) -> (Option<Phase>, Option<Category>) {
    if meta.is_empty() {
        return (None, None);
    }
    if let Ok(serde_json::Value::Object(m)) = serde_json::from_str::<serde_json::Value>(meta) {
        let phase = m
            .get("phase")
            .and_then(|v| v.as_str())
            .and_then(Phase::parse);
        let cat = m
            .get("category")
            .and_then(|v| v.as_str())
            .and_then(category_by_name);
        return (phase, cat);
    }
    (Phase::parse(meta), category_by_name(meta))
}

pub fn category_by_name(s: &str) -> Option<Category> {
    Some(match s.trim() {
        "parameters" | "parameter" | "weights" => Category::Parameters,
        "gradients" | "gradient" => Category::Gradients,
        "optimizer_states" | "optimizer_state" => Category::OptimizerStates,
        "master_weights" => Category::MasterWeights,
        "activations" | "activation" => Category::Activations,
        "kv_cache" => Category::KvCache,
        "temporaries" | "temporary" => Category::Temporaries,
        _ => return None,
    })
}

/// How an allocation ended, as far as the record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Still allocated at the end of the record.
    AliveAtEnd,
    /// Freed, with what the free's stack says.
    Freed(Signals),
}

/// The category an allocation belongs to, or None (unattributed).
pub fn classify(
    hint: Option<ProfCategory>,
    meta_category: Option<Category>,
    alloc: &Signals,
    fate: Fate,
) -> Option<Category> {
    if let Some(c) = hint.and_then(from_profiler) {
        return Some(c);
    }
    if let Some(c) = meta_category {
        return Some(c);
    }
    if alloc.kv_cache {
        return Some(Category::KvCache);
    }
    if alloc.blas_workspace {
        return Some(Category::Temporaries);
    }
    if alloc.optimizer {
        return Some(match fate {
            _ if alloc.init_group => Category::OptimizerStates,
            Fate::AliveAtEnd => Category::OptimizerStates,
            Fate::Freed(_) => Category::Temporaries,
        });
    }
    if alloc.backward {
        return Some(match fate {
            _ if alloc.accumulate_grad => Category::Gradients,
            Fate::AliveAtEnd => Category::Gradients,
            Fate::Freed(f) if f.zero_grad || f.optimizer => Category::Gradients,
            Fate::Freed(_) => Category::Temporaries,
        });
    }
    if alloc.params {
        return Some(Category::Parameters);
    }
    if alloc.construct && !alloc.forward {
        return Some(match fate {
            Fate::Freed(f) if f.construct => Category::Temporaries,
            _ => Category::Parameters,
        });
    }
    if alloc.forward {
        return Some(match fate {
            Fate::Freed(f) if f.forward && !f.backward => Category::Temporaries,
            _ => Category::Activations,
        });
    }
    // User code outside any module (a loss computed in the training loop): what the autograd
    // engine frees while running backward was saved for it (torch/csrc/autograd/engine.cpp
    // releases a node's saved variables once it has run).
    match fate {
        Fate::Freed(f) if f.backward && !f.optimizer && !f.zero_grad => Some(Category::Activations),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fr(filename: &str, name: &str) -> Frame {
        Frame {
            filename: filename.into(),
            line: 0,
            name: name.into(),
        }
    }

    #[test]
    fn optimizer_state_vs_step_temporary() {
        let init = [
            fr("torch/optim/adamw.py", "_init_group"),
            fr("torch/optim/adamw.py", "step"),
        ];
        let s = signals(init.iter());
        assert_eq!(
            classify(None, None, &s, Fate::Freed(Signals::default())),
            Some(Category::OptimizerStates)
        );
        let sqrt = [fr("torch/optim/adamw.py", "_multi_tensor_adamw")];
        let s = signals(sqrt.iter());
        assert_eq!(
            classify(None, None, &s, Fate::Freed(s)),
            Some(Category::Temporaries)
        );
        assert_eq!(
            classify(None, None, &s, Fate::AliveAtEnd),
            Some(Category::OptimizerStates)
        );
    }

    #[test]
    fn profiler_frame_text_is_understood() {
        let f = [fr("none", "torch/optim/adam.py(140): _init_group")];
        let s = signals(f.iter());
        assert!(s.optimizer && s.init_group);
        let f = [fr("none", "torch/autograd/__init__.py(255): backward")];
        assert!(signals(f.iter()).backward);
    }

    #[test]
    fn metadata_category_and_phase() {
        assert_eq!(
            parse_metadata("{\"phase\":\"optimizer\"}"),
            (Some(Phase::Optimizer), None)
        );
        assert_eq!(
            parse_metadata("{\"category\":\"kv_cache\"}"),
            (None, Some(Category::KvCache))
        );
        assert_eq!(parse_metadata(""), (None, None));
    }

    #[test]
    fn compiled_forward_is_forward_not_backward() {
        // A compiled model's forward (innermost first): inductor's generated `call`, AOT
        // Autograd's CompiledFunction.forward, run through autograd's Function.apply.
        let f = [
            fr("/tmp/torchinductor_u/kb/ckbf.py", "call"),
            fr(
                "torch/_functorch/_aot_autograd/runtime_wrappers.py",
                "forward",
            ),
            fr("torch/autograd/function.py", "apply"),
            fr("model.py", "forward"),
        ];
        let s = signals(f.iter());
        assert!(s.compiled_forward && !s.backward);
        assert_eq!(phase_of(&s), Phase::Forward);
        assert_eq!(
            classify(None, None, &s, Fate::AliveAtEnd),
            Some(Category::Activations)
        );
        // Its backward: CompiledFunction.backward under the engine.
        let b = [
            fr("/tmp/torchinductor_u/p6/cp6j.py", "call"),
            fr(
                "torch/_functorch/_aot_autograd/runtime_wrappers.py",
                "backward",
            ),
        ];
        let s = signals(b.iter());
        assert!(s.compiled_backward && s.backward);
        assert_eq!(phase_of(&s), Phase::Backward);
    }

    #[test]
    fn kv_caches_and_windows_paths() {
        let f = [
            fr("site-packages/transformers/cache_utils.py", "update"),
            fr(
                "site-packages/transformers/models/llama/modeling_llama.py",
                "forward",
            ),
        ];
        let s = signals(f.iter());
        assert_eq!(
            classify(None, None, &s, Fate::AliveAtEnd),
            Some(Category::KvCache)
        );
        for f in [
            fr("vllm/worker/cache_engine.py", "_allocate_kv_cache"),
            fr("vllm/v1/worker/gpu_model_runner.py", "initialize_kv_cache"),
            fr("sglang/srt/mem_cache/memory_pool.py", "_create_buffers"),
        ] {
            let s = signals([f].iter());
            assert!(s.kv_cache, "{s:?}");
        }
        let f = [fr(
            "D:\\venv\\Lib\\site-packages\\torch\\optim\\adamw.py",
            "_init_group",
        )];
        let s = signals(f.iter());
        assert!(s.optimizer && s.init_group);
    }

    #[test]
    fn loss_outputs_freed_by_backward_were_saved_for_it() {
        // No module, optimizer or autograd frame at the allocation (a loss in the training
        // loop), freed by the autograd engine: saved for backward.
        let engine = [fr("??", "torch::autograd::Engine::thread_main")];
        let freed = signals(engine.iter());
        let none = Signals::default();
        assert_eq!(
            classify(None, None, &none, Fate::Freed(freed)),
            Some(Category::Activations)
        );
        assert_eq!(classify(None, None, &none, Fate::AliveAtEnd), None);
    }

    #[test]
    fn weights_built_under_a_device_context_are_parameters() {
        // `with torch.device("cuda"): AutoModelForCausalLM.from_config(...)`: nn.Linear's
        // torch.empty redirected by torch/utils/_device.py, under transformers' from_config.
        let linear = [
            fr("site-packages/torch/utils/_device.py", "__torch_function__"),
            fr("site-packages/torch/nn/modules/linear.py", "__init__"),
            fr(
                "site-packages/transformers/models/llama/modeling_llama.py",
                "__init__",
            ),
            fr(
                "site-packages/transformers/modeling_utils.py",
                "_from_config",
            ),
            fr("train.py", "build_model"),
        ];
        let s = signals(linear.iter());
        assert!(s.construct);
        assert_eq!(phase_of(&s), Phase::Setup);
        assert_eq!(
            classify(None, None, &s, Fate::AliveAtEnd),
            Some(Category::Parameters)
        );
        // A scratch tensor freed while still building (rotary frequencies' intermediates).
        assert_eq!(
            classify(None, None, &s, Fate::Freed(s)),
            Some(Category::Temporaries)
        );
        // A user's own module: `nn.Parameter(torch.ones(n))` in its __init__ under the context.
        let own = [
            fr("site-packages/torch/utils/_device.py", "__torch_function__"),
            fr("model.py", "__init__"),
        ];
        assert!(signals(own.iter()).construct);
        // A module imported while building (its globals), and an __init__ without a device
        // context or module file, are not construction.
        let import = [
            fr("site-packages/torch/utils/_device.py", "__torch_function__"),
            fr("site-packages/torchaudio/compliance/kaldi.py", "<module>"),
            fr("<frozen importlib._bootstrap>", "_call_with_frames_removed"),
            fr(
                "site-packages/transformers/modeling_utils.py",
                "_from_config",
            ),
        ];
        let s = signals(import.iter());
        assert!(!s.construct);
        assert_eq!(classify(None, None, &s, Fate::AliveAtEnd), None);
        assert!(!signals([fr("data.py", "__init__")].iter()).construct);
    }

    #[test]
    fn a_cublas_workspace_is_a_temporary_even_in_backward() {
        // aten/src/ATen/cuda/CublasHandlePool.cpp: the autograd thread's own handle takes its
        // workspace on its first matmul, and keeps it (alive at the end).
        let f = [
            fr("libc10_cuda.so", "??"),
            fr("libtorch_cuda.so", "at::cuda::getCurrentCUDABlasHandle()"),
            fr(
                "libtorch_cpu.so",
                "torch::autograd::generated::MmBackward0::apply()",
            ),
            fr("libtorch_cpu.so", "torch::autograd::Engine::thread_main()"),
        ];
        let s = signals(f.iter());
        assert!(s.blas_workspace && s.backward);
        assert_eq!(
            classify(None, None, &s, Fate::AliveAtEnd),
            Some(Category::Temporaries)
        );
    }
}
