//! The inventory of a layer's MLP: dense (gated or not) and mixture of experts (per-expert or
//! fused expert tensors, routers, shared experts), named as the family's checkpoints name them.

use super::builder::{mul, Builder};
use super::Component;
use crate::error::CoreError;
use crate::model::*;

/// The two projections of an MLP that has two, `in [ffn, h]` then `out [h, ffn]`, by the
/// names the family's modeling file gives them (`modeling_gpt2.py` `GPT2MLP`,
/// `modeling_gpt_neox.py` `GPTNeoXMLP`, `modeling_opt.py` `OPTDecoderLayer`, `modeling_bert.py`
/// `BertIntermediate`/`BertOutput`, `modeling_t5.py` `T5DenseActDense`,
/// `modeling_nemotron_h.py` `NemotronHMLP`); `None` for a gated MLP of a family whose gated
/// MLP has three (or fused) projections.
fn two_projections(naming: Naming, gated: bool) -> Option<(&'static str, &'static str)> {
    Some(match (naming, gated) {
        (Naming::Gpt2 | Naming::BigCode, _) => ("c_fc", "c_proj"),
        (Naming::NeoX | Naming::Falcon, _) => ("dense_h_to_4h", "dense_4h_to_h"),
        (Naming::Opt, _) => ("fc1", "fc2"),
        (Naming::Bert | Naming::Roberta, _) => ("intermediate.dense", "output.dense"),
        (Naming::T5, false) => ("wi", "wo"),
        // `NemotronHMLP`: `down_proj(relu2(up_proj(x)))`, no gate.
        (Naming::NemotronH, false) => ("up_proj", "down_proj"),
        // StarCoder2-style plain MLP inside a Llama-named model.
        (_, false) => ("c_fc", "c_proj"),
        (_, true) => return None,
    })
}

impl Builder<'_> {
    pub(super) fn dense_mlp(
        &mut self,
        m: &str,
        d: &DenseMlp,
        l: Option<u32>,
        c: Component,
    ) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        let f = d.ffn;
        let bias = d.bias;
        if let Some((up, down)) = two_projections(self.spec.naming, d.gated) {
            self.linear(&format!("{m}.{up}"), h, f, bias, l, c)?;
            return self.linear(&format!("{m}.{down}"), f, h, bias, l, c);
        }
        match self.spec.naming {
            Naming::Phi3 => {
                let two_f = mul(2, f, "gate_up width")?;
                self.linear(&format!("{m}.gate_up_proj"), h, two_f, bias, l, c)?;
                self.linear(&format!("{m}.down_proj"), f, h, bias, l, c)?;
            }
            Naming::T5 => {
                self.linear(&format!("{m}.wi_0"), h, f, bias, l, c)?;
                self.linear(&format!("{m}.wi_1"), h, f, bias, l, c)?;
                self.linear(&format!("{m}.wo"), f, h, bias, l, c)?;
            }
            Naming::Granite => {
                // `GraniteMoeHybridMLP`: one fused `input_linear [2·ffn, h]`, `output_linear`.
                let two_f = mul(2, f, "input_linear width")?;
                self.linear(&format!("{m}.input_linear"), h, two_f, bias, l, c)?;
                self.linear(&format!("{m}.output_linear"), f, h, bias, l, c)?;
            }
            Naming::Mixtral | Naming::Lfm2 => {
                self.linear(&format!("{m}.w1"), h, f, bias, l, c)?;
                self.linear(&format!("{m}.w2"), f, h, bias, l, c)?;
                self.linear(&format!("{m}.w3"), h, f, bias, l, c)?;
            }
            _ => {
                self.linear(&format!("{m}.gate_proj"), h, f, bias, l, c)?;
                self.linear(&format!("{m}.up_proj"), h, f, bias, l, c)?;
                self.linear(&format!("{m}.down_proj"), f, h, bias, l, c)?;
            }
        }
        Ok(())
    }

    pub(super) fn moe(&mut self, m: &str, moe: &MoeMlp, l: Option<u32>) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        if self.spec.naming == Naming::GptOss {
            return self.fused_experts(m, moe, l);
        }
        if self.spec.naming == Naming::Granite {
            return self.granite_experts(m, moe, l);
        }
        if self.spec.naming == Naming::Lfm2 {
            return self.gate_and_stacked_experts(m, moe, l);
        }
        if self.spec.naming == Naming::NemotronH {
            return self.nemotron_h_moe(m, moe, l);
        }
        if self.spec.naming == Naming::Llama4 {
            // Llama4TextMoe: `router`, the fused experts, an ungated-output `shared_expert`.
            self.fused_experts(m, moe, l)?;
            if let Some(shared) = &moe.shared {
                self.dense_mlp(&format!("{m}.shared_expert"), shared, l, Component::Mlp)?;
            }
            return Ok(());
        }
        if self.spec.naming == Naming::Qwen35 {
            return self.qwen35_moe(m, moe, l);
        }
        let router = match self.spec.naming {
            Naming::Jamba => "router",
            _ => "gate",
        };
        self.linear(
            &format!("{m}.{router}"),
            h,
            moe.experts,
            false,
            l,
            Component::Router,
        )?;
        for e in 0..moe.experts {
            self.dense_mlp(
                &format!("{m}.experts.{e}"),
                &moe.expert,
                l,
                Component::Experts,
            )?;
        }
        let shared = match self.spec.naming {
            Naming::DeepSeek => format!("{m}.shared_experts"),
            _ => format!("{m}.shared_expert"),
        };
        self.shared_expert(&shared, m, moe, l)
    }

    /// The shared expert beside the routed ones (a dense MLP named `shared`) and, where the
    /// family gates it (`Qwen2MoeSparseMoeBlock`, `Qwen3NextSparseMoeBlock`), its sigmoid gate
    /// `shared_expert_gate [1, h]`.
    fn shared_expert(
        &mut self,
        shared: &str,
        m: &str,
        moe: &MoeMlp,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        if let Some(mlp) = &moe.shared {
            self.dense_mlp(shared, mlp, l, Component::Mlp)?;
        }
        if moe.shared_gate {
            let h = self.spec.hidden_size;
            let gate = format!("{m}.shared_expert_gate");
            self.linear(&gate, h, 1, false, l, Component::Router)?;
        }
        Ok(())
    }

    /// Granite's MoE as its checkpoints store it (`modeling_granitemoe.py` `GraniteMoeTopKRouter`,
    /// `GraniteMoeExperts`; the checkpoint names are those `conversion_mapping.py` "granitemoe"
    /// renames): `router.layer [E, h]`, `input_linear [E, 2·ffn, h]`, `output_linear [E, h,
    /// ffn]`, and Granite 4.0-H's `shared_mlp` beside the block (`GraniteMoeHybridDecoderLayer`).
    fn granite_experts(&mut self, m: &str, moe: &MoeMlp, l: Option<u32>) -> Result<(), CoreError> {
        let names = [
            format!("{m}.router.layer"),
            format!("{m}.input_linear.weight"),
            format!("{m}.output_linear.weight"),
        ];
        self.stacked_experts(names, "input_linear width", moe, l)?;
        if let Some(shared) = &moe.shared {
            let layer = m.strip_suffix(".block_sparse_moe").unwrap_or(m);
            self.dense_mlp(&format!("{layer}.shared_mlp"), shared, l, Component::Mlp)?;
        }
        Ok(())
    }

    /// A router `[E, hidden]` without bias (`{router}.weight`) and the experts as two stacked
    /// parameters stored `[out, in]`, as transformers' fused expert modules keep them
    /// (`GraniteMoeParallelExperts`, `Lfm2MoeExperts`, `Qwen3NextExperts`): `gate_up [E, 2·ffn,
    /// hidden]` (the gate and up projections side by side) and `down [E, hidden, ffn]`, no
    /// biases. `width` names the `2·ffn` in an overflow error.
    fn stacked_experts(
        &mut self,
        [router, gate_up, down]: [String; 3],
        width: &str,
        moe: &MoeMlp,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        let (e, f) = (moe.experts, moe.expert.ffn);
        self.linear(&router, h, e, false, l, Component::Router)?;
        let two_f = mul(2, f, width)?;
        let x = Component::Experts;
        self.push(gate_up, vec![e, two_f, h], l, x)?;
        self.push(down, vec![e, h, f], l, x)
    }

    /// A `gate` router `[E, hidden]` (no bias) and the experts stacked `[out, in]` under
    /// `experts.`, as LFM2-MoE's sparse block (`modeling_lfm2_moe.py` `Lfm2MoeSparseMoeBlock`:
    /// `Lfm2MoeTopKRouter`, `Lfm2MoeExperts`) and Qwen3-Next's (`modeling_qwen3_next.py`
    /// `Qwen3NextSparseMoeBlock`: `Qwen3NextExperts`) keep them: `gate_up_proj [E, 2·ffn,
    /// hidden]`, `down_proj [E, hidden, ffn]`, no biases. LFM2-MoE's `expert_bias [E]` is a
    /// buffer, not a parameter, and is not counted.
    fn gate_and_stacked_experts(
        &mut self,
        m: &str,
        moe: &MoeMlp,
        l: Option<u32>,
    ) -> Result<(), CoreError> {
        let names = [
            format!("{m}.gate"),
            format!("{m}.experts.gate_up_proj"),
            format!("{m}.experts.down_proj"),
        ];
        self.stacked_experts(names, "gate_up width", moe, l)
    }

    /// gpt-oss's router (`mlp.router`, weight and bias) and its experts as four stacked
    /// parameters, the matrices stored `[in, out]` (`modeling_gpt_oss.py` `GptOssExperts`:
    /// `gate_up_proj` `[E, hidden, 2·ffn]`, `down_proj` `[E, ffn, hidden]`, biases `[E, out]`).
    fn fused_experts(&mut self, m: &str, moe: &MoeMlp, l: Option<u32>) -> Result<(), CoreError> {
        let h = self.spec.hidden_size;
        let (e, f) = (moe.experts, moe.expert.ffn);
        let r = Component::Router;
        self.linear(&format!("{m}.router"), h, e, moe.router_bias, l, r)?;
        let two_f = mul(2, f, "gate_up width")?;
        let x = Component::Experts;
        self.push(format!("{m}.experts.gate_up_proj"), vec![e, h, two_f], l, x)?;
        if moe.expert.bias {
            self.push(
                format!("{m}.experts.gate_up_proj_bias"),
                vec![e, two_f],
                l,
                x,
            )?;
        }
        self.push(format!("{m}.experts.down_proj"), vec![e, f, h], l, x)?;
        if moe.expert.bias {
            self.push(format!("{m}.experts.down_proj_bias"), vec![e, h], l, x)?;
        }
        Ok(())
    }

    /// Qwen3.5-MoE's sparse block (`modeling_qwen3_5_moe.py`: `Qwen3_5MoeSparseMoeBlock` =
    /// `Qwen3NextSparseMoeBlock`): the router and stacked experts of
    /// [`Self::gate_and_stacked_experts`], the `shared_expert` MLP and its sigmoid gate
    /// `shared_expert_gate [1, h]`.
    fn qwen35_moe(&mut self, m: &str, moe: &MoeMlp, l: Option<u32>) -> Result<(), CoreError> {
        self.gate_and_stacked_experts(m, moe, l)?;
        self.shared_expert(&format!("{m}.shared_expert"), m, moe, l)
    }
}
