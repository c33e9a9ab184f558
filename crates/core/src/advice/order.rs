//! The order advice is listed in: the cost order of what each change gives up
//! ([`super::techniques`]), ties broken by the change's modelled time, and no change listed
//! ahead of one its own figures show [`FASTER`] times faster — a change that makes every token
//! take 28× longer (ZeRO-Offload's CPU update on one GPU) is not "cheaper" than pure bf16
//! (10 % faster) because host RAM and speed score fewer points than quality.

use super::Advice;
use std::cmp::Ordering;

/// How much faster (modelled time per token) a change must be to rank ahead of a cheaper one
/// whatever the points say: the issue's rule (#32, "no technique ranked cheaper than one its
/// own figures show is 30× faster").
pub const FASTER: f64 = 30.0;

/// A change's time per token against the job's (1 = the same; 28 = 28× longer); `None` where
/// either rate is unknown.
pub fn time_factor(a: &Advice) -> Option<f64> {
    a.time_cost.map(|c| 1.0 + c)
}

/// Whether `a` must be listed before `b`: its modelled time per token is at least [`FASTER`]
/// times shorter. A strict partial order (transitive: 30 · 30 ≥ 30; never both ways).
fn must_precede(a: &Advice, b: &Advice) -> bool {
    match (time_factor(a), time_factor(b)) {
        (Some(ta), Some(tb)) => tb >= FASTER * ta,
        _ => false,
    }
}

/// Cost first, then modelled time (a known time before an unknown one).
fn by_cost_then_time(a: &Advice, b: &Advice) -> Ordering {
    a.cost
        .cmp(&b.cost)
        .then_with(|| match (time_factor(a), time_factor(b)) {
            (Some(x), Some(y)) => x.total_cmp(&y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        })
}

/// Orders `items` (advice with anything carried along) by cost, ties by time, then moves each
/// change ahead of every one it is [`FASTER`] times faster than, keeping the cost order
/// otherwise: repeatedly the first remaining item that no remaining item must precede.
pub fn order<T>(items: Vec<T>, advice: impl Fn(&T) -> &Advice) -> Vec<T> {
    let mut rest = items;
    rest.sort_by(|a, b| by_cost_then_time(advice(a), advice(b)));
    let mut out = Vec::with_capacity(rest.len());
    while !rest.is_empty() {
        let i = (0..rest.len())
            .find(|&i| {
                !rest
                    .iter()
                    .any(|o| must_precede(advice(o), advice(&rest[i])))
            })
            .unwrap_or(0);
        out.push(rest.remove(i));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advice(name: &str, cost: u32, time_cost: Option<f64>) -> Advice {
        Advice {
            flags: vec![name.into()],
            changes: Default::default(),
            device_total: 0,
            headroom: 0,
            gives_up: String::new(),
            techniques: vec![name.into()],
            cost,
            time_cost,
            host_bytes: None,
            env: Default::default(),
            reserve_estimated: false,
        }
    }

    fn names(v: &[Advice]) -> Vec<&str> {
        v.iter().map(|a| a.flags[0].as_str()).collect()
    }

    /// The list: 8-bit AdamW (7 points, −15 %), ZeRO-Offload (8, +2,703 %), pure bf16
    /// (9, −10 %). Offload's step is 28.03× the job's, bf16's 0.90×: 28.03 / 0.90 = 31.1 ≥ 30,
    /// so bf16 goes ahead of offload; 8-bit AdamW (0.85×) stays first (cheapest, and offload
    /// is not 30× faster than it). Order: 8-bit, bf16, offload.
    #[test]
    fn a_thirty_times_faster_change_ranks_first() {
        let v = vec![
            advice("8bit", 7, Some(-0.15)),
            advice("offload", 8, Some(27.03)),
            advice("bf16", 9, Some(-0.10)),
        ];
        assert_eq!(names(&order(v, |a| a)), ["8bit", "bf16", "offload"]);
    }

    /// 25× faster is not enough: the cost order stands (offload 8 points at 25.0×, bf16 9 at
    /// 1.0×: 25 < 30).
    #[test]
    fn less_than_thirty_times_keeps_the_cost_order() {
        let v = vec![
            advice("bf16", 9, Some(0.0)),
            advice("offload", 8, Some(24.0)),
        ];
        assert_eq!(names(&order(v, |a| a)), ["offload", "bf16"]);
    }

    /// Equal points: the faster first (selective checkpointing +1 % before ZeRO-2 +2 %, both
    /// 3 points); an unknown time after a known one.
    #[test]
    fn equal_cost_breaks_ties_by_time() {
        let v = vec![
            advice("unknown", 3, None),
            advice("zero2", 3, Some(0.02)),
            advice("selective", 3, Some(0.01)),
            advice("cheap", 2, Some(0.5)),
        ];
        assert_eq!(
            names(&order(v, |a| a)),
            ["cheap", "selective", "zero2", "unknown"]
        );
    }

    /// Chains: A (5 pts, 900×), B (6, 30×), C (7, 1×). C is 30× faster than B and 900× than A;
    /// B 30× faster than A: C, B, A.
    #[test]
    fn the_rule_applies_through_chains() {
        let v = vec![
            advice("a", 5, Some(899.0)),
            advice("b", 6, Some(29.0)),
            advice("c", 7, Some(0.0)),
        ];
        assert_eq!(names(&order(v, |a| a)), ["c", "b", "a"]);
    }
}
