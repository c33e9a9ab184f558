//! The torch path of the Mamba2 (SSD) mixer as Falcon-H1 runs it on the CPU or without
//! `mamba_ssm` (transformers 5.x `modeling_falcon_h1.py` `causal_conv1d_fn` and
//! `mamba2_chunk_scan`, the chunked SSD of Dao & Gu 2024, "Transformers are SSMs", §6 and its
//! Listing 1): what autograd saves, op by op. The chunk contractions depend on the release
//! (`job/transformers_version.rs`):
//!
//! - from 5.18.0 (`modeling_mamba2.py` 5.18.0–5.24.0, [`Prog::ssd_chunks_einsum`]) every
//!   contraction is a `torch.einsum`, which lowers to `bmm` on contiguous reshapes of its
//!   operands, so it saves a contiguous copy of each (under autocast, the 16-bit cast);
//! - up to 5.17.0 (`modeling_mamba2.py` 5.17.0, [`Prog::ssd_chunks_broadcast`]) each is a
//!   broadcast product summed afterwards: the product (`[b, chunks, chunk, chunk, heads,
//!   head_dim]` for `Y_diag`) exists in the forward, the multiply saves its two operands in
//!   fp32 (elementwise ops run in fp32 under autocast too), and its backward makes two
//!   product-sized gradients before reducing them.
//!
//! F.pad copies even when it pads nothing (`constant_pad_nd` returns a clone).

use super::Prog;
use crate::estimate::tape::Id;
use crate::model::{ParallelSsm, Ssm};

/// The chunked tensors `mamba2_chunk_scan` contracts (after `reshape_into_chunks`, all fp32):
/// A (`ac`) and its cumulative sum, B and C repeated to every head, the discretized x; and
/// `[batch, heads, d_state, d_inner, chunk, chunks]`.
struct Chunks {
    ac: Id,
    a_cum: Id,
    bc: Id,
    cc: Id,
    xc: Id,
    dims: [u64; 6],
}

/// The elements of a tensor of these dimensions, saturating (a broadcast product can exceed
/// what the job's size check bounds).
fn elems(dims: &[u64]) -> u64 {
    dims.iter().fold(1u64, |acc, &x| acc.saturating_mul(x))
}

impl Prog<'_> {
    /// `causal_conv1d_fn` on the `[b, conv_dim, L]` slice of `zxbcdt`: `F.conv1d` (padding
    /// `d_conv − 1`) on `hidden_states.to(weight.dtype)` saves its input — a view of `zxbcdt`,
    /// or under autocast its 16-bit copy (of the fp32 copy `.to` makes first when `zxbcdt` is
    /// 16-bit, as Bamba's and Granite 4.0-H's projection is: then nothing here keeps `zxbcdt`)
    /// — and SiLU saves the `L + d_conv − 1` long output; the activation is cast back to
    /// `zxbcdt`'s dtype.
    fn falcon_conv(&mut self, zx: Id, s: &Ssm) -> Id {
        let (b, l) = (self.c.batch, self.c.seq);
        let ch = s.conv_dim();
        let zw = self.w(zx);
        let xin = if self.c.num.autocast {
            let src = if zw == 4 {
                zx
            } else {
                self.t.op(&[zx], &[], b * ch * l, 4)
            };
            self.t.op(&[src], &[], b * ch * l, 2)
        } else {
            zx
        };
        self.weight_copy(ch * s.d_conv + if s.conv_bias { ch } else { 0 });
        let cw = if self.c.num.autocast {
            2
        } else {
            self.c.num.compute
        };
        let conv = self.t.op(&[xin], &[xin], b * ch * (l + s.d_conv - 1), cw);
        let act = self.t.op(&[conv], &[conv], b * ch * l, cw);
        self.cast(act, zw)
    }

    /// `exp(segment_sum(a))` over `n` elements (`[..., Q, Q]`): two `masked_fill`s and a
    /// `cumsum` make new tensors that save nothing (the masks are tiny), `exp` saves its output.
    fn segment_exp(&mut self, src: Id, n: u64) -> Id {
        let f1 = self.t.op(&[src], &[], n, 4);
        let cs = self.t.op(&[f1], &[], n, 4);
        let f2 = self.t.op(&[cs], &[], n, 4);
        let e = self.t.op(&[f2], &[], n, 4);
        self.t.keep(e);
        e
    }

    /// A saved contiguous copy of an einsum operand (`ew` wide: 16-bit under autocast).
    fn operand(&mut self, x: Id, n: u64, ew: u64) -> Id {
        let c = self.t.op(&[x], &[], n, ew);
        self.t.keep(c);
        c
    }

    /// `mamba2_chunk_scan` in training on the conv output and `zxbcdt`'s Δ slice, `a` being
    /// `-exp(A_log)`; returns `y + D·x` (fp32, `[b, chunks·Q, heads, head_dim]`).
    pub(super) fn falcon_ssd_torch(&mut self, zx: Id, a: Id, p: &ParallelSsm) -> Id {
        let s = &p.ssm;
        let (b, l) = (self.c.batch, self.c.seq);
        let (hh, n, d) = (s.heads, s.d_state, s.d_inner);
        let q = p.chunk.max(1);
        let nc = l.div_ceil(q);
        let lp = nc * q;
        let zw = self.w(zx);
        let xbc = self.falcon_conv(zx, s);
        // dt + dt_bias; softplus saves its input; clamp(dt_limit) saves its input.
        let dt0 = self.t.op(&[zx], &[], b * l * hh, zw);
        let dt1 = self.t.op(&[dt0], &[dt0], b * l * hh, zw);
        let dt = self.t.op(&[dt1], &[dt1], b * l * hh, zw);
        let xf = if self.w(xbc) == 4 {
            xbc
        } else {
            self.t.op(&[xbc], &[], b * l * d, 4)
        };
        // B, C `.float().repeat_interleave(heads // groups)` to every head.
        let br = self.t.op(&[xbc], &[], b * l * hh * n, 4);
        let cr = self.t.op(&[xbc], &[], b * l * hh * n, 4);
        // D_residual = D · pad(x): the padded copy is saved.
        let xpad = self.t.op(&[xf], &[], b * lp * d, 4);
        let d_res = self.t.op(&[xpad], &[xpad], b * lp * d, 4);
        // x · dt and A · dt save both factors (x: a view of the conv output).
        let xdt = self.t.op(&[xf, dt], &[xf, dt], b * l * d, 4);
        let adt = self.t.op(&[a, dt], &[a, dt], b * l * hh, 4);
        // reshape_into_chunks pads (copies) x, A, B and C.
        let xc = self.t.op(&[xdt], &[], b * lp * d, 4);
        let ac = self.t.op(&[adt], &[], b * lp * hh, 4);
        let bc = self.t.op(&[br], &[], b * lp * hh * n, 4);
        let cc = self.t.op(&[cr], &[], b * lp * hh * n, 4);
        let a_cum = self.t.op(&[ac], &[], b * lp * hh, 4);
        let ch = Chunks {
            ac,
            a_cum,
            bc,
            cc,
            xc,
            dims: [b, hh, n, d, q, nc],
        };
        if self.c.num.transformers.ssd_scan_einsum() {
            let y = self.ssd_chunks_einsum(&ch);
            self.t.op(&[y, d_res], &[], b * lp * d, 4)
        } else {
            let (y, c_times_states) = self.ssd_chunks_broadcast(&ch);
            let out = self.t.op(&[y, d_res], &[], b * lp * d, 4);
            // The Python name `C_times_states` holds the product until the function returns.
            self.t.touch(c_times_states);
            out
        }
    }

    /// A broadcast product of `n` fp32 elements that saves both operands, then its `.sum()`
    /// down to `out` elements (transformers 5.17.0 `mamba2_chunk_scan`). `MulBackward0` makes
    /// both operands' gradients at the product's size before `sum_to` reduces them: the
    /// product's incoming gradient (the sum's, expanded) stands for one, a backward temporary
    /// for the other. Returns the product and the sum.
    fn product_sum(&mut self, x: Id, y: Id, n: u64, out: u64) -> (Id, Id) {
        let prod = self.t.op(&[x, y], &[x, y], n, 4);
        self.t.backward_temp(n.saturating_mul(4));
        let sum = self.t.op(&[prod], &[], out, 4);
        (prod, sum)
    }

    /// Steps 1–4 of `mamba2_chunk_scan` up to 5.17.0 (transformers 5.17.0
    /// `modeling_mamba2.py`, lines "G = (C[:, :, :, None, :, :] * B[:, :, None, :, :,
    /// :]).sum(dim=-1)" to "Y_off = C_times_states.sum(-1) * ..."): every contraction a
    /// broadcast product summed, all in fp32 (no matmul for autocast to cast). Returns
    /// `Y_diag + Y_off` and the product `C_times_states`, which a Python name holds.
    fn ssd_chunks_broadcast(&mut self, ch: &Chunks) -> (Id, Id) {
        let [b, hh, n, d, q, nc] = ch.dims;
        let lp = nc * q;
        let qq = b * hh * lp * q;
        let (bc, cc, xc, a_cum) = (ch.bc, ch.cc, ch.xc, ch.a_cum);
        // L = exp(segment_sum(A)); G: [b, c, l, s, h, n] summed over n; M = G · L (the
        // product has G's size: nothing to reduce); Y_diag: [b, c, l, s, h, p] summed over s.
        let l_mat = self.segment_exp(ch.ac, qq);
        let (_, g) = self.product_sum(cc, bc, qq.saturating_mul(n), qq);
        let m_full = self.t.op(&[g, l_mat], &[g, l_mat], qq, 4);
        let m = self.t.op(&[m_full], &[], qq, 4);
        let (_, y_diag) = self.product_sum(m, xc, elems(&[b, lp, q, d]), b * lp * d);
        // decay_states, saved; B · decay saves both; states: [b, c, l, h, p, n] summed over l.
        let dec0 = self.t.op(&[a_cum], &[], b * lp * hh, 4);
        let dec = self.t.op(&[dec0], &[], b * lp * hh, 4);
        self.t.keep(dec);
        let b_dec = self.t.op(&[bc, dec], &[bc, dec], b * lp * hh * n, 4);
        let (_, states) = self.product_sum(b_dec, xc, elems(&[b, lp, d, n]), b * nc * d * n);
        let st_cat = self.t.op(&[states], &[], b * (nc + 1) * d * n, 4);
        // decay_chunk; new_states: [b, z, c, h, p, n] summed over z.
        let dc = self.segment_exp(a_cum, b * hh * (nc + 1) * (nc + 1));
        let z = elems(&[b, nc + 1, nc + 1, d, n]);
        let (_, new_states) = self.product_sum(dc, st_cat, z, b * (nc + 1) * d * n);
        // state_decay_out, saved; C_times_states: [b, c, l, h, p, n] summed over n, · decay.
        let sdo = self.t.op(&[a_cum], &[], b * lp * hh, 4);
        self.t.keep(sdo);
        let (cts_full, cts) = self.product_sum(cc, new_states, elems(&[b, lp, d, n]), b * lp * d);
        let y_off = self.t.op(&[cts, sdo], &[cts, sdo], b * lp * d, 4);
        (self.t.op(&[y_diag, y_off], &[], b * lp * d, 4), cts_full)
    }

    /// Steps 1–4 of `mamba2_chunk_scan` from 5.18.0 (transformers 5.18.0–5.24.0
    /// `modeling_mamba2.py`): each contraction a `torch.einsum`; returns `Y_diag + Y_off`.
    fn ssd_chunks_einsum(&mut self, ch: &Chunks) -> Id {
        let [b, hh, n, d, q, nc] = ch.dims;
        let lp = nc * q;
        let ew = if self.c.num.autocast { 2 } else { 4 };
        let (bc, cc, a_cum) = (ch.bc, ch.cc, ch.a_cum);
        let y_diag = self.ssd_diagonal(ch.ac, (bc, cc), ch.xc, b * hh * lp * q, ew);
        // decay_states = exp(A_cumsum[..., -1:] − A_cumsum), saved; B · decay saves both.
        let dec0 = self.t.op(&[a_cum], &[], b * lp * hh, 4);
        let dec = self.t.op(&[dec0], &[], b * lp * hh, 4);
        self.t.keep(dec);
        let b_dec = self.t.op(&[bc, dec], &[bc, dec], b * lp * hh * n, 4);
        let bd_c = self.operand(b_dec, b * lp * hh * n, ew);
        let x_c = self.operand(ch.xc, b * lp * d, ew);
        let states = self.t.op(&[bd_c, x_c], &[], b * nc * d * n, ew);
        let st_cat = self.t.op(&[states], &[], b * (nc + 1) * d * n, ew);
        // decay_chunk = exp(segment_sum(pad(A_cumsum[..., -1]))) and the inter-chunk einsum.
        let dc = self.segment_exp(a_cum, b * hh * (nc + 1) * (nc + 1));
        let st_c = self.operand(st_cat, b * (nc + 1) * d * n, ew);
        let new_states = self.t.op(&[dc, st_c], &[], b * (nc + 1) * d * n, ew);
        // state_decay_out = exp(A_cumsum), saved; C · states, then · decay (saves both).
        let sdo = self.t.op(&[a_cum], &[], b * lp * hh, 4);
        self.t.keep(sdo);
        let c_c = self.operand(cc, b * lp * hh * n, ew);
        let ns_c = self.operand(new_states, b * nc * d * n, ew);
        let cts = self.t.op(&[c_c, ns_c], &[], b * lp * d, ew);
        let y_off = self.t.op(&[cts, sdo], &[cts, sdo], b * lp * d, 4);
        self.t.op(&[y_diag, y_off], &[], b * lp * d, 4)
    }

    /// The intra-chunk (diagonal) output: `L = exp(segment_sum(A))` (saved), `G =
    /// einsum(C, B)` (operand copies saved), `M = G · L` (saves both), `Y_diag = einsum(M, x)`
    /// (saves M's copy and x: in fp32 the padded x itself, under autocast its 16-bit copy).
    fn ssd_diagonal(&mut self, ac: Id, bc_cc: (Id, Id), xc: Id, qq: u64, ew: u64) -> Id {
        let (bc, cc) = bc_cc;
        let n_bc = self.t.elements(bc);
        let l_mat = self.segment_exp(ac, qq);
        let c_g = self.operand(cc, n_bc, ew);
        let b_g = self.operand(bc, n_bc, ew);
        let g = self.t.op(&[c_g, b_g], &[], qq, ew);
        let m = self.t.op(&[g, l_mat], &[g, l_mat], qq, 4);
        let m_c = self.operand(m, qq, ew);
        let n_x = self.t.elements(xc);
        let x_op = if self.c.num.autocast {
            self.operand(xc, n_x, 2)
        } else {
            self.t.keep(xc);
            xc
        };
        self.t.op(&[m_c, x_op], &[], n_x, ew)
    }
}
