//! A DPO step as TRL's `DPOTrainer` runs it (`trl/trainer/dpo_trainer.py`, `_compute_loss`;
//! older releases `concatenated_forward` + `compute_ref_log_probs` in the same order): the
//! policy's forward on the chosen and rejected rows concatenated (twice the pairs), the
//! per-token log-probabilities of the labels by `selective_log_softmax`
//! (`trl/trainer/utils.py`), then the frozen reference's forward under `torch.no_grad()` on the
//! same rows and its log-probabilities, while the policy's outputs (a local of the loss
//! function) and everything its forward saved are alive; the sigmoid loss; the backward.
//!
//! A training job with `reference_model` (`frozen` or `precomputed`) is such a step, `batch`
//! being the pairs (TRL's `per_device_train_batch_size`); `task: "rl"` with `algorithm: "dpo"`
//! walks its policy step through [`edit`] too (`estimate/rl`).

use super::activations::ForwardPlan;
use super::input::ModelInput;
use super::overhead::round_size;
use super::simulate;
use super::stages::LossMemory;
use crate::error::CoreError;
use crate::job::{Precision, ReferenceModel, ResolvedJob, Task};
use crate::model::ModelSpec;
use crate::report::Report;

/// Whether a training job is a DPO step: it names a reference model, frozen or precomputed.
pub fn is_dpo(job: &ResolvedJob) -> bool {
    job.task == Task::Train && job.techniques.reference_model != ReferenceModel::None
}

/// The DPO step of a training job: the policy walked on `2 × batch` rows (chosen and
/// rejected) with TRL's loss and, for a frozen reference, its no-grad forward. The report
/// echoes the job as given (its `batch`: the pairs).
pub fn run(model: &ModelInput, job: &ResolvedJob) -> Result<Report, CoreError> {
    let rows = ResolvedJob {
        batch: job.batch.saturating_mul(2),
        ..job.clone()
    };
    let frozen = job.techniques.reference_model == ReferenceModel::Frozen;
    let edit = |spec: &ModelSpec, plan: &mut ForwardPlan| edit(spec, &rows, frozen, plan);
    let mut report = simulate::run_edited(model, &rows, Some(&edit))?;
    report.job = job.clone();
    Ok(report)
}

/// The widths of the DPO loss: the logits as the head makes them (`logits`), and as the loss
/// reads them (`read`). Under mixed precision the trainer's accelerate wrapper returns the
/// model's outputs converted to fp32 (`accelerate/utils/operations.py` `convert_outputs_to_fp32`,
/// applied by `Accelerator.prepare_model` with native AMP), so the loss reads fp32 logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Widths {
    logits: u64,
    read: u64,
}

fn widths(job: &ResolvedJob) -> Widths {
    let compute = match job.precision {
        Precision::Fp32 => 4,
        _ => 2,
    };
    let read = if job.precision.is_mixed() { 4 } else { compute };
    Widths {
        logits: compute,
        read,
    }
}

/// The byte sizes the loss works with: the logits `[R, s, V]` as made and as read, one shifted
/// row `[s−1, V]` and all shifted rows as one tensor, in the read width.
struct Sizes {
    logits: u64,
    read: u64,
    row: u64,
    rows: u64,
    all: u64,
}

fn sizes(spec: &ModelSpec, job: &ResolvedJob) -> Sizes {
    let w = widths(job);
    let v = spec.vocab_size.div_ceil(job.parallel.tp.max(1));
    let (r, s) = (job.batch, job.seq);
    let row = round_size(s.saturating_sub(1) * v * w.read);
    Sizes {
        logits: round_size(r * s * v * w.logits),
        read: round_size(r * s * v * w.read),
        row,
        rows: r * row,
        all: round_size(r * s.saturating_sub(1) * v * w.read),
    }
}

/// The policy's loss (`selective_log_softmax` on `logits[:, :-1]`, with grad). In fp32 the
/// labels' logits are gathered and each row's `logsumexp` is taken in turn: both save the
/// logits they read (`gather` its input whole, `logsumexp` its input and result), a row's
/// `exp` is the forward's temporary. In 16 bit each row's `log_softmax` is made in turn and
/// saved (its backward reads its output), the logits themselves are held only by the outputs
/// until the loss returns. In backward (torch `derivatives.yaml`: `logsumexp_backward`,
/// `_log_softmax_backward_data`, `unbind_backward` stacks the rows' gradients, `gather_backward`
/// scatters into zeros, `slice_backward` pads the shifted gradient back to `[R, s, V]`): the
/// rows' gradients and their stacked copy (16 bit); the stacked gradient and `gather`'s (fp32);
/// then the sliced gradient, `dlogits`, held while the head runs backward.
fn policy_loss(z: &Sizes, fp32_read: bool, mixed: bool) -> LossMemory {
    if fp32_read {
        LossMemory {
            saved: z.read,
            // Mixed: the 16-bit logits while their fp32 copy is made; else one row's `exp`.
            forward_transient: if mixed { z.logits.max(z.row) } else { z.row },
            backward_transient: 2 * z.all,
            dlogits: z.logits,
        }
    } else {
        LossMemory {
            saved: z.rows,
            forward_transient: z.logits,
            // Stacking: every row's gradient (the saved rows are released as they are read)
            // and the stacked copy; slicing: the stacked gradient and `dlogits`.
            backward_transient: z.all.max((z.all + z.logits).saturating_sub(z.rows)),
            dlogits: z.logits,
        }
    }
}

/// The reference's forward under `torch.no_grad()` on the same rows, on top of what the
/// policy holds then: the policy's 16-bit logits (its outputs are alive; fp32 ones are
/// already saved by the loss), and the larger of a block's no-grad working set (the
/// inference forward's) and the head's: its logits with one row's log-softmax temporary (under
/// mixed precision the 16-bit logits and their fp32 copy while it is made).
fn reference_forward(
    spec: &ModelSpec,
    job: &ResolvedJob,
    z: &Sizes,
    fp32_read: bool,
) -> Result<u64, CoreError> {
    let infer = ResolvedJob {
        task: Task::Infer,
        new_tokens: 0,
        ..job.clone()
    };
    let plan = super::activations::forward(spec, &infer, &mut Vec::new())?;
    let blocks = plan
        .layers
        .iter()
        .map(|l| l.forward_peak)
        .max()
        .unwrap_or(0);
    let head = if job.precision.is_mixed() {
        (z.logits + z.read).max(z.read + z.row)
    } else {
        z.logits + z.row
    };
    let policy_logits = if fp32_read { 0 } else { z.logits };
    Ok(policy_logits + blocks.max(head))
}

/// Replaces the plan's loss by the DPO loss on `job`'s rows and, with a reference model that
/// runs (`frozen`, or the PEFT base with its adapters disabled), sets its no-grad forward.
/// A plan without logits on this rank (a chunked loss, a pipeline's first stage) is left as is.
pub fn edit(
    spec: &ModelSpec,
    job: &ResolvedJob,
    reference: bool,
    plan: &mut ForwardPlan,
) -> Result<(), CoreError> {
    if plan.logits == 0 {
        return Ok(());
    }
    let z = sizes(spec, job);
    let fp32_read = widths(job).read == 4;
    plan.loss = policy_loss(&z, fp32_read, job.precision.is_mixed());
    if reference {
        plan.reference_forward = reference_forward(spec, job, &z, fp32_read)?;
    }
    Ok(())
}
