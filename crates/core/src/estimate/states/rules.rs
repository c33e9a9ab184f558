//! The per-class rules of one job: what is trained, at which width, and which tensors the
//! most-loaded rank holds (pipeline stage, expert parallelism).

use super::job_optimizer;
use super::profiles::Widths;
use crate::estimate::input::ModelInput;
use crate::inventory::{Component, LayerTally, ShapeTallies};
use crate::job::{Optimizer, Precision, ResolvedJob, Task};

/// What the per-class rules of one job read.
pub(super) struct Rules<'a> {
    pub(super) w: Widths,
    pub(super) opt: Optimizer,
    /// How the optimizer walks the parameters (job `optimizer_impl`).
    pub(super) imp: crate::job::OptimizerImpl,
    /// Every weight trained: a full fine-tune (not PEFT, not inference).
    pub(super) full: bool,
    pub(super) peft: Option<&'a crate::job::Peft>,
    /// Width of a weight as loaded: a PEFT base is frozen in 16 bit unless the job is fp32
    /// (PEFT users load the base with `torch_dtype=bfloat16`; there is no master copy of
    /// frozen weights), or PEFT's `prepare_model_for_kbit_training` cast it to fp32
    /// (`job::kbit_casts`: every fp16/bf16 parameter that is not a `Params4bit`; a quantized
    /// weight keeps its format, `stored_bytes`).
    pub(super) frozen_width: u64,
    /// Expert parallelism: each rank holds experts/ep of the routed experts (their gradients
    /// and states too); everything else is replicated over EP ranks.
    pub(super) ep: u64,
    /// Layers of the architecture.
    pub(super) layers: usize,
    /// The most-loaded rank of a pipeline is its first stage: the embeddings and the first
    /// ⌈L/pp⌉ blocks (the head and final norm sit on the last stage).
    pub(super) per_stage: usize,
    pub(super) pp: usize,
    /// Rows of a tied embedding (its gradient first appears at the head's backward).
    pub(super) tied_vocab: Option<u64>,
    /// Model components the job keeps frozen (`freeze`): no gradient, no optimizer state.
    pub(super) frozen: &'a [crate::vision::Part],
    /// The job feeds images: the vision tower and projector run ([`Part::runs`]); a part
    /// that does not run gets no gradient and no optimizer state, as a frozen one.
    ///
    /// [`Part::runs`]: crate::vision::Part::runs
    pub(super) images: bool,
    /// Gemma 3n: the projector part (its multimodal embedders) runs without images too.
    pub(super) embedders_always: bool,
    /// DeepSpeed's engine casts every parameter, LoRA's adapters included, to the model's
    /// width (`runtime/engine.py` `_configure_distributed_model` →
    /// `_cast_module_mixed_precision`, 0.19.8: bf16 under `bf16.enabled`), and its optimizer
    /// keeps them an fp32 master partition: the adapters take the profile's widths
    /// ([`Widths`]), not `peft.adapter_dtype`.
    pub(super) engine_casts: bool,
}

impl Rules<'_> {
    pub(super) fn of<'a>(model: &ModelInput, job: &'a ResolvedJob, w: Widths) -> Rules<'a> {
        let train = job.task == Task::Train;
        let peft = job.peft.as_ref().filter(|_| train);
        let layers = model.spec.as_ref().map_or(0, |s| s.num_layers()) as usize;
        let pp = job.parallel.pp.max(1) as usize;
        Rules {
            frozen_width: if peft.is_some()
                && crate::job::kbit_casts(job.techniques.kbit_prepare, &job.weights.value)
            {
                4
            } else if peft.is_some() && job.precision != Precision::Fp32 {
                2
            } else {
                w.param
            },
            w,
            opt: job_optimizer(job),
            imp: job.optimizer_impl,
            full: peft.is_none() && train,
            peft,
            ep: job.parallel.ep.max(1),
            layers,
            per_stage: layers.div_ceil(pp).max(1),
            pp,
            tied_vocab: model
                .spec
                .as_ref()
                .filter(|s| s.tied_embeddings())
                .map(|s| s.vocab_size),
            frozen: &job.freeze,
            images: job.images.is_some(),
            embedders_always: model.spec.as_ref().is_some_and(|s| s.gemma3n.is_some()),
            engine_casts: job.framework == crate::job::Framework::Deepspeed,
        }
    }

    /// Whether the job's forward runs `part` ([`crate::vision::Part::runs`]), with Gemma 3n's
    /// exception: `Gemma3nModel.forward` (transformers 5.24) runs its two multimodal embedders
    /// (the projector part) on every call, over dummy ids where the input has no image or audio
    /// token, so they get gradients from text alone.
    pub(super) fn runs(&self, part: crate::vision::Part) -> bool {
        part.runs(self.images) || (self.embedders_always && part == crate::vision::Part::Projector)
    }

    pub(super) fn ep_share(&self, c: Component) -> u64 {
        if c == Component::Experts {
            self.ep
        } else {
            1
        }
    }

    pub(super) fn on_rank(&self, layer: Option<u32>, c: Component) -> bool {
        match (layer, c) {
            (Some(l), _) => (l as usize) < self.per_stage,
            (None, Component::Embedding) => true,
            (None, _) => self.pp == 1,
        }
    }

    /// The layers the most-loaded rank holds.
    pub(super) fn layers_on_rank<'t>(
        &'t self,
        tl: &'t ShapeTallies,
    ) -> impl Iterator<Item = &'t LayerTally> {
        tl.layers
            .iter()
            .filter(|l| self.on_rank(Some(l.layer), Component::Attention))
    }

    /// The groups of alike tensors the most-loaded rank holds: (layer, class, tensors). The
    /// layers are taken per composition (`layer_kinds`), not one by one: a class's tensors in
    /// one layer times the rank's layers of that composition, with the composition's first
    /// layer standing for them (a 32-layer model with one composition is 7 groups, not 224).
    pub(super) fn on_rank_groups<'t>(
        &'t self,
        tl: &'t ShapeTallies,
    ) -> impl Iterator<Item = (Option<u32>, u32, u64)> + 't {
        let outside = tl
            .outside
            .iter()
            .filter(|(c, _)| self.on_rank(None, tl.classes[*c as usize].component))
            .map(|&(c, n)| (None, c, n));
        // (composition, its first layer, layers): in order of first appearance.
        let mut kinds: Vec<(u32, u32, u64)> = Vec::new();
        for l in self.layers_on_rank(tl) {
            match kinds.iter_mut().find(|(k, _, _)| *k == l.kind) {
                Some((_, _, n)) => *n += 1,
                None => kinds.push((l.kind, l.layer, 1)),
            }
        }
        let layered = kinds.into_iter().flat_map(move |(kind, first, layers)| {
            tl.layer_kinds[kind as usize]
                .iter()
                .map(move |&(c, n)| (Some(first), c, n.saturating_mul(layers)))
        });
        outside.chain(layered)
    }
}
