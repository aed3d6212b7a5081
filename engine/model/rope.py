"""Rotary position embeddings (RoFormer, Su et al. 2021, arXiv:2104.09864) and their scalings.

The model reads two tables, cos and sin [max_context, head_dim] in the "rotate_half" layout:
frequency i of a head covers dimensions i and i + head_dim/2. A scaling changes the inverse
frequencies and, for YaRN, the magnitude of cos/sin:

  linear   every frequency divided by `factor` (position interpolation, arXiv:2306.15595)
  llama3   Llama 3.1's wavelength bands: high frequencies kept, low ones divided by `factor`,
           a smooth blend between (transformers' `_compute_llama3_parameters`)
  yarn     "NTK-by-parts" blend of kept and divided frequencies along a ramp between the
           dimensions that turn `beta_fast` and `beta_slow` times over the original context,
           and cos/sin scaled by an attention factor (YaRN, Peng et al. 2023, arXiv:2309.00071,
           sections 3.2-3.4; transformers' `_compute_yarn_parameters`)
"""

from __future__ import annotations

import math

import torch

from engine.model.config import ModelConfig, RopeScaling


def base_inv_freq(theta: float, head_dim: int) -> torch.Tensor:
    """theta^(-2i/d) for i in [0, d/2): [d/2] float64."""
    return 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def llama3_divisors(s: RopeScaling, theta: float, head_dim: int) -> torch.Tensor:
    """What llama3 scaling divides each base frequency by: [d/2] float64, 1 (short wavelengths)
    .. factor (long ones). llama.cpp's converter stores exactly these as `rope_freqs.weight`."""
    wavelen = 2 * math.pi / base_inv_freq(theta, head_dim)
    low_wavelen = s.original_max_position / s.low_freq_factor     # longer: divided by factor
    high_wavelen = s.original_max_position / s.high_freq_factor   # shorter: kept
    smooth = (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    # between the bands: inv * ((1 - smooth) / factor + smooth)
    out = torch.where(wavelen < high_wavelen, 1.0, 1 / ((1 - smooth) / s.factor + smooth))
    return torch.where(wavelen > low_wavelen, s.factor, out)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    # YaRN's attention temperature, sqrt(1/t) = 0.1 ln(s) + 1 (arXiv:2309.00071 eq. 22)
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_attention_factor(s: RopeScaling) -> float:
    """The factor YaRN multiplies cos and sin by (so q.k by its square)."""
    if s.attention_factor is not None:
        return s.attention_factor
    if s.mscale and s.mscale_all_dim:       # DeepSeek's variant: a ratio of two temperatures
        return _yarn_mscale(s.factor, s.mscale) / _yarn_mscale(s.factor, s.mscale_all_dim)
    return _yarn_mscale(s.factor)


def yarn_inv_freq(s: RopeScaling, theta: float, head_dim: int) -> torch.Tensor:
    """[d/2] float32, computed in float32 as transformers does (so the tables agree bit for bit)."""
    d = head_dim

    def correction_dim(rotations: float) -> float:
        # the dimension whose wavelength fits `rotations` times into the original context
        return d * math.log(s.original_max_position / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(s.beta_fast), correction_dim(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001                       # a one-dimension ramp, not a division by zero
    ramp = ((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolate = 1 - ramp                  # 1: keep the frequency, 0: divide it by factor
    pos_freqs = theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    return (1.0 / (s.factor * pos_freqs)) * (1 - extrapolate) + (1.0 / pos_freqs) * extrapolate


def inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """The scaled inverse frequencies of cfg: [head_dim/2] float32."""
    s, theta, d = cfg.rope_scaling, cfg.rope_theta, cfg.head_dim
    if s.kind == "yarn":
        return yarn_inv_freq(s, theta, d)
    inv = base_inv_freq(theta, d)
    if s.kind == "linear":
        inv = inv / s.factor
    elif s.kind == "llama3":
        inv = inv / llama3_divisors(s, theta, d)
    return inv.float()


def attention_factor(s: RopeScaling) -> float:
    """The magnitude of cos/sin: 1 except under YaRN."""
    return yarn_attention_factor(s) if s.kind == "yarn" else 1.0


def rope_tables(cfg: ModelConfig, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin): [length, head_dim] each, scaled, on device in dtype. `length` (default: the
    model's context) is what the run needs: a model may claim a context of millions of tokens."""
    t = torch.arange(cfg.max_context if length is None else min(length, cfg.max_context), dtype=torch.float32)
    freqs = torch.outer(t, inv_freq(cfg))                      # [C, D/2]
    emb = torch.cat([freqs, freqs], dim=-1)                    # [C, D]
    m = attention_factor(cfg.rope_scaling)
    return (emb.cos() * m).to(device, dtype), (emb.sin() * m).to(device, dtype)
