"""DSpark drafters (spec §11, model/dspark.rs): teacher-forced draft blocks at sampled anchors of a frozen backbone's sequence."""

import torch
import torch.nn.functional as F

from model import Dsv41, attend, fp8_linear, hc_pre, qdq_fp8_groups, rb, rms_norm, rope


def window_kv(attn, x, cos, sin, eps):
    """`fp8(rope(kv_norm(wkv(x))))`: a draft row's K=V, and how projected main rows seed a stage's ring."""
    return qdq_fp8_groups(rope(rms_norm(fp8_linear(x, attn.wkv.weight), attn.kv_norm.weight, eps), cos, sin), 32)


def draft_attention(attn, x, ring, ring_ok, cos, sin, cfg):
    """Block rows `[B, N, blk, d]` attend to their ring `[B, N, W, hd]` (valid slots) and to every block row."""
    B, N, blk, _ = x.shape
    h, hd = cfg.n_heads, cfg.head_dim
    qr = rms_norm(fp8_linear(x, attn.wq_a.weight), attn.q_norm.weight, cfg.eps)
    q = rope(fp8_linear(qr, attn.wq_b.weight).view(B, N, blk, h, hd), cos[..., None, :], sin[..., None, :])
    keys = torch.cat((ring, window_kv(attn, x, cos, sin, cfg.eps)), 2)
    ok = torch.cat((ring_ok, torch.ones(N, blk, dtype=torch.bool, device=x.device)), 1)
    scores = torch.einsum("bnshd,bnkd->bnhsk", q, keys) * hd ** -0.5
    scores = scores.masked_fill(~ok[None, :, None, None, :], float("-inf"))
    o = rope(attend(scores, keys, attn.attn_sink), cos[..., None, :], sin[..., None, :], True)
    g = cfg.o_groups
    wa = rb(attn.wo_a.weight).view(g, cfg.o_lora_rank, h * hd // g)
    u = rb(torch.einsum("bnsgi,gri->bnsgr", o.reshape(B, N, blk, g, -1), wa)).flatten(-2)
    return fp8_linear(u, attn.wo_b.weight)


def draft_rows(model: Dsv41, tokens: torch.Tensor, engram_ids, anchors: torch.Tensor, markov_in=None):
    """Logits `[B, N, blk, V]` (teacher-forced Markov bias) and confidences of draft blocks after anchors p: row i predicts t[p+2+i]."""
    cfg = model.cfg
    B, L = tokens.shape
    blk, W = cfg.dspark_block_size, cfg.window
    with torch.no_grad():
        model.hidden(tokens, engram_ids)
        taps = torch.cat(model.taps, -1)
    st0, last = model.mtp[0], model.mtp[-1]
    main_x = rms_norm(fp8_linear(taps, st0.main_proj.weight), st0.main_norm.weight, cfg.eps)
    rope_tab = model.ropes[False]
    cos_all, sin_all = rope_tab(torch.arange(L, device=tokens.device))
    ring_pos = anchors[:, None] - W + 1 + torch.arange(W, device=tokens.device)[None, :]
    ring_ok = ring_pos >= 0
    pos = anchors[:, None] + 1 + torch.arange(blk, device=tokens.device)[None, :]
    cos, sin = rope_tab(pos.flatten())
    cos, sin = cos.view(len(anchors), blk, -1), sin.view(len(anchors), blk, -1)
    ids = torch.full((B, len(anchors), blk), cfg.dspark_noise_token_id, device=tokens.device)
    ids[..., 0] = tokens[:, anchors + 1]
    X = rb(model.embed_weight()[ids])[..., None, :].expand(*ids.shape, cfg.hc, cfg.dim).contiguous()
    pre = torch.zeros(*ids.shape, cfg.hc, device=tokens.device)
    pre[..., 0] = 1
    for stage in model.mtp:
        kv_main = window_kv(stage.attn, main_x, cos_all, sin_all, cfg.eps)
        ring = kv_main[:, ring_pos.clamp_min(0)] * ring_ok[None, :, :, None]
        X, pre = stage(X, pre, lambda x: draft_attention(stage.attn, x, ring, ring_ok, cos, sin, cfg))
    y = hc_pre(X, pre)
    logits = rms_norm(y, last.norm.weight, cfg.eps) @ rb(model.head_weight()).t()
    prev = tokens[:, anchors[:, None] + 1 + torch.arange(blk, device=tokens.device)] if markov_in is None else markov_in
    e = rb(last.markov_head.embed.weight * model.used[:, None])[prev]
    logits = logits + e @ rb(last.markov_head.head.weight * model.used[:, None]).t()
    conf = (torch.cat((y, e), -1) @ rb(last.confidence_head.proj.weight).t()).squeeze(-1)
    return logits, conf


def draft_loss(model: Dsv41, tokens: torch.Tensor, engram_ids, n_anchors: int, gen: torch.Generator):
    """CE of every draft row on the true text, plus BCE of the confidence on whether the row's argmax was right."""
    blk = model.cfg.dspark_block_size
    L = tokens.shape[1]
    anchors = torch.randperm(L - blk - 1, generator=gen)[:n_anchors].sort().values.to(tokens.device)
    logits, conf = draft_rows(model, tokens, engram_ids, anchors)
    tgt = tokens[:, anchors[:, None] + 2 + torch.arange(blk, device=tokens.device)]
    ce = F.cross_entropy(logits.flatten(0, 2), tgt.flatten(), reduction="none").view(tgt.shape)
    hit = (logits.argmax(-1) == tgt).float()
    bce = F.binary_cross_entropy_with_logits(conf, hit)
    return ce.mean(), bce, hit.mean(0).mean(0), accepted(hit)


def accepted(hit: torch.Tensor) -> float:
    """Mean length of the leading run of right drafts (teacher-forced Markov inputs), over anchors."""
    return hit.cumprod(-1).sum(-1).mean().item()
