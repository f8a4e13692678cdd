"""Multimodal rotary positions (M-RoPE) of Qwen2.5-VL / Qwen3-VL, and rotation by precomputed angles.

Every token has three positions (temporal, height, width). Text tokens have the same value on all three
(so M-RoPE reduces to plain RoPE on text); an image's merged patches get (start, start + row, start + col)
and the text after it resumes at start + max(rows, cols). Each rotary frequency reads one of the three
axes: Qwen2.5-VL in contiguous sections, Qwen3-VL interleaved (T,H,W,T,H,W,...). The positions come from
`input_ids` and `image_grid_thw` on the host (`rope_index`, like transformers' `get_rope_index`); the device
code only multiplies.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def rotate(x: jax.Array, angles: jax.Array) -> jax.Array:
    """Rotate x[..., T, heads, head_dim] by angles[..., T, head_dim // 2] (rotate-half convention, fp32 math)."""
    cos = jnp.concatenate([jnp.cos(angles)] * 2, axis=-1)[..., None, :]
    sin = jnp.concatenate([jnp.sin(angles)] * 2, axis=-1)[..., None, :]
    xf = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-xf[..., half:], xf[..., :half]], axis=-1)
    return (xf * cos + rotated * sin).astype(x.dtype)


def axis_of_frequency(section: tuple[int, ...], interleaved: bool) -> np.ndarray:
    """int32[sum(section)]: which position axis (0 = T, 1 = H, 2 = W) each rotary frequency reads."""
    n = sum(section)
    if not interleaved:  # Qwen2.5-VL: section i of the frequencies reads axis i
        return np.concatenate([np.full(s, i, np.int32) for i, s in enumerate(section)])
    axes = np.zeros(n, np.int32)  # Qwen3-VL: T everywhere, then H at 1,4,7,.. and W at 2,5,8,.. per its count
    for axis in (1, 2):
        idx = np.arange(axis, 3 * section[axis], 3)
        axes[idx[idx < n]] = axis
    return axes


def mrope_angles(positions: jax.Array, inv_freq: np.ndarray, axis_map: np.ndarray) -> jax.Array:
    """float32[B, T, hd/2] rotation angles from positions int[3, B, T]."""
    pos = jnp.take(positions.astype(jnp.float32), jnp.asarray(axis_map), axis=0)  # [hd/2, B, T]
    return jnp.moveaxis(pos, 0, -1) * jnp.asarray(inv_freq)


def rope_index(
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    image_grid_thw: np.ndarray | None,
    image_token_id: int,
    spatial_merge_size: int,
) -> tuple[np.ndarray, np.ndarray]:
    """M-RoPE positions int32[3, B, T] (0 on padding) and the per-row delta int32[B] that decoding adds to
    the token index (position of the next token = its cache index + delta).

    Images are taken in order over the batch, row by row, each a run of `image_token_id` of length
    t*h*w / merge^2 (as the processor expands them)."""
    B, T = input_ids.shape
    grids = iter(np.asarray(image_grid_thw).reshape(-1, 3) if image_grid_thw is not None else ())
    positions = np.zeros((3, B, T), np.int64)
    deltas = np.zeros(B, np.int64)
    m = spatial_merge_size
    for b in range(B):
        keep = np.asarray(attention_mask[b]).astype(bool)
        ids = np.asarray(input_ids[b])[keep]
        out = np.zeros((3, len(ids)), np.int64)
        pos, i = 0, 0
        while i < len(ids):
            if ids[i] != image_token_id:
                j = i
                while j < len(ids) and ids[j] != image_token_id:
                    j += 1
                out[:, i:j] = pos + np.arange(j - i)
                pos += j - i
                i = j
                continue
            try:
                t, h, w = (int(v) for v in next(grids))
            except StopIteration:
                raise ValueError(f"row {b}: more runs of image tokens (id {image_token_id}) than entries in "
                                 "image_grid_thw; pass one grid per image, in order") from None
            gh, gw = h // m, w // m
            n = t * gh * gw
            if i + n > len(ids) or (ids[i:i + n] != image_token_id).any():
                raise ValueError(f"row {b}: image with grid {[t, h, w]} needs {n} consecutive image tokens at "
                                 f"index {i}; expand the placeholders with the checkpoint's processor")
            tt, hh, ww = np.meshgrid(np.arange(t), np.arange(gh), np.arange(gw), indexing="ij")
            out[:, i:i + n] = np.stack([tt.ravel() + pos, hh.ravel() + pos, ww.ravel() + pos])
            pos += max(h, w) // m
            i += n
        positions[:, b, keep] = out
        deltas[b] = (out.max() + 1 - len(ids)) if len(ids) else 0
    if next(grids, None) is not None:
        raise ValueError("image_grid_thw has more entries than runs of image tokens in input_ids")
    return positions.astype(np.int32), deltas.astype(np.int32)
