//! What blocks allocated before recording began were, inferred from what the record shows.
//!
//! People build the model (and often run a warm-up step) and only then call
//! `torch.cuda.memory._record_memory_history`: the blocks allocated before carry no
//! allocation stack. Two kinds exist in a snapshot: blocks still allocated at the dump (in
//! `segments`, never allocated in `device_traces`) and blocks freed in the trace without an
//! alloc ("ghosts": their only stack is their free's). The rules, in order, each with the
//! framework behaviour it relies on:
//!
//! 1. A ghost freed under `zero_grad` is a gradient (torch/optim/optimizer.py `zero_grad`
//!    sets `.grad = None`, freeing it). A ghost freed under the optimizer's step is optimizer
//!    state the step replaced: optimizers that write `state["m"] = beta1 * m + ...` (rather
//!    than the in-place `exp_avg.lerp_` of torch/optim/adam.py) free last step's moment when
//!    they store the new one. Sure when its size is one of the gradients' sizes.
//! 2. A block live throughout whose size matches a gradient the backward allocates
//!    (`AccumulateGrad` creates `.grad` with the parameter's shape,
//!    torch/csrc/autograd/functions/accumulate_grad.h), one block per gradient, is a
//!    parameter.
//! 3. With backward in the record but no gradient allocated in it (gradients accumulated into
//!    `.grad` kept from a warm-up step), blocks live throughout come in pairs of equal size,
//!    a parameter and its `.grad`: half of each size are parameters, half gradients.
//! 4. In a record with a forward and no backward (inference), blocks live throughout are
//!    the model's weights (and the inputs, a small share).
//!
//! Every inference is reported with its basis, its block count and bytes, and how sure it
//! is; what no rule explains stays unattributed.

use crate::attribute::Signals;
use serde::Serialize;
use std::collections::HashMap;
use vramscope_core::report::Category;

/// How sure an attribution is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    Low,
    Medium,
    High,
}

impl Confidence {
    pub fn name(self) -> &'static str {
        match self {
            Confidence::Low => "low",
            Confidence::Medium => "medium",
            Confidence::High => "high",
        }
    }
}

/// One inference made about blocks allocated before recording.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inference {
    pub category: &'static str,
    /// What it rests on, e.g. "gradient sizes".
    pub basis: &'static str,
    pub blocks: u64,
    pub bytes: u64,
    pub confidence: Confidence,
    /// Of `bytes`, those live at the peak.
    pub bytes_at_peak: u64,
}

impl Inference {
    /// One line for people: "weights inferred from gradient sizes: 324 blocks, 12.69 GiB
    /// (confidence high)".
    pub fn describe(&self) -> String {
        let what = match self.category {
            "parameters" => "weights",
            "optimizer_states" => "optimizer states",
            c => c,
        };
        format!(
            "{what} inferred from {}: {} blocks, {} (confidence {})",
            self.basis,
            self.blocks,
            human(self.bytes),
            self.confidence.name()
        )
    }
}

/// Bytes in GiB / MiB / KiB with two decimals.
pub(crate) fn human(b: u64) -> String {
    let f = b as f64;
    if f >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", f / (1u64 << 30) as f64)
    } else if f >= (1u64 << 20) as f64 {
        format!("{:.2} MiB", f / (1u64 << 20) as f64)
    } else {
        format!("{:.2} KiB", f / 1024.0)
    }
}

/// What the inference needs to know about one life.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Facts {
    /// Size for matching: the requested size (the trace's sizes are requests; a segment
    /// block's `size` is rounded up by the allocator).
    pub key: u64,
    /// Bytes counted in the replay.
    pub size: u64,
    /// Allocated before the first event.
    pub pre: bool,
    /// What the free's stack says, if it was freed in the record.
    pub freed_by: Option<Signals>,
    /// Its allocation carries no stack at all (allocated before history recording began).
    pub stackless: bool,
    /// Its allocation stack names a cuBLAS handle's workspace ([`Signals::blas_workspace`]).
    pub workspace: bool,
}

/// What the record as a whole shows.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RecordFacts {
    pub has_forward: bool,
    pub has_backward: bool,
}

/// No inference made about a life.
pub(crate) const NONE: u8 = u8::MAX;

/// The inferences and, per life, the index of the inference that set its category (or
/// [`NONE`]). Only lives without a category (or ghosts, whose only stack is their free) are
/// considered; `cats` is updated.
pub(crate) fn infer(
    facts: &[Facts],
    cats: &mut [Option<Category>],
    rec: RecordFacts,
) -> (Vec<Inference>, Vec<u8>) {
    let mut out = Outcome {
        list: Vec::new(),
        by_life: vec![NONE; facts.len()],
    };
    let grads = gradient_sizes(facts, cats);
    ghosts_by_free(facts, cats, &grads, &mut out);
    let resident = |cats: &[Option<Category>]| -> Vec<usize> {
        (0..facts.len())
            .filter(|&i| facts[i].pre && facts[i].freed_by.is_none() && cats[i].is_none())
            .collect()
    };
    other_workspaces(facts, cats, &resident(cats), &mut out);
    let resident = resident(cats);
    if !grads.is_empty() {
        match_gradients(facts, cats, &resident, grads, &mut out);
    } else if rec.has_backward {
        pair_with_grads(facts, cats, &resident, &mut out);
    }
    if rec.has_forward && !rec.has_backward {
        let all: Vec<_> = resident
            .iter()
            .filter(|&&i| cats[i].is_none() && facts[i].stackless)
            .map(|&i| (i, Category::Parameters))
            .collect();
        out.add(
            facts,
            cats,
            all.into_iter(),
            "residence before recording in a forward-only record",
            Confidence::Low,
        );
    }
    out.list.retain(|x| x.blocks > 0);
    (out.list, out.by_life)
}

struct Outcome {
    list: Vec<Inference>,
    by_life: Vec<u8>,
}

impl Outcome {
    /// Records one inference over `lives` (index, category), all of one category.
    fn add(
        &mut self,
        facts: &[Facts],
        cats: &mut [Option<Category>],
        lives: impl Iterator<Item = (usize, Category)>,
        basis: &'static str,
        confidence: Confidence,
    ) {
        let id = self.list.len().min(NONE as usize - 1) as u8;
        let mut inf: Option<Inference> = None;
        for (i, c) in lives {
            cats[i] = Some(c);
            self.by_life[i] = id;
            let x = inf.get_or_insert(Inference {
                category: c.name(),
                basis,
                blocks: 0,
                bytes: 0,
                confidence,
                bytes_at_peak: 0,
            });
            x.blocks += 1;
            x.bytes = x.bytes.saturating_add(facts[i].size);
        }
        self.list.extend(inf);
    }
}

/// Sizes (and counts) of the gradients the record shows by their allocation stacks (ghosts
/// excepted: their only stack is their free's).
fn gradient_sizes(facts: &[Facts], cats: &[Option<Category>]) -> HashMap<u64, u64> {
    let mut g = HashMap::new();
    for (f, c) in facts.iter().zip(cats) {
        let ghost = f.pre && f.freed_by.is_some();
        if !ghost && *c == Some(Category::Gradients) {
            *g.entry(f.key).or_insert(0) += 1;
        }
    }
    g
}

/// Rule 1: ghosts classified by what frees them.
fn ghosts_by_free(
    facts: &[Facts],
    cats: &mut [Option<Category>],
    grads: &HashMap<u64, u64>,
    out: &mut Outcome,
) {
    let ghost = |i: usize| facts[i].pre && facts[i].freed_by.is_some();
    let by = |i: usize| facts[i].freed_by.unwrap_or_default();
    let zero: Vec<_> = (0..facts.len())
        .filter(|&i| ghost(i) && by(i).zero_grad)
        .map(|i| (i, Category::Gradients))
        .collect();
    out.add(
        facts,
        cats,
        zero.into_iter(),
        "their frees by zero_grad",
        Confidence::High,
    );
    let step = |i: usize| ghost(i) && by(i).optimizer && !by(i).zero_grad;
    let (sure, unsure): (Vec<usize>, Vec<usize>) = (0..facts.len())
        .filter(|&i| step(i))
        .partition(|&i| grads.contains_key(&facts[i].key));
    let states = |v: Vec<usize>| v.into_iter().map(|i| (i, Category::OptimizerStates));
    out.add(
        facts,
        cats,
        states(sure),
        "their frees in the optimizer step (state replaced), gradient sizes",
        Confidence::High,
    );
    out.add(
        facts,
        cats,
        states(unsure),
        "their frees in the optimizer step (state replaced)",
        Confidence::Medium,
    );
}

/// Before rule 2: one resident block per workspace of its size in the record is another
/// handle's workspace.
fn other_workspaces(
    facts: &[Facts],
    cats: &mut [Option<Category>],
    resident: &[usize],
    out: &mut Outcome,
) {
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    for f in facts.iter().filter(|f| f.workspace && !f.pre) {
        *sizes.entry(f.key).or_insert(0) += 1;
    }
    let mut matched = Vec::new();
    for &i in resident {
        if let Some(n) = sizes.get_mut(&facts[i].key).filter(|n| **n > 0) {
            *n -= 1;
            matched.push((i, Category::Temporaries));
        }
    }
    out.add(
        facts,
        cats,
        matched.into_iter(),
        "the size of the cuBLAS workspace the record shows (another thread's handle)",
        Confidence::Medium,
    );
}

/// Rule 2: one resident block per gradient of its size is a parameter.
fn match_gradients(
    facts: &[Facts],
    cats: &mut [Option<Category>],
    resident: &[usize],
    mut grads: HashMap<u64, u64>,
    out: &mut Outcome,
) {
    let wanted: u64 = grads.values().sum();
    let mut matched = Vec::new();
    for &i in resident {
        if let Some(n) = grads.get_mut(&facts[i].key).filter(|n| **n > 0) {
            *n -= 1;
            matched.push((i, Category::Parameters));
        }
    }
    // Every gradient found its parameter: as sure as sizes can make it.
    let confidence = if matched.len() as u64 * 10 >= wanted * 9 {
        Confidence::High
    } else {
        Confidence::Medium
    };
    out.add(
        facts,
        cats,
        matched.into_iter(),
        "gradient sizes",
        confidence,
    );
}

/// Rule 3: resident blocks of one size in pairs: the first half parameters, the rest their
/// gradients (the allocator cannot tell which is which; the bytes are what matter).
fn pair_with_grads(
    facts: &[Facts],
    cats: &mut [Option<Category>],
    resident: &[usize],
    out: &mut Outcome,
) {
    let mut by_key: HashMap<u64, Vec<usize>> = HashMap::new();
    for &i in resident {
        by_key.entry(facts[i].key).or_default().push(i);
    }
    let mut params = Vec::new();
    let mut grads = Vec::new();
    for v in by_key.values() {
        let half = v.len() / 2;
        params.extend(v[..half].iter().map(|&i| (i, Category::Parameters)));
        grads.extend(v[half..2 * half].iter().map(|&i| (i, Category::Gradients)));
    }
    params.sort_unstable_by_key(|p| p.0);
    grads.sort_unstable_by_key(|p| p.0);
    let basis = "pairs of equal sizes (a weight and its .grad)";
    out.add(facts, cats, params.into_iter(), basis, Confidence::Medium);
    out.add(facts, cats, grads.into_iter(), basis, Confidence::Medium);
}

/// Confidence of each category at the peak: the weakest inference contributing at least 1% of
/// its bytes there; categories set from stacks, metadata or the profiler are "high".
pub fn confidence_at_peak(
    at_peak: &[(Category, u64)],
    inferences: &[Inference],
) -> std::collections::BTreeMap<&'static str, Confidence> {
    let mut m = std::collections::BTreeMap::new();
    for &(c, bytes) in at_peak {
        if bytes == 0 || c == Category::Unattributed {
            continue;
        }
        let weakest = inferences
            .iter()
            .filter(|x| x.category == c.name() && x.bytes_at_peak * 100 >= bytes)
            .map(|x| x.confidence)
            .min()
            .unwrap_or(Confidence::High);
        m.insert(c.name(), weakest);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(key: u64, pre: bool, freed_by: Option<Signals>) -> Facts {
        Facts {
            key,
            size: key,
            pre,
            freed_by,
            stackless: true,
            workspace: false,
        }
    }

    #[test]
    fn weights_match_gradient_sizes_one_for_one() {
        // Two gradients of 40 B and one of 8 B allocated in the record; resident blocks of
        // 40, 40, 40 and 8 B: two 40s and the 8 are weights, the third 40 is left alone.
        let mut facts = vec![
            fact(40, false, None),
            fact(40, false, None),
            fact(8, false, None),
        ];
        facts.extend([40, 40, 40, 8].map(|k| fact(k, true, None)));
        let mut cats = vec![Some(Category::Gradients); 3];
        cats.extend([None; 4]);
        let rec = RecordFacts {
            has_forward: true,
            has_backward: true,
        };
        let (list, by_life) = infer(&facts, &mut cats, rec);
        assert_eq!(list.len(), 1);
        assert_eq!((list[0].blocks, list[0].bytes), (3, 88));
        assert_eq!(list[0].confidence, Confidence::High);
        assert_eq!(
            cats[3..],
            [
                Some(Category::Parameters),
                Some(Category::Parameters),
                None,
                Some(Category::Parameters)
            ]
        );
        assert_eq!(by_life[5], NONE);
        assert_eq!(
            list[0].describe(),
            "weights inferred from gradient sizes: 3 blocks, 0.09 KiB (confidence high)"
        );
    }

    #[test]
    fn ghosts_are_classified_by_what_frees_them() {
        let step = Signals {
            optimizer: true,
            ..Signals::default()
        };
        let zero = Signals {
            optimizer: true,
            zero_grad: true,
            ..Signals::default()
        };
        // A gradient of 16 B in the record; ghosts: 16 B freed by the step (a moment of a
        // gradient's size), 24 B freed by the step, 16 B freed by zero_grad.
        let facts = [
            fact(16, false, None),
            fact(16, true, Some(step)),
            fact(24, true, Some(step)),
            fact(16, true, Some(zero)),
        ];
        let mut cats = vec![
            Some(Category::Gradients),
            Some(Category::Temporaries),
            Some(Category::Temporaries),
            Some(Category::Temporaries),
        ];
        let (list, _) = infer(&facts, &mut cats, RecordFacts::default());
        assert_eq!(
            cats,
            [
                Some(Category::Gradients),
                Some(Category::OptimizerStates),
                Some(Category::OptimizerStates),
                Some(Category::Gradients)
            ]
        );
        let conf: Vec<_> = list.iter().map(|x| (x.category, x.confidence)).collect();
        assert_eq!(
            conf,
            [
                ("gradients", Confidence::High),
                ("optimizer_states", Confidence::High),
                ("optimizer_states", Confidence::Medium)
            ]
        );
    }

    #[test]
    fn pairs_without_gradients_in_the_record_split_in_halves() {
        // Backward ran but allocated no gradient: resident 4 × 32 B and 3 × 8 B → one pair of
        // 32 B weights + grads twice, one 8 B pair, one 8 B left over.
        let facts: Vec<_> = [32, 32, 32, 32, 8, 8, 8]
            .map(|k| fact(k, true, None))
            .to_vec();
        let mut cats = vec![None; 7];
        let rec = RecordFacts {
            has_forward: true,
            has_backward: true,
        };
        let (list, _) = infer(&facts, &mut cats, rec);
        let sums: Vec<_> = list
            .iter()
            .map(|x| (x.category, x.blocks, x.bytes))
            .collect();
        assert_eq!(sums, [("parameters", 3, 72), ("gradients", 3, 72)]);
        assert_eq!(cats.iter().filter(|c| c.is_none()).count(), 1);
    }

    #[test]
    fn forward_only_residents_are_low_confidence_weights() {
        let facts = [fact(100, true, None), fact(4, false, None)];
        let mut cats = vec![None, Some(Category::Activations)];
        let rec = RecordFacts {
            has_forward: true,
            has_backward: false,
        };
        let (list, _) = infer(&facts, &mut cats, rec);
        assert_eq!(cats[0], Some(Category::Parameters));
        assert_eq!(list[0].confidence, Confidence::Low);
        // Nothing inferred without a forward in the record (a state-only snapshot).
        let mut cats = vec![None, None];
        let (list, _) = infer(&facts, &mut cats, RecordFacts::default());
        assert!(list.is_empty() && cats[0].is_none());
    }

    #[test]
    fn confidence_is_the_weakest_sizable_inference() {
        let inf = |c: Confidence, at_peak: u64| Inference {
            category: "parameters",
            basis: "x",
            blocks: 1,
            bytes: at_peak,
            confidence: c,
            bytes_at_peak: at_peak,
        };
        // 1000 B of parameters at the peak: a low inference of 5 B (< 1%) does not count, a
        // medium one of 10 B (1%) does.
        let list = [inf(Confidence::Low, 5), inf(Confidence::Medium, 10)];
        let m = confidence_at_peak(
            &[(Category::Parameters, 1000), (Category::Gradients, 7)],
            &list,
        );
        assert_eq!(m.get("parameters"), Some(&Confidence::Medium));
        assert_eq!(m.get("gradients"), Some(&Confidence::High));
    }

    #[test]
    fn a_resident_block_of_a_recorded_workspace_size_is_the_other_handles() {
        // The autograd thread's workspace (8,519,680 B, CUBLAS_WORKSPACE_CONFIG's default
        // :4096:2:16:8) allocated in the record; two resident blocks of that size: one is the
        // main thread's workspace, the other stays for the later rules (here unexplained).
        let ws = 2 * 4096 * 1024 + 8 * 16 * 1024;
        let mut facts = vec![fact(ws, false, None)];
        facts[0].workspace = true;
        facts.extend([fact(ws, true, None), fact(ws, true, None)]);
        let mut cats = vec![Some(Category::Temporaries), None, None];
        let (list, _) = infer(&facts, &mut cats, RecordFacts::default());
        assert_eq!(cats[1], Some(Category::Temporaries));
        assert_eq!(cats[2], None);
        assert_eq!((list[0].blocks, list[0].bytes), (1, ws));
    }
}
