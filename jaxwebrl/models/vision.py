"""The vision encoders of Qwen3-VL and Qwen2.5-VL as pure functions over nested param dicts.

Input is the processor's `pixel_values` (one row per patch of temporal_patch x patch x patch pixels, the
patches of each image in 2x2 merge-block order) for all images of a batch, concatenated. Everything that
depends on the image sizes (`image_grid_thw`) is computed on the host by `patch_layout` as plain index
arrays: each patch's (row, col) for the 2D rotary angles, which image and which attention window it
belongs to, and (Qwen3-VL) the bilinear taps into the learned position grid. The device code is then
shape-static: a bucketed patch count compiles once, padding patches belong to no image (segment 0).

Attention runs over all patches given with a mask (same image, or same window for Qwen2.5-VL's
windowed blocks), so Qwen2.5-VL's window attention needs no token permutation: masks replace the
reordering transformers does, with the same result. Long patch sequences attend in checkpointed query
blocks (`attention`), so memory grows with N x block, not N^2. Blocks are scanned in runs of one attention kind
(full or windowed), split at the DeepStack taps.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwebrl.models.decoder import ParamSpec, rms_norm
from jaxwebrl.models.mrope import rotate
from jaxwebrl.models.vl_config import VisionConfig

Params = dict[str, Any]
_NEG_INF = -0.7 * float(np.finfo(np.float32).max)


# ---- parameters ----------------------------------------------------------------------------------

def _merger_specs(v: VisionConfig, stack: int | None, postshuffle: bool) -> dict[str, ParamSpec]:
    """Patch merger: norm, then 2x2 patches concatenated -> MLP -> text hidden size."""
    M, D, O = v.hidden_size * v.merge_unit, v.hidden_size, v.out_hidden_size
    lead = (stack,) if stack is not None else ()
    lax = ("layers",) if stack is not None else ()
    norm_dim = M if postshuffle else D
    specs = {
        "norm": ParamSpec(lead + (norm_dim,), lax + ("norm",), "ones"),
        "fc1": ParamSpec(lead + (M, M), lax + ("embed", "mlp"), "normal"),
        "fc1_b": ParamSpec(lead + (M,), lax + ("mlp",), "zeros"),
        "fc2": ParamSpec(lead + (M, O), lax + ("mlp", "embed"), "normal"),
        "fc2_b": ParamSpec(lead + (O,), lax + ("norm",), "zeros"),
    }
    if v.family == "qwen3_vl":  # LayerNorm has a bias; Qwen2.5-VL's RMSNorm has none
        specs["norm_b"] = ParamSpec(lead + (norm_dim,), lax + ("norm",), "zeros")
    return specs


def param_specs(v: VisionConfig) -> dict[str, Any]:
    """Shape, logical axes and initialiser of every vision parameter, nested like the params."""
    L, D, F, H, hd = v.depth, v.hidden_size, v.intermediate_size, v.num_heads, v.head_dim
    qwen3 = v.family == "qwen3_vl"
    blocks: dict[str, ParamSpec] = {
        "norm1": ParamSpec((L, D), ("layers", "norm"), "ones"),
        "norm2": ParamSpec((L, D), ("layers", "norm"), "ones"),
        "wqkv": ParamSpec((L, D, 3, H, hd), ("layers", "embed", "qkv", "heads", "head_dim"), "normal"),
        "bqkv": ParamSpec((L, 3, H, hd), ("layers", "qkv", "heads", "head_dim"), "zeros"),
        "wo": ParamSpec((L, H, hd, D), ("layers", "heads", "head_dim", "embed"), "normal"),
        "bo": ParamSpec((L, D), ("layers", "norm"), "zeros"),
    }
    if qwen3:
        blocks.update(
            norm1_b=ParamSpec((L, D), ("layers", "norm"), "zeros"),
            norm2_b=ParamSpec((L, D), ("layers", "norm"), "zeros"),
            fc1=ParamSpec((L, D, F), ("layers", "embed", "mlp"), "normal"),
            fc1_b=ParamSpec((L, F), ("layers", "mlp"), "zeros"),
            fc2=ParamSpec((L, F, D), ("layers", "mlp", "embed"), "normal"),
            fc2_b=ParamSpec((L, D), ("layers", "norm"), "zeros"),
        )
    else:
        blocks.update(
            w_gate=ParamSpec((L, D, F), ("layers", "embed", "mlp"), "normal"),
            b_gate=ParamSpec((L, F), ("layers", "mlp"), "zeros"),
            w_up=ParamSpec((L, D, F), ("layers", "embed", "mlp"), "normal"),
            b_up=ParamSpec((L, F), ("layers", "mlp"), "zeros"),
            w_down=ParamSpec((L, F, D), ("layers", "mlp", "embed"), "normal"),
            b_down=ParamSpec((L, D), ("layers", "norm"), "zeros"),
        )
    specs: dict[str, Any] = {
        "patch_w": ParamSpec((v.patch_dim, D), ("vision_patch", "embed"), "normal"),
        "blocks": blocks,
        "merger": _merger_specs(v, None, postshuffle=False),
    }
    if qwen3:
        specs["patch_b"] = ParamSpec((D,), ("norm",), "zeros")
        specs["pos_embed"] = ParamSpec((v.num_position_embeddings, D), ("vision_positions", "embed"), "normal")
        if v.deepstack_visual_indexes:
            specs["deepstack"] = _merger_specs(v, len(v.deepstack_visual_indexes), postshuffle=True)
    return specs


# ---- host-side layout of the patches -------------------------------------------------------------

def _bilinear_taps(index: np.ndarray, size: np.ndarray, side: int) -> tuple[np.ndarray, np.ndarray]:
    """Taps and weights of align_corners=True bilinear resampling of a `side`-long axis to `size`
    (transformers' `_interpolation_axis_taps_weights`, float32 like its torch code)."""
    src = index.astype(np.float32) * np.float32(side - 1) / np.maximum(size - 1, 1).astype(np.float32)
    floor = np.floor(src)
    offsets = np.arange(2)
    raw = floor.astype(np.int64)[:, None] + offsets
    weights = np.maximum(np.float32(1) - np.abs(src[:, None] - floor[:, None] - offsets), 0).astype(np.float32)
    return np.clip(raw, 0, side - 1), weights


def patch_layout(v: VisionConfig, image_grid_thw: np.ndarray, num_patches: int | None = None) -> dict[str, np.ndarray]:
    """Index arrays the encoder needs for images of these (t, h, w) patch grids, padded to `num_patches`.

    rowcol int32[N, 2]: each patch's (row, col) in its image; segment int32[N]: 1 + index of its
    (image, frame), 0 for padding; window int32[N]: 1 + its Qwen2.5-VL attention window (= segment for
    Qwen3-VL); interp_index int32[N, 4] / interp_weight float32[N, 4]: Qwen3-VL's learned-position taps.
    """
    grids = np.asarray(image_grid_thw, np.int64).reshape(-1, 3)
    m = v.spatial_merge_size
    rows, cols, segs, wins = [], [], [], []
    seg = win = 0
    for t, h, w in grids:
        if h % m or w % m:
            raise ValueError(f"image grid {[int(t), int(h), int(w)]} is not divisible by spatial_merge_size={m}; "
                             "use the checkpoint's image processor")
        k = np.arange(h * w)
        bw = w // m
        row = (k // (m * m * bw)) * m + (k // m) % m
        col = ((k // (m * m)) % bw) * m + k % m
        vw = max(v.window_merged, 1)
        nww = -(-(w // m) // vw)
        nwh = -(-(h // m) // vw)
        window = ((row // m) // vw) * nww + (col // m) // vw
        for _ in range(t):
            rows.append(row)
            cols.append(col)
            segs.append(np.full(h * w, seg + 1))
            wins.append(window + win + 1)
            seg += 1
            win += nwh * nww
    n = int(sum(len(r) for r in rows))
    total = n if num_patches is None else num_patches
    if total < n:
        raise ValueError(f"images have {n} patches > num_patches={total}; raise the patch bucket")
    if total % v.merge_unit:
        raise ValueError(f"num_patches={total} must be a multiple of spatial_merge_size**2={v.merge_unit}")

    def cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
        flat = np.concatenate(parts) if parts else np.zeros(0, dtype)
        return np.pad(flat.astype(dtype), (0, total - n))

    row, col = cat(rows, np.int32), cat(cols, np.int32)
    out = {
        "rowcol": np.stack([row, col], axis=-1),
        "segment": cat(segs, np.int32),
        "window": cat(wins, np.int32) if v.family == "qwen2_5_vl" else cat(segs, np.int32),
    }
    if v.family == "qwen3_vl":
        side = int(round(v.num_position_embeddings ** 0.5))
        heights = cat([np.full(t * h * w, h) for t, h, w in grids], np.int64)
        widths = cat([np.full(t * h * w, w) for t, h, w in grids], np.int64)
        ht, hw_ = _bilinear_taps(row, np.maximum(heights, 1), side)
        wt, ww_ = _bilinear_taps(col, np.maximum(widths, 1), side)
        real = (np.arange(total) < n).astype(np.float32)[:, None]
        out["interp_index"] = (ht[:, :, None] * side + wt[:, None, :]).reshape(total, 4).astype(np.int32)
        out["interp_weight"] = (hw_[:, :, None] * ww_[:, None, :]).reshape(total, 4).astype(np.float32) * real
    return out


# ---- the math ------------------------------------------------------------------------------------

def _activation(name: str, x: jax.Array) -> jax.Array:
    if name == "gelu_pytorch_tanh":
        return jax.nn.gelu(x, approximate=True)
    if name == "gelu":
        return jax.nn.gelu(x, approximate=False)
    if name == "quick_gelu":
        return x * jax.nn.sigmoid(1.702 * x)
    return jax.nn.silu(x)


def layer_norm(x: jax.Array, weight: jax.Array, bias: jax.Array, eps: float = 1e-6) -> jax.Array:
    xf = x.astype(jnp.float32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
    y = (xf - mean) * jax.lax.rsqrt(var + eps)
    return (y * weight.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


def _norm(v: VisionConfig, x: jax.Array, p: Params, name: str) -> jax.Array:
    if v.family == "qwen3_vl":
        return layer_norm(x, p[name], p[name + "_b"])
    return rms_norm(x, p[name], 1e-6)


def rotary_angles(v: VisionConfig, rowcol: jax.Array) -> jax.Array:
    """float32[N, head_dim/2]: the row angles then the column angles (one frequency set, head_dim/4 long)."""
    half = v.head_dim // 2
    inv_freq = 1.0 / (v.rope_theta ** (np.arange(0, half, 2, dtype=np.float32) / half))
    ang = rowcol.astype(jnp.float32)[:, :, None] * jnp.asarray(inv_freq, jnp.float32)  # [N, 2, hd/4]
    return ang.reshape(ang.shape[0], -1)


VISION_QUERY_BLOCK = 512  # longer patch sequences attend in query blocks of this many patches


def attention(v: VisionConfig, q: jax.Array, k: jax.Array, val: jax.Array, ids: jax.Array) -> jax.Array:
    """Bidirectional attention of patches q/k/val [N, H, hd] among patches with the same non-zero id
    (ids int32[N]: the image, or the Qwen2.5-VL window; 0 = padding, which no patch attends to).

    A long sequence (the training batch's patches of a row: thousands) goes in query blocks, each under
    `jax.checkpoint`, so at most one block's scores [H, block, N] are live, forward or backward, instead of
    [H, N, N]; the result is the same softmax, row by row."""
    N = q.shape[0]
    scale = v.head_dim ** -0.5

    def block(qb: jax.Array, idb: jax.Array) -> jax.Array:
        scores = jnp.einsum("nhk,mhk->hnm", qb, k, preferred_element_type=jnp.float32) * scale
        mask = (idb[:, None] == ids[None, :]) & (ids[None, :] != 0)
        probs = jax.nn.softmax(jnp.where(mask[None], scores, _NEG_INF), axis=-1).astype(val.dtype)
        return jnp.einsum("hnm,mhk->nhk", probs, val)

    b = VISION_QUERY_BLOCK
    if N <= 2 * b or N % b:
        return block(q, ids)
    out = jax.lax.map(jax.checkpoint(lambda xs: block(*xs)), (q.reshape(N // b, b, *q.shape[1:]), ids.reshape(N // b, b)))
    return out.reshape(q.shape)


def _block(v: VisionConfig, p: Params, x: jax.Array, angles: jax.Array, ids: jax.Array) -> jax.Array:
    """Pre-norm ViT block: x + attn(norm1(x)), then + mlp(norm2(x)). x [N, D]; ids int32[N] (`attention`)."""
    dt = x.dtype
    h = _norm(v, x, p, "norm1")
    qkv = jnp.einsum("nd,dshk->snhk", h, p["wqkv"].astype(dt)) + p["bqkv"].astype(dt)[:, None]
    q, k, val = rotate(qkv[0], angles), rotate(qkv[1], angles), qkv[2]
    attn = attention(v, q, k, val, ids)
    x = x + jnp.einsum("nhk,hkd->nd", attn, p["wo"].astype(dt)) + p["bo"].astype(dt)
    h = _norm(v, x, p, "norm2")
    if v.family == "qwen3_vl":
        a = _activation(v.hidden_act, h @ p["fc1"].astype(dt) + p["fc1_b"].astype(dt))
        return x + a @ p["fc2"].astype(dt) + p["fc2_b"].astype(dt)
    gate = _activation(v.hidden_act, h @ p["w_gate"].astype(dt) + p["b_gate"].astype(dt))
    up = h @ p["w_up"].astype(dt) + p["b_up"].astype(dt)
    return x + (gate * up) @ p["w_down"].astype(dt) + p["b_down"].astype(dt)


def merge(v: VisionConfig, p: Params, x: jax.Array, postshuffle: bool) -> jax.Array:
    """[N, D] patches -> [N / merge^2, out_hidden]: 2x2 neighbours concatenated, normed, MLP (exact GELU)."""
    dt = x.dtype
    width = v.hidden_size * v.merge_unit
    if postshuffle:
        x = _norm(v, x.reshape(-1, width), p, "norm")
    else:
        x = _norm(v, x, p, "norm").reshape(-1, width)
    x = jax.nn.gelu(x @ p["fc1"].astype(dt) + p["fc1_b"].astype(dt), approximate=False)
    return x @ p["fc2"].astype(dt) + p["fc2_b"].astype(dt)


def encode(
    v: VisionConfig, params: Params, pixel_values: jax.Array, layout: dict[str, jax.Array], dtype: str = "float32",
    remat: bool = False, scan_layers: bool = True,
) -> tuple[jax.Array, jax.Array | None]:
    """Merged visual tokens float[N / merge^2, out_hidden] and the DeepStack features
    float[len(deepstack_visual_indexes), N / merge^2, out_hidden] (None for Qwen2.5-VL)."""
    dt = jnp.dtype(dtype)
    x = pixel_values.astype(dt) @ params["patch_w"].astype(dt)
    if v.family == "qwen3_vl":
        x = x + params["patch_b"].astype(dt)
        taps = jnp.take(params["pos_embed"].astype(dt), layout["interp_index"], axis=0)  # [N, 4, D]
        x = x + jnp.einsum("ntd,nt->nd", taps, layout["interp_weight"].astype(dt))
    angles = rotary_angles(v, layout["rowcol"])
    seg, win = layout["segment"], layout["window"]
    is_full = np.array([v.family == "qwen3_vl" or i in v.fullatt_block_indexes for i in range(v.depth)])

    def run(h: jax.Array, start: int, end: int) -> jax.Array:
        """Blocks start..end-1, scanned in runs of the same attention kind (full / windowed)."""
        while start < end:
            stop = start + 1
            while stop < end and is_full[stop] == is_full[start]:
                stop += 1
            ids = seg if is_full[start] else win

            def body(x: jax.Array, p: Params, ids: jax.Array = ids) -> tuple[jax.Array, None]:
                return _block(v, p, x, angles, ids), None

            if remat:
                body = jax.checkpoint(body, policy=jax.checkpoint_policies.nothing_saveable)  # type: ignore[assignment]
            if scan_layers:
                h, _ = jax.lax.scan(body, h, jax.tree.map(lambda a: a[start:stop], params["blocks"]))
            else:
                for i in range(start, stop):
                    h, _ = body(h, jax.tree.map(lambda a: a[i], params["blocks"]))
            start = stop
        return h

    taps = sorted(v.deepstack_visual_indexes)
    features: dict[int, jax.Array] = {}
    done = 0
    for block in taps:  # run up to and including the tapped block, then merge its output
        x = run(x, done, block + 1)
        done = block + 1
        j = v.deepstack_visual_indexes.index(block)
        features[j] = merge(v, jax.tree.map(lambda a: a[j], params["deepstack"]), x, postshuffle=True)
    x = run(x, done, v.depth)
    merged = merge(v, params["merger"], x, postshuffle=False)
    # DeepStack features in block order: decoder layer i receives the i-th tapped block's features.
    order = sorted(features, key=lambda j: v.deepstack_visual_indexes[j])
    deepstack = jnp.stack([features[j] for j in order]) if features else None
    return merged, deepstack
