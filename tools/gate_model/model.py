"""A trainable dsv41 in PyTorch (spec/dsv41.md): prefill semantics, fake quant as stored, checkpoint names, Rust's bf16 points."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from config import Cfg
from quant import (qdq_fp4_e4m3, qdq_fp4_e8m0, qdq_fp4_weight, qdq_fp8_groups, qdq_fp8_tiles, rb)


class W(nn.Module):
    """A bare `.weight` holder, so state_dict names read `x.weight`."""

    def __init__(self, *shape, std=0.0, mean=0.0):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(*shape) * std + mean)


def fp8_linear(x, w):
    """FP8 linear: bf16 input, FP8 activations per 32, FP8 32×32 weight, f32 sums, bf16 out."""
    return rb(qdq_fp8_groups(x, 32) @ qdq_fp8_tiles(w).t())


def fp4_linear(x, w):
    return rb(qdq_fp8_groups(x, 32) @ qdq_fp4_weight(w).t())


def bf16_linear(x, w):
    return rb(x @ rb(w).t())


def rms_norm(x, w, eps):
    """RMSNorm with f32 statistics, bf16 weight, bf16 out."""
    return rb(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * rb(w))


def rope(x, cos, sin, inverse=False):
    """Interleaved-pair rotation of the last 2·len(freqs) channels; `cos`/`sin` broadcast to `[..., pairs]`."""
    r = cos.shape[-1] * 2
    head, tail = x[..., :-r], x[..., -r:]
    a, b = tail[..., 0::2], tail[..., 1::2]
    s = -sin if inverse else sin
    rot = torch.stack((a * cos - b * s, a * s + b * cos), -1).flatten(-2)
    return rb(torch.cat((head, rot), -1))


class Compressor(nn.Module):
    def __init__(self, cfg: Cfg, ratio: int):
        super().__init__()
        d, hd = cfg.dim, cfg.head_dim
        self.norm = W(hd, mean=1.0)
        self.wkv = W(hd, d, std=d ** -0.5)
        if ratio > 1:
            self.wgate = W(hd, d, std=d ** -0.5)
        self.ratio = ratio


class Indexer(nn.Module):
    def __init__(self, cfg: Cfg, owns_keys: bool):
        super().__init__()
        d, ih, ihd = cfg.dim, cfg.index_n_heads, cfg.index_head_dim
        self.wq_b = W(ih * ihd, cfg.q_lora_rank, std=cfg.q_lora_rank ** -0.5)
        self.weights_proj = W(ih, d, std=d ** -0.5)
        if owns_keys:
            self.wk = W(ihd, cfg.head_dim, std=cfg.head_dim ** -0.5)
            self.k_norm = W(ihd, mean=1.0)


class Attention(nn.Module):
    def __init__(self, cfg: Cfg, role: dict):
        super().__init__()
        d, h, hd, qr = cfg.dim, cfg.n_heads, cfg.head_dim, cfg.q_lora_rank
        g, orank = cfg.o_groups, cfg.o_lora_rank
        self.cfg, self.role = cfg, role
        self.attn_sink = nn.Parameter(torch.zeros(h))
        self.wq_a = W(qr, d, std=d ** -0.5)
        self.q_norm = W(qr, mean=1.0)
        self.wq_b = W(h * hd, qr, std=qr ** -0.5)
        self.wkv = W(hd, d, std=d ** -0.5)
        self.kv_norm = W(hd, mean=1.0)
        self.wo_a = W(g * orank, h * hd // g, std=(h * hd // g) ** -0.5)
        self.wo_b = W(d, g * orank, std=(g * orank) ** -0.5)
        if role["kv_source"]:
            self.compressor = Compressor(cfg, role["ratio"])
        if role["index_source"]:
            self.indexer = Indexer(cfg, role["owns_index_keys"])

    def compress(self, x, rope_tab, shared):
        """KV-source compressor over the whole sequence: latents `[B, G, hd]` and index keys `[B, G, ihd]`."""
        c, ratio = self.compressor, self.role["ratio"]
        B, S, _ = x.shape
        G = S // ratio
        if ratio == 1:
            pooled = bf16_linear(x, c.wkv.weight)
        else:
            xs = x[:, :G * ratio]
            kv = (xs @ rb(c.wkv.weight).t()).view(B, G, ratio, -1)
            gate = (xs @ rb(c.wgate.weight).t()).view(B, G, ratio, -1)
            pooled = rb((kv * torch.softmax(gate, dim=2)).sum(2))
        latent = rms_norm(pooled, c.norm.weight, self.cfg.eps)
        cos, sin = rope_tab(torch.arange(G, device=x.device) * ratio)
        keys = None
        if self.role["owns_index_keys"]:
            ix = self.indexer
            k = rms_norm(bf16_linear(latent.detach(), ix.wk.weight), ix.k_norm.weight, self.cfg.eps)
            keys = qdq_fp4_e8m0(rope(k, cos, sin), 32)
        latent = qdq_fp4_e4m3(rope(latent, cos, sin), 16)
        shared["kv"][self.role["layer"]] = (latent, keys)

    def index_score(self, x, qr, keys, rope_tab):
        """Indexer score `[B, S, G]` of every row against every key, rounded where index.rs rounds (straight-through)."""
        cfg, ix = self.cfg, self.indexer
        B, S, _ = x.shape
        ih, ihd = cfg.index_n_heads, cfg.index_head_dim
        cos, sin = rope_tab(torch.arange(S, device=x.device))
        q = rope(fp8_linear(qr, ix.wq_b.weight).view(B, S, ih, ihd), cos[:, None], sin[:, None])
        q = qdq_fp4_e8m0(q.reshape(B, S, ih * ihd), 32).view(B, S, ih, ihd)
        w = rb(bf16_linear(x, ix.weights_proj.weight) * (ihd ** -0.5 * ih ** -0.5))
        dots = rb(torch.einsum("bshd,bgd->bshg", q, keys))
        return rb((rb(dots.clamp_min(0) * w[..., None])).sum(2))

    @torch.no_grad()
    def select(self, score, shared):
        """Top-k per row (ties: lower position), candidates applied: boolean `[B, S, G]` of selected groups."""
        cfg, role = self.cfg, self.role
        S, G = score.shape[1:]
        cl = (torch.arange(S, device=score.device) + 1) // role["ratio"]
        gpos = torch.arange(G, device=score.device)
        score = score.masked_fill(~(gpos[None, :] < cl[:, None]), float("-inf"))
        if role["candidate_source"]:
            shared["cand"] = self.candidate_mask(score, cl)
        elif role["uses_candidates"]:
            score = score.masked_fill(~shared["cand"], float("-inf"))
        order = torch.sort(score, dim=-1, descending=True, stable=True).indices
        rank = torch.empty_like(order).scatter_(-1, order, gpos.expand_as(order).contiguous())
        return rank < cl.clamp(max=cfg.index_topk)[None, :, None]

    def indexer_loss(self, score, q, lat):
        """KL(main attention over all visible groups, head-mean ‖ indexer softmax), the indexer's only training signal."""
        S, G = score.shape[1:]
        cl = (torch.arange(S, device=score.device) + 1) // self.role["ratio"]
        visible = torch.arange(G, device=score.device)[None, :] < cl[:, None]
        rows = cl > 0
        with torch.no_grad():
            att = torch.einsum("bshd,bgd->bhsg", q, lat) * self.cfg.head_dim ** -0.5
            tgt = torch.softmax(att.masked_fill(~visible, float("-inf"))[:, :, rows], -1).mean(1)
        logp = torch.log_softmax(score.masked_fill(~visible, float("-inf"))[:, rows], -1)
        return (tgt * (torch.log(tgt.clamp_min(1e-30)) - logp.clamp_min(-1e30))).sum(-1).mean()

    def candidate_mask(self, score, cl):
        """Level one of the two-level top-k: best blocks by max score, the newest block pinned (index.rs)."""
        cfg = self.cfg
        bsz = cfg.candidate_block_size
        B, S, G = score.shape
        nb_all = -(-G // bsz)
        padded = F.pad(score, (0, nb_all * bsz - G), value=float("-inf"))
        bs = padded.view(B, S, nb_all, bsz).amax(-1)
        newest = ((cl - 1).clamp_min(0) // bsz)
        pin = (torch.arange(nb_all, device=score.device)[None, :] == newest[:, None]) & (cl[:, None] > 0)
        bs = bs.masked_fill(pin[None], float("inf"))
        order = torch.sort(bs, dim=-1, descending=True, stable=True).indices
        blocks = torch.arange(nb_all, device=score.device).expand_as(order).contiguous()
        rank = torch.empty_like(order).scatter_(-1, order, blocks)
        nb = -(-cl // bsz)
        keep = (rank < nb.clamp(max=cfg.candidate_topk_blocks)[None, :, None]) & (bs > float("-inf"))
        return keep.repeat_interleave(bsz, -1)[..., :G]

    def forward(self, x, rope_tab, shared):
        cfg, role = self.cfg, self.role
        B, S, _ = x.shape
        h, hd = cfg.n_heads, cfg.head_dim
        pos = torch.arange(S, device=x.device)
        cos, sin = rope_tab(pos)
        qr = rms_norm(fp8_linear(x, self.wq_a.weight), self.q_norm.weight, cfg.eps)
        q = rope(fp8_linear(qr, self.wq_b.weight).view(B, S, h, hd), cos[:, None], sin[:, None])
        kv = rms_norm(fp8_linear(x, self.wkv.weight), self.kv_norm.weight, cfg.eps)
        kv = qdq_fp8_groups(rope(kv, cos, sin), 32)
        scale = hd ** -0.5
        s_win = torch.einsum("bshd,btd->bhst", q, kv) * scale
        win = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - cfg.window)
        s_win = s_win.masked_fill(~win, float("-inf"))
        parts, vals = [s_win], [kv]
        if role["compressed"]:
            if role["kv_source"]:
                self.compress(x, rope_tab, shared)
            lat = shared["kv"][role["kv_owner"]][0]
            if role["index_source"]:
                train_ix = self.training and torch.is_grad_enabled()
                with torch.set_grad_enabled(train_ix):
                    score = self.index_score(x.detach(), qr.detach(), shared["kv"][role["kv_owner"]][1], rope_tab)
                if train_ix:
                    shared["aux"].append(self.indexer_loss(score, q.detach(), lat.detach()))
                sel = self.select(score.detach(), shared)
                shared["topk"][role["layer"]] = sel
            else:
                sel = shared["topk"][role["sel_owner"]]
            s_cmp = torch.einsum("bshd,bgd->bhsg", q, lat) * scale
            parts.append(s_cmp.masked_fill(~sel[:, None], float("-inf")))
            vals.append(lat)
        o = rope(attend(torch.cat(parts, -1), torch.cat(vals, 1), self.attn_sink), cos[:, None], sin[:, None], True)
        g = cfg.o_groups
        og = o.reshape(B, S, g, h * hd // g)
        wa = rb(self.wo_a.weight).view(g, cfg.o_lora_rank, h * hd // g)
        u = rb(torch.einsum("bsgi,gri->bsgr", og, wa)).reshape(B, S, -1)
        return fp8_linear(u, self.wo_b.weight)


def attend(scores, vals, sink):
    """Sink softmax as sparse.rs rounds it: bf16 of exp(s - m) in PV, f32 sums; exact while window + top-k ≤ 64 keys."""
    m = scores.detach().amax(-1, keepdim=True).clamp_min(-1e30)
    e = torch.exp(scores - m)
    denom = e.sum(-1, keepdim=True) + torch.exp(sink.view(-1, 1, 1) - m)
    return rb(torch.einsum("...hsk,...kd->...shd", rb(e) / denom, vals))


class Expert(nn.Module):
    def __init__(self, d, inter):
        super().__init__()
        self.w1 = W(inter, d, std=d ** -0.5)
        self.w2 = W(d, inter, std=inter ** -0.5)
        self.w3 = W(inter, d, std=d ** -0.5)


def swiglu(g, u, limit):
    return F.silu(g.clamp(max=limit)) * u.clamp(-limit, limit)


class Gate(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, d) * d ** -0.5)
        self.bias = nn.Parameter(torch.zeros(n), requires_grad=False)
        self.bias_vl = nn.Parameter(torch.zeros(n), requires_grad=False)


class MoE(nn.Module):
    def __init__(self, cfg: Cfg, layer: int):
        super().__init__()
        n, self.topk = cfg.moe_config(layer)
        self.cfg = cfg
        self.gate = Gate(n, cfg.dim)
        self.experts = nn.ModuleList(Expert(cfg.dim, cfg.inter) for _ in range(n))
        self.shared_experts = Expert(cfg.dim, cfg.inter)
        self.load = None

    def forward(self, x):
        cfg = self.cfg
        lim = cfg.swiglu_limit
        scores = torch.sqrt(F.softplus(x @ rb(self.gate.weight).t()))
        idx = torch.topk(scores.detach() + self.gate.bias, self.topk, dim=-1).indices
        w = scores.gather(-1, idx)
        if cfg.norm_topk_prob and self.topk > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = w * cfg.routed_scaling_factor
        dense_w = torch.zeros_like(scores).scatter(-1, idx, w)
        self.load = torch.zeros_like(scores).scatter(-1, idx, 1.0).flatten(0, -2).mean(0).detach()
        y = routed_experts(x, dense_w, *(torch.stack([getattr(ex, w).weight for ex in self.experts])
                                         for w in ("w1", "w3", "w2")), lim)
        sh = self.shared_experts
        y = y + fp8_linear(rb(swiglu(fp8_linear(x, sh.w1.weight), fp8_linear(x, sh.w3.weight), lim)), sh.w2.weight)
        return rb(y)


def routed_experts(x, dense_w, w1, w3, w2, lim):
    """All experts as one batched matmul over `[n, tokens]`; unselected experts are zeroed, so the sum equals the per-expert loop."""
    xq = qdq_fp8_groups(x, 32).reshape(1, -1, x.shape[-1])
    we = dense_w.reshape(-1, w1.shape[0]).t()[..., None]
    g, u = rb(xq @ qdq_fp4_weight(w1).transpose(1, 2)), rb(xq @ qdq_fp4_weight(w3).transpose(1, 2))
    hdn = rb(swiglu(g, u, lim) * we)
    out = rb(qdq_fp8_groups(hdn, 32) @ qdq_fp4_weight(w2).transpose(1, 2)) * (we != 0)
    return out.sum(0).reshape(x.shape)


class Engram(nn.Module):
    def __init__(self, cfg: Cfg, k: int):
        super().__init__()
        rows, hd = cfg.engram_num_embeddings[k], cfg.engram_head_dim
        cols = (cfg.engram_max_ngram_size - 1) * cfg.engram_n_heads * hd
        self.embed = W(rows, hd, std=1.0)
        self.wkv = W(cfg.dim * (cfg.hc + 1), cols, std=0.12 * cols ** -0.5)
        self.q_weight = nn.Parameter(torch.ones(cfg.hc, cfg.dim))
        self.k_weight = nn.Parameter(torch.ones(cfg.hc, cfg.dim))
        self.cfg = cfg

    def forward(self, X, ids):
        cfg = self.cfg
        B, S, hc, d = X.shape
        table = qdq_fp8_groups(self.embed.weight, 32)
        e = rb(table[ids]).reshape(B, S, -1)
        kv = fp8_linear(e, self.wkv.weight)
        key, val = kv[..., :hc * d].view(B, S, hc, d), kv[..., hc * d:]
        wgt = rb(self.q_weight) * rb(self.k_weight)
        rstd = torch.rsqrt(X.pow(2).mean(-1) + cfg.eps) * torch.rsqrt(key.pow(2).mean(-1) + cfg.eps)
        dot = (X * wgt * key).sum(-1) * rstd / math.sqrt(d)
        g = torch.sigmoid(torch.sign(dot) * torch.sqrt(dot.abs().clamp_min(1e-6)))
        return rb(X + g[..., None] * val[:, :, None, :])


def hc_mixes(X, fn, scale, base, cfg: Cfg):
    """pre `[.., hc]`, post `[.., hc]`, comb `[.., hc, hc]` (comb[i][j]) from the flattened stream state."""
    hc = cfg.hc
    xf = X.flatten(-2)
    m = (xf @ fn.t()) * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + cfg.eps)
    pre = torch.sigmoid(m[..., :hc] * scale[0] + base[:hc]) + cfg.hc_eps
    post = 2 * torch.sigmoid(m[..., hc:2 * hc] * scale[1] + base[hc:2 * hc])
    c = (m[..., 2 * hc:] * scale[2] + base[2 * hc:]).unflatten(-1, (hc, hc))
    c = torch.softmax(c, -1) + cfg.hc_eps
    c = c / (c.sum(-2, keepdim=True) + cfg.hc_eps)
    for _ in range(cfg.hc_sinkhorn_iters - 1):
        c = c / (c.sum(-1, keepdim=True) + cfg.hc_eps)
        c = c / (c.sum(-2, keepdim=True) + cfg.hc_eps)
    return pre, post, c


def hc_pre(X, pre):
    return rb((pre[..., None] * X).sum(-2))


def hc_post(y, X, post, comb):
    return rb(post[..., None] * y[..., None, :] + torch.einsum("...ij,...id->...jd", comb, X))


class Block(nn.Module):
    def __init__(self, cfg: Cfg, layer: int):
        super().__init__()
        self.cfg, self.role = cfg, cfg.role(layer)
        d, hc = cfg.dim, cfg.hc
        mix = (2 + hc) * hc
        self.attn = Attention(cfg, self.role)
        self.ffn = MoE(cfg, layer)
        if not self.role["dspark"] and layer in cfg.engram_layer_ids:
            self.engram = Engram(cfg, cfg.engram_layer_ids.index(layer))
        self.attn_norm = W(d, mean=1.0)
        self.ffn_norm = W(d, mean=1.0)
        for site in ("attn", "ffn"):
            setattr(self, f"hc_{site}_fn", nn.Parameter(torch.randn(mix, hc * d) * 0.01 * (hc * d) ** -0.5))
            setattr(self, f"hc_{site}_base", nn.Parameter(torch.zeros(mix)))
            setattr(self, f"hc_{site}_scale", nn.Parameter(torch.ones(3)))

    def forward(self, X, pre_prev, attn):
        """One block; `attn` maps the normed attention input to the attention output (backbone or draft)."""
        cfg = self.cfg
        pa, qa, ca = hc_mixes(X, self.hc_attn_fn, self.hc_attn_scale, self.hc_attn_base, cfg)
        a = attn(rms_norm(hc_pre(X, pre_prev), self.attn_norm.weight, cfg.eps))
        X = hc_post(a, X, qa, ca)
        pf, qf, cf = hc_mixes(X, self.hc_ffn_fn, self.hc_ffn_scale, self.hc_ffn_base, cfg)
        f = self.ffn(rms_norm(hc_pre(X, pa), self.ffn_norm.weight, cfg.eps))
        return hc_post(f, X, qf, cf), pf


class RopeTable:
    """cos/sin of one table at given positions, f32 as `torch.polar(pos·f)`."""

    def __init__(self, inv_freq):
        self.f = inv_freq

    def __call__(self, pos):
        a = pos.float()[:, None] * self.f.to(pos.device)[None, :]
        return torch.cos(a), torch.sin(a)


class Dsv41(nn.Module):
    def __init__(self, cfg: Cfg, used: torch.Tensor | None = None):
        super().__init__()
        self.cfg = cfg
        v, d = cfg.vocab, cfg.dim
        self.embed = W(v, d, std=0.12)
        self.layers = nn.ModuleList(Block(cfg, l) for l in range(cfg.n_layers))
        self.norm = W(d, mean=1.0)
        # Tied: the head reuses the embedding rows, so the shipped compact form stores the vocab matrix once.
        self.tie = bool(getattr(cfg, "tie_word_embeddings", False))
        self.head = None if self.tie else W(v, d, std=d ** -0.5)
        self.head_rest = nn.Parameter(torch.zeros(d))
        self.mtp = nn.ModuleList(Block(cfg, cfg.n_layers + k) for k in range(cfg.n_mtp))
        taps, rank = len(cfg.dspark_target_layer_ids), cfg.dspark_markov_rank
        self.mtp[0].main_proj = W(d, d * taps, std=(d * taps) ** -0.5)
        self.mtp[0].main_norm = W(d, mean=1.0)
        last = self.mtp[-1]
        last.norm = W(d, mean=1.0)
        last.markov_head = nn.Module()
        last.markov_head.embed = W(v, rank, std=0.12)
        last.markov_head.head = W(v, rank, std=0.0)
        last.confidence_head = nn.Module()
        last.confidence_head.proj = W(1, d + rank, std=0.0)
        self.register_buffer("used", torch.ones(v, dtype=torch.bool) if used is None else used.clone())
        with torch.no_grad():
            self.embed.weight[~self.used] = 0
        self.ropes = {False: RopeTable(cfg.inv_freq(False)), True: RopeTable(cfg.inv_freq(True))}

    def head_weight(self):
        """Rows of ids never seen in training share one vector, so the stored head compresses (README §size)."""
        return torch.where(self.used[:, None], self.head_rows(), self.head_rest[None, :])

    def head_rows(self):
        return self.embed.weight if self.tie else self.head.weight

    def embed_weight(self):
        return torch.where(self.used[:, None], self.embed.weight, 0.0)

    def hidden(self, tokens, engram_ids):
        """Final collapsed, normed hidden `[B, S, dim]` of a whole sequence at positions 0.."""
        cfg = self.cfg
        B, S = tokens.shape
        h = rb(self.embed_weight()[tokens])
        X = h[:, :, None, :].expand(B, S, cfg.hc, cfg.dim).contiguous()
        pre = torch.zeros(B, S, cfg.hc, device=tokens.device)
        pre[..., 0] = 1
        shared = {"kv": {}, "topk": {}, "cand": None, "aux": []}
        self.taps = []
        for l, blk in enumerate(self.layers):
            if hasattr(blk, "engram"):
                X = blk.engram(X, engram_ids[cfg.engram_layer_ids.index(l)])
            if l in cfg.dspark_target_layer_ids:
                self.taps.append(rb(X.mean(-2)))
            rope_tab = self.ropes[blk.role["yarn"]]
            X, pre = blk(X, pre, lambda x: blk.attn(x, rope_tab, shared))
        self.aux = torch.stack(shared["aux"]).mean() if shared["aux"] else None
        return rms_norm(hc_pre(X, pre), self.norm.weight, cfg.eps)

    def forward(self, tokens, engram_ids):
        """f32 logits of every row, `[B, S, vocab]`."""
        return self.hidden(tokens, engram_ids) @ rb(self.head_weight()).t()

    def used_nll(self, tokens, engram_ids, targets):
        """Mean NLL over the full vocabulary from used rows only: the unused rows share one logit, counted as +log(count)."""
        h = self.hidden(tokens, engram_ids)
        idx = self.used.nonzero().squeeze(1)
        rest = h @ rb(self.head_rest)
        logits = torch.cat((h @ rb(self.head_rows()[idx]).t(), (rest + math.log(self.cfg.vocab - idx.numel()))[..., None]), -1)
        # An unused target is the rest class, one of `count` equal ids: its NLL is the class's plus log(count).
        pos = torch.where(self.used, torch.cumsum(self.used.long(), 0) - 1, idx.numel())
        unused = (~self.used[targets]).float().mean()
        return F.cross_entropy(logits.flatten(0, 1), pos[targets].flatten()) + unused * math.log(self.cfg.vocab - idx.numel())

    def moe_loads(self):
        return [(blk.ffn, blk.ffn.load) for blk in self.layers if blk.ffn.load is not None]
