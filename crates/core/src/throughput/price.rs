//! What a GPU-hour costs: the job's own `price_per_gpu_hour`, else a small built-in list of
//! on-demand prices, so `throughput.cost_per_million_tokens` has a figure for the common
//! cloud GPUs without a flag.
//!
//! The list is Lambda's public on-demand price list (<https://lambda.ai/instances>, US
//! dollars per GPU per hour, before tax), as transcribed verbatim on 2026-09-20 in
//! `api-evangelist/lambda-labs` `plans/lambda-labs-plans-pricing.yml` (commit 1929382).
//! One vendor's list, so the figures are comparable with each other; other clouds charge from
//! about half to three times as much for the same GPU, and prices move: pass
//! `--price-per-gpu-hour` for your own.

use serde::Serialize;

/// Where the list comes from, as the Report's `price_source` names it.
pub const LIST: &str = "Lambda on-demand list (lambda.ai/instances, read 2026-09-20)";

/// (catalog GPU id, [(GPUs per instance, dollars per GPU-hour)]) as the list prices them.
const PRICES: &[(&str, &[(u64, f64)])] = &[
    ("b200-192gb", &[(1, 6.99), (2, 6.89), (4, 6.79), (8, 6.69)]),
    ("h100-80gb", &[(1, 4.29), (2, 4.19), (4, 4.09), (8, 3.99)]),
    ("h100-pcie-80gb", &[(1, 3.29)]),
    ("gh200-96gb", &[(1, 2.29)]),
    ("a100-80gb", &[(8, 2.79)]),
    ("a100-40gb", &[(8, 1.99)]),
    ("a10-24gb", &[(1, 1.29)]),
    ("rtx-a6000-48gb", &[(4, 1.09)]),
    ("v100-16gb", &[(8, 0.79)]),
];

/// The price a cost is computed with, and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Price {
    pub per_gpu_hour: f64,
    /// `"job"` for the job's own `price_per_gpu_hour`, else the list and the instance shape.
    pub source: String,
}

/// The job's price when it gives one, else the list's for `gpu` in the instance shape nearest
/// the job's GPU count (the largest shape of at most `gpus` GPUs, or the smallest listed);
/// `None` for a GPU the list does not price.
pub fn resolve(job_price: Option<f64>, gpu: &str, gpus: u64) -> Option<Price> {
    if let Some(p) = job_price {
        return Some(Price {
            per_gpu_hour: p,
            source: "job".into(),
        });
    }
    let (_, shapes) = PRICES.iter().find(|(id, _)| *id == gpu)?;
    let (n, p) = shapes
        .iter()
        .rev()
        .find(|(n, _)| *n <= gpus.max(1))
        .or_else(|| shapes.first())?;
    Some(Price {
        per_gpu_hour: *p,
        source: format!("{LIST}: {n}-GPU instance"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_price_wins_over_the_list() {
        let p = resolve(Some(1.5), "h100-80gb", 16).unwrap();
        assert_eq!(p.per_gpu_hour, 1.5);
        assert_eq!(p.source, "job");
    }

    #[test]
    fn the_list_prices_the_nearest_instance_shape() {
        // lambda.ai/instances (read 2026-09-20): 8x H100 SXM $3.99, 4x $4.09, 1x $4.29 per
        // GPU-hour; 16 GPUs rent as 8-GPU instances, 5 as a 4-GPU one.
        assert_eq!(resolve(None, "h100-80gb", 16).unwrap().per_gpu_hour, 3.99);
        assert_eq!(resolve(None, "h100-80gb", 5).unwrap().per_gpu_hour, 4.09);
        assert_eq!(resolve(None, "h100-80gb", 1).unwrap().per_gpu_hour, 4.29);
        // A100 80GB is listed only as an 8-GPU instance ($2.79): one GPU takes that rate.
        let a100 = resolve(None, "a100-80gb", 1).unwrap();
        assert_eq!(a100.per_gpu_hour, 2.79);
        assert!(a100.source.contains("8-GPU instance"), "{}", a100.source);
    }

    #[test]
    fn an_unlisted_gpu_has_no_price() {
        assert_eq!(resolve(None, "mi300x-192gb", 8), None);
        assert_eq!(resolve(None, "t4-16gb", 1), None);
    }

    #[test]
    fn every_listed_gpu_is_in_the_catalog() {
        for (id, shapes) in PRICES {
            assert!(crate::gpu::find(id).is_ok(), "{id}");
            assert!(!shapes.is_empty());
        }
    }
}
