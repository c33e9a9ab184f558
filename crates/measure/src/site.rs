//! The name of an allocation site: the one frame of a stack that says where the bytes were
//! asked for.
//!
//! A stack recorded with `stacks="all"` (torch/csrc/profiler/combined_traceback.cpp,
//! `CapturedTraceback::gather` → `torch::unwind::unwind`) starts with the unwinder's own frames,
//! then the caching allocator's (libc10_cuda, often unsymbolised `??`), then the factory that
//! asked (`at::detail::empty_cuda`, `at::_ops::empty_memory_format`), and only then the operator
//! and whatever called it: Python frames interleaved where the interpreter ran, or, on the
//! autograd engine's own thread, the autograd node (`torch::autograd::generated::MmBackward0`).
//! In order of preference the site is:
//! 1. the first Python frame outside torch and the installed packages (the user's line);
//! 2. the first Python frame that is not torch's dispatch plumbing (a library's line);
//! 3. for a stack without Python: the operator (`at::_ops::NAME`, factories skipped) with the
//!    autograd node that ran it, or the cuBLAS handle whose workspace it is;
//! 4. the first frame with a name that is neither the unwinder's nor the allocator's;
//! 5. the first frame.

use crate::snapshot::Frame;

/// Torch's Python plumbing between a call and the kernel (the `torch.device` context's
/// `__torch_function__`, the override dispatcher, Tensor's operator wrappers, `Module.__call__`).
fn is_dispatch_plumbing(file: &str) -> bool {
    [
        "torch/utils/_device.py",
        "torch/overrides.py",
        "torch/_tensor.py",
        "torch/nn/modules/module.py",
    ]
    .iter()
    .any(|p| file.contains(p))
}

/// A native frame that says nothing about where: unsymbolised, the unwinder's, the caching
/// allocator's, a factory's, or the interpreter's / C library's.
fn is_uninformative(name: &str) -> bool {
    name.is_empty()
        || name == "??"
        || name.starts_with("torch::unwind::")
        || name.contains("CapturedTraceback")
        || name.starts_with("c10::")
        || name.contains("CUDACachingAllocator")
        || name.starts_with("at::detail::empty")
        || name.starts_with("at::native::empty")
        || name.starts_with("at::empty")
        || name.starts_with("at::_ops::empty")
        || name.starts_with("at::_ops::_empty")
        || name.starts_with("at::TensorIterator")
        || name.starts_with("at::meta::")
        || name.starts_with("_Py")
        || name.starts_with("Py")
        || name.starts_with("__libc")
        || name == "_start"
}

/// A C++ name without its parameter list and anonymous namespaces:
/// `at::_ops::mm::call(at::Tensor const&, ...)` → `at::_ops::mm::call`.
fn strip_args(name: &str) -> String {
    let n = name.replace("(anonymous namespace)::", "");
    n.split('(').next().unwrap_or(&n).trim().to_string()
}

/// The autograd node a native frame runs, if it is one: `torch::autograd::generated::
/// MmBackward0::apply` (or its `_apply_functional`) → `MmBackward0`;
/// `torch::autograd::AccumulateGrad::apply` → `AccumulateGrad`. The engine, the forward's
/// `VariableType` wrappers and the formulas' helpers (`generated::details`) are not nodes.
fn autograd_node(n: &str) -> Option<&str> {
    if let Some(rest) = n.strip_prefix("torch::autograd::generated::") {
        let node = rest
            .strip_suffix("::apply")
            .or_else(|| rest.strip_suffix("_apply_functional"))?;
        return (!node.contains("::")).then_some(node);
    }
    let node = n
        .strip_prefix("torch::autograd::")?
        .strip_suffix("::apply")?;
    (!node.contains("::") && node != "Node").then_some(node)
}

/// What the native frames of a stack without Python say.
#[derive(Default)]
struct Native {
    op: Option<String>,
    node: Option<String>,
    blas: Option<String>,
    named: Option<String>,
}

impl Native {
    fn see(&mut self, name: &str) {
        let n = strip_args(name);
        if self.blas.is_none() && crate::attribute::is_blas_workspace(&n) {
            self.blas = Some(n.clone());
        }
        if self.op.is_none() {
            if let Some(rest) = n.strip_prefix("at::_ops::") {
                let op = rest.split("::").next().unwrap_or(rest);
                if !op.starts_with("empty") && !op.starts_with("_empty") {
                    self.op = Some(format!("at::_ops::{op}"));
                }
            }
        }
        if self.node.is_none() {
            self.node = autograd_node(&n).map(str::to_string);
        }
        if self.named.is_none() && !is_uninformative(&n) {
            self.named = Some(n);
        }
    }

    /// "at::_ops::mm (MmBackward0)", "cuBLAS workspace: at::cuda::getCurrentCUDABlasHandle
    /// (MmBackward0)", or the first named frame.
    fn site(self) -> Option<String> {
        let what = match self.blas {
            Some(b) => Some(format!("cuBLAS workspace: {b}")),
            None => self.op,
        };
        match (what, self.node) {
            (Some(w), Some(n)) => Some(format!("{w} ({n})")),
            (Some(w), None) => Some(w),
            (None, Some(n)) => Some(n),
            (None, None) => self.named,
        }
    }
}

/// A short, telling name for a stack (innermost frame first); see the module doc.
pub(crate) fn site_of<'a>(frames: impl Iterator<Item = &'a Frame>) -> String {
    let mut first = None;
    let mut first_py = None;
    let mut library_py = None;
    let mut native = Native::default();
    for f in frames {
        let profiler_text = f.filename == "none" || f.filename.is_empty();
        let file = if profiler_text {
            f.name.as_str()
        } else {
            f.filename.as_str()
        };
        let is_py = file.contains(".py");
        let text = || {
            if profiler_text {
                f.name.clone()
            } else if is_py {
                format!("{}:{} {}", f.filename, f.line, f.name)
            } else {
                strip_args(&f.name)
            }
        };
        if first.is_none() {
            first = Some(text());
        }
        if !is_py {
            native.see(&f.name);
            continue;
        }
        if first_py.is_none() {
            first_py = Some(text());
        }
        if library_py.is_none() && !is_dispatch_plumbing(file) {
            library_py = Some(text());
        }
        let internal = file.contains("torch/")
            || file.contains("site-packages/")
            || file.contains("dist-packages/");
        if !internal {
            return text();
        }
    }
    library_py
        .or(first_py)
        .or_else(|| native.site())
        .or(first)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::site_of;
    use crate::snapshot::Frame;

    fn fr(filename: &str, line: i64, name: &str) -> Frame {
        Frame {
            filename: filename.into(),
            line,
            name: name.into(),
        }
    }

    const LIB: &str = "/venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so";

    #[test]
    fn a_backward_op_on_the_autograd_thread_is_named_by_op_and_node() {
        // The shape of an H200 snapshot's backward allocation (stacks="all"): unwinder,
        // allocator (unsymbolised), factory, the op, the autograd node, the engine.
        let f = [
            fr(LIB, 1, "torch::unwind::unwind()"),
            fr(LIB, 2, "torch::CapturedTraceback::gather(bool, bool, bool)"),
            fr("libc10_cuda.so", 3, "??"),
            fr(LIB, 4, "at::detail::empty_generic(c10::ArrayRef<long>)"),
            fr(
                LIB,
                5,
                "at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>)",
            ),
            fr(
                LIB,
                6,
                "at::_ops::mm::call(at::Tensor const&, at::Tensor const&)",
            ),
            fr(
                LIB,
                7,
                "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor>&&)",
            ),
            fr(
                LIB,
                8,
                "torch::autograd::Engine::thread_main(std::shared_ptr<>)",
            ),
        ];
        assert_eq!(site_of(f.iter()), "at::_ops::mm (MmBackward0)");
    }

    #[test]
    fn autograd_nodes_and_not_the_engine() {
        use super::autograd_node;
        assert_eq!(
            autograd_node("torch::autograd::generated::BmmBackward0_apply_functional"),
            Some("BmmBackward0")
        );
        assert_eq!(
            autograd_node("torch::autograd::AccumulateGrad::apply"),
            Some("AccumulateGrad")
        );
        assert_eq!(
            autograd_node("torch::autograd::generated::details::pow_backward"),
            None
        );
        assert_eq!(autograd_node("torch::autograd::VariableType::bmm"), None);
        assert_eq!(autograd_node("torch::autograd::Engine::thread_main"), None);
        assert_eq!(
            super::strip_args("torch::autograd::VariableType::(anonymous namespace)::bmm(a, b)"),
            "torch::autograd::VariableType::bmm"
        );
    }

    #[test]
    fn a_cublas_workspace_says_so() {
        let f = [
            fr(LIB, 1, "torch::unwind::unwind()"),
            fr("libc10_cuda.so", 2, "??"),
            fr(
                "libtorch_cuda.so",
                3,
                "at::cuda::getCurrentCUDABlasHandle()",
            ),
            fr(
                "libtorch_cuda.so",
                4,
                "at::native::structured_mm_out_cuda::impl()",
            ),
            fr(
                LIB,
                5,
                "at::_ops::mm::call(at::Tensor const&, at::Tensor const&)",
            ),
            fr(LIB, 6, "torch::autograd::generated::MmBackward0::apply()"),
        ];
        assert_eq!(
            site_of(f.iter()),
            "cuBLAS workspace: at::cuda::getCurrentCUDABlasHandle (MmBackward0)"
        );
    }

    #[test]
    fn python_frames_win_and_plumbing_is_skipped() {
        // The user's line when there is one.
        let user = [
            fr(LIB, 1, "torch::unwind::unwind()"),
            fr(
                "/venv/site-packages/torch/utils/_device.py",
                116,
                "__torch_function__",
            ),
            fr(
                "/venv/site-packages/torch/nn/modules/linear.py",
                109,
                "__init__",
            ),
            fr("/home/u/train.py", 42, "build"),
        ];
        assert_eq!(site_of(user.iter()), "/home/u/train.py:42 build");
        // Without one: the first library line that is not torch's dispatch plumbing.
        let lib = &user[..3];
        assert_eq!(
            site_of(lib.iter()),
            "/venv/site-packages/torch/nn/modules/linear.py:109 __init__"
        );
        // Only unwinder frames: the first frame, as before.
        assert_eq!(site_of(user[..1].iter()), "torch::unwind::unwind");
    }
}
