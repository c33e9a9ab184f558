//! The optimizer step's temporaries over the trainable tensors, in the order the optimizer
//! walks them.

use super::adapters::adapter_width;
use super::full::Trained;
use super::rules::Rules;
use crate::error::CoreError;
use crate::estimate::optimizer;
use crate::inventory::Inventory;

/// The optimizer step's temporaries over the trainable tensors
/// ([`optimizer::step_scratch_runs_with`]): the class tallies, or where the figure depends on
/// the order (Adafactor, a per-parameter Adam loop) the tensors in parameter order (runs of
/// alike neighbours); the adapters after them.
pub(super) fn step_scratch(
    inv: &Inventory,
    r: &Rules,
    trained: &[Option<Trained>],
    adapters: &[([u64; 2], u64)],
) -> Result<u64, CoreError> {
    let mut runs: Vec<optimizer::Run> = Vec::new();
    if optimizer::scratch_follows_order(r.opt, r.imp) {
        let classes = &inv.tallies().tensor_class;
        let mut last = None;
        for (t, &c) in inv.tensors.iter().zip(classes) {
            let Some(tr) = trained
                .get(c as usize)
                .and_then(Option::as_ref)
                .filter(|_| r.on_rank(t.layer, t.component))
            else {
                continue;
            };
            match runs.last_mut() {
                Some(run) if last == Some(c) => run.count += 1,
                _ => runs.push(optimizer::Run {
                    shape: &tr.state_shape,
                    width: r.w.state,
                    count: 1,
                }),
            }
            last = Some(c);
        }
    } else {
        runs.extend(trained.iter().flatten().map(|tr| optimizer::Run {
            shape: &tr.state_shape,
            width: r.w.state,
            count: tr.count,
        }));
    }
    let width = adapter_width(r);
    runs.extend(adapters.iter().map(|(shape, count)| optimizer::Run {
        shape,
        width,
        count: *count,
    }));
    optimizer::step_scratch_runs_with(r.opt, r.imp, &runs)
}
