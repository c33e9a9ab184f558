//! The model states from a bare parameter count (no tensors known): every parameter trainable,
//! one flat tensor per state.

use super::profiles::Widths;
use super::{add_main_grads, div_ceil, job_optimizer, StateBytes};
use crate::error::CoreError;
use crate::estimate::input::ModelInput;
use crate::estimate::optimizer;
use crate::job::{Optimizer, ResolvedJob, Task};
use crate::report::ModelStates;

/// A bare parameter count: every parameter trainable, one flat tensor per state, divided over
/// the whole model-parallel group (tp × pp) as no layer boundaries are known.
pub(super) fn bare_count_states(
    model: &ModelInput,
    job: &ResolvedJob,
    w: Widths,
    (sp, sg, ss): (u64, u64, u64),
    warnings: &mut Vec<String>,
) -> Result<StateBytes, CoreError> {
    let mp = (job.parallel.tp * job.parallel.pp).max(1);
    let train = job.task == Task::Train;
    let opt = job_optimizer(job);
    let p = model.params_total;
    let format = crate::estimate::weights::effective_weights(model, job)?;
    let params = if format.is_none() {
        p.saturating_mul(w.param)
    } else {
        let dtype = if w.param == 4 {
            crate::DType::F32
        } else {
            crate::DType::BF16
        };
        crate::estimate::quant::bytes_for_params(&format, p, dtype)?
    };
    let grads = if train { p.saturating_mul(w.grad) } else { 0 };
    let master = if train { p.saturating_mul(w.master) } else { 0 };
    let states = optimizer::state_bytes(opt, &[p], w.state)?;
    if optimizer::scratch_follows_order(opt, job.optimizer_impl) && opt != Optimizer::Adafactor {
        warnings.push(format!(
            "optimizer_impl {} steps one parameter at a time; a bare parameter count has no \
             shapes, so the step's scratch is counted as foreach's (an upper bound)",
            job.optimizer_impl.as_str()
        ));
    }
    if opt == Optimizer::Adafactor {
        warnings.push(
            "adafactor factors each matrix's second moment; a bare parameter count has no \
             shapes, so its states are counted unfactored"
                .into(),
        );
    }
    let layers = model.spec.as_ref().map_or(0, |s| s.num_layers()) as usize;
    let mut out = StateBytes {
        layer_grads: vec![0; layers],
        ..StateBytes::default()
    };
    out.resident = ModelStates {
        parameters: div_ceil(params, sp * mp),
        gradients: div_ceil(grads, sg * mp),
        optimizer_states: div_ceil(states, ss * mp),
        master_weights: div_ceil(master, ss * mp),
    };
    out.max = out.resident;
    out.trainable_params = p;
    out.step_scratch = div_ceil(
        optimizer::step_scratch_bytes(opt, &[(&[p], w.state)])?,
        ss * mp,
    );
    let main_grads = if train {
        div_ceil(p.saturating_mul(w.main_grad), ss * mp)
    } else {
        0
    };
    add_main_grads(&mut out, main_grads);
    Ok(out)
}
