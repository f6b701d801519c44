"""Fake quantization with straight-through gradients, and the exact storage codes the Rust loader reads (spec/quant.md)."""

import torch

E4M3_MAX = 448.0
E2M1_MAX = 6.0
FP8_AMAX_FLOOR = 1e-4
FP4_E8M0_AMAX_FLOOR = 6.0 * 2.0 ** -126
FP4_E4M3_AMAX_FLOOR = 6.0 / 512.0
E2M1_GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def ste(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Forward q, gradient of the identity to x."""
    return x + (q - x).detach()


def rb(x: torch.Tensor) -> torch.Tensor:
    """Rounds to bf16 and back (RNE), straight-through."""
    return ste(x, x.detach().to(torch.bfloat16).float())


def pow2_ceil(v: torch.Tensor) -> torch.Tensor:
    """2^ceil(log2(v)) for positive normal v, as `fast_round_scale` (exponent plus one if any mantissa bit is set)."""
    bits = v.float().contiguous().view(torch.int32)
    exp = (bits >> 23) & 0xFF
    exp = exp + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return (exp << 23).view(torch.float32)


def e4m3_round(x: torch.Tensor) -> torch.Tensor:
    """Nearest E4M3FN value (RNE, saturated at ±448)."""
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float()


def e2m1_code_mag(a: torch.Tensor) -> torch.Tensor:
    """E2M1 magnitude code (0..7) of |x| ≤ 6, RNE: ties go to the even code."""
    code = (a > 0.25).int() + (a >= 0.75).int() + (a > 1.25).int() + (a >= 1.75).int()
    return code + (a > 2.5).int() + (a >= 3.5).int() + (a > 5.0).int()


def e2m1_round(x: torch.Tensor) -> torch.Tensor:
    grid = E2M1_GRID.to(x.device)
    mag = grid[e2m1_code_mag(x.abs().clamp(max=E2M1_MAX)).long()]
    return torch.where(x < 0, -mag, mag)


def _groups(x: torch.Tensor, g: int) -> torch.Tensor:
    assert x.shape[-1] % g == 0, f"last dim {x.shape[-1]} is not a multiple of {g}"
    return x.reshape(*x.shape[:-1], x.shape[-1] // g, g)


def qdq_fp8_groups(x: torch.Tensor, g: int = 32, floor: float = FP8_AMAX_FLOOR) -> torch.Tensor:
    """FP8 e4m3 with a power-of-two scale per `g` values along the last dim (act_quant ue8m0 / Engram rows)."""
    xg = _groups(x, g)
    s = pow2_ceil(xg.detach().abs().amax(-1, keepdim=True).clamp_min(floor) / E4M3_MAX)
    return ste(x, (e4m3_round(xg.detach() / s) * s).reshape(x.shape))


def qdq_fp4_e8m0(x: torch.Tensor, g: int = 32, floor: float = FP4_E8M0_AMAX_FLOOR) -> torch.Tensor:
    """FP4 e2m1 with a power-of-two scale per `g` (indexer q/k; routed-expert weights with floor 1e-4)."""
    xg = _groups(x, g)
    s = pow2_ceil(xg.detach().abs().amax(-1, keepdim=True).clamp_min(floor) / E2M1_MAX)
    return ste(x, (e2m1_round(xg.detach() / s) * s).reshape(x.shape))


def qdq_fp4_e4m3(x: torch.Tensor, g: int = 16) -> torch.Tensor:
    """FP4 e2m1 with an E4M3 scale `e4m3(amax/6)` per 16 (the compressed KV latent)."""
    xg = _groups(x, g)
    s = e4m3_round(xg.detach().abs().amax(-1, keepdim=True).clamp_min(FP4_E4M3_AMAX_FLOOR) / E2M1_MAX)
    return ste(x, (e2m1_round(xg.detach() / s) * s).reshape(x.shape))


def _tiles(w: torch.Tensor, b: int = 32):
    r, c = w.shape
    assert r % b == 0 and c % b == 0, f"{tuple(w.shape)} is not a multiple of {b}x{b} tiles"
    return w.reshape(r // b, b, c // b, b)


def tile_scales(w: torch.Tensor, b: int = 32) -> torch.Tensor:
    """Power-of-two scale per 32×32 tile, `[rows/32, cols/32]`."""
    t = _tiles(w.detach(), b)
    return pow2_ceil(t.abs().amax(dim=(1, 3)).clamp_min(FP8_AMAX_FLOOR) / E4M3_MAX)


def qdq_fp8_tiles(w: torch.Tensor, b: int = 32) -> torch.Tensor:
    """A dense FP8 weight as stored: e4m3 codes times one power-of-two scale per 32×32 tile."""
    s = tile_scales(w, b)[:, None, :, None]
    q = e4m3_round(_tiles(w.detach(), b) / s) * s
    return ste(w, q.reshape(w.shape))


def qdq_fp4_weight(w: torch.Tensor) -> torch.Tensor:
    """A routed-expert weight as stored: e2m1 per row and 32 columns, power-of-two scale (amax floor 1e-4)."""
    return qdq_fp4_e8m0(w, 32, FP8_AMAX_FLOOR)


def e8m0_bytes(s: torch.Tensor) -> torch.Tensor:
    """E8M0 byte of a power-of-two scale: its exponent field."""
    return ((s.float().contiguous().view(torch.int32) >> 23) & 0xFF).to(torch.uint8)


def fp8_tile_codes(w: torch.Tensor):
    """(e4m3 codes uint8 `[rows, cols]`, E8M0 bytes `[rows/32, cols/32]`) of a dense weight."""
    s = tile_scales(w)
    q = (_tiles(w.detach().float(), 32) / s[:, None, :, None]).reshape(w.shape)
    return e4m3_codes(q), e8m0_bytes(s)


def e4m3_codes(q: torch.Tensor) -> torch.Tensor:
    return q.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)


def fp8_row_codes(w: torch.Tensor):
    """(e4m3 codes `[rows, cols]`, E8M0 `[rows, cols/32]`): the Engram table layout."""
    wg = _groups(w.detach().float(), 32)
    s = pow2_ceil(wg.abs().amax(-1, keepdim=True).clamp_min(FP8_AMAX_FLOOR) / E4M3_MAX)
    return e4m3_codes((wg / s).reshape(w.shape)), e8m0_bytes(s.squeeze(-1))


def fp4_weight_codes(w: torch.Tensor):
    """(packed e2m1 bytes `[rows, cols/2]`, even element low, E8M0 `[rows, cols/32]`) of a routed-expert weight."""
    wg = _groups(w.detach().float(), 32)
    s = pow2_ceil(wg.abs().amax(-1, keepdim=True).clamp_min(FP8_AMAX_FLOOR) / E2M1_MAX)
    v = (wg / s).reshape(w.shape).clamp(-E2M1_MAX, E2M1_MAX)
    code = e2m1_code_mag(v.abs()) | ((v < 0) | ((v == 0) & torch.signbit(v))).int() * 8
    code = code.to(torch.uint8).reshape(w.shape[0], -1, 2)
    return (code[..., 0] | (code[..., 1] << 4)).contiguous(), e8m0_bytes(s.squeeze(-1))
