"""The tiny Llama of tests/python/hf_tiny.py written in JAX, for bench/modes.py's jax.jit reference: the
same weights (taken from the torch model), the same training step (cross-entropy, AdamW) and the same
static-cache decode step. check() compares its logits with the torch model's before anything is timed."""

import jax
import jax.numpy as jnp
import numpy as np


def params_from_torch(model):
    """The torch LlamaForCausalLM's weights as a pytree of float32 arrays ([in, out] for linears)."""
    sd = {k: np.asarray(v.detach().cpu().float().numpy()) for k, v in model.state_dict().items()}
    cfg = model.config
    layers = []
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        layers.append({
            "ln1": sd[p + "input_layernorm.weight"], "ln2": sd[p + "post_attention_layernorm.weight"],
            "q": sd[p + "self_attn.q_proj.weight"].T, "k": sd[p + "self_attn.k_proj.weight"].T,
            "v": sd[p + "self_attn.v_proj.weight"].T, "o": sd[p + "self_attn.o_proj.weight"].T,
            "gate": sd[p + "mlp.gate_proj.weight"].T, "up": sd[p + "mlp.up_proj.weight"].T,
            "down": sd[p + "mlp.down_proj.weight"].T,
        })
    params = {"embed": sd["model.embed_tokens.weight"], "norm": sd["model.norm.weight"],
              "head": sd["lm_head.weight"].T, "layers": layers}
    return jax.tree_util.tree_map(jnp.asarray, params)


class Config:
    def __init__(self, cfg):
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        rope = getattr(cfg, "rope_parameters", None) or {}
        self.theta = rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
        self.layers = cfg.num_hidden_layers


def rms_norm(x, w, eps):
    var = jnp.mean(x * x, axis=-1, keepdims=True)
    return w * (x * jax.lax.rsqrt(var + eps))


def rope(x, pos, theta):
    # x [B, heads, T, D], pos [T]; rotate-half convention, as Transformers' Llama
    d = x.shape[-1]
    inv = 1.0 / (theta ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    ang = pos[:, None].astype(jnp.float32) * inv[None, :]
    emb = jnp.concatenate([ang, ang], axis=-1)
    cos, sin = jnp.cos(emb), jnp.sin(emb)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    rot = jnp.concatenate([-x2, x1], axis=-1)
    return x * cos + rot * sin


def attention(c, lp, h, pos, k_all=None, v_all=None, valid=None):
    b, t, _ = h.shape
    q = (h @ lp["q"]).reshape(b, t, c.heads, c.head_dim).transpose(0, 2, 1, 3)
    k = (h @ lp["k"]).reshape(b, t, c.kv_heads, c.head_dim).transpose(0, 2, 1, 3)
    v = (h @ lp["v"]).reshape(b, t, c.kv_heads, c.head_dim).transpose(0, 2, 1, 3)
    q, k = rope(q, pos, c.theta), rope(k, pos, c.theta)
    if k_all is not None:  # static cache: write this step's keys and values at pos, attend to valid slots
        k_all = jax.lax.dynamic_update_slice(k_all, k, (0, 0, pos[0], 0))
        v_all = jax.lax.dynamic_update_slice(v_all, v, (0, 0, pos[0], 0))
        k, v = k_all, v_all
        mask = valid[None, :]
    else:
        mask = pos[:, None] >= pos[None, :]
    rep = c.heads // c.kv_heads
    k, v = jnp.repeat(k, rep, axis=1), jnp.repeat(v, rep, axis=1)
    s = (q @ k.transpose(0, 1, 3, 2)) / jnp.sqrt(jnp.float32(c.head_dim))
    s = jnp.where(mask, s, -jnp.inf)
    o = jax.nn.softmax(s, axis=-1) @ v
    o = o.transpose(0, 2, 1, 3).reshape(b, t, c.heads * c.head_dim)
    return o @ lp["o"], k_all, v_all


def mlp(lp, h):
    return (jax.nn.silu(h @ lp["gate"]) * (h @ lp["up"])) @ lp["down"]


def forward(c, params, ids):
    h = params["embed"][ids]
    pos = jnp.arange(ids.shape[1])
    for lp in params["layers"]:
        a, _, _ = attention(c, lp, rms_norm(h, lp["ln1"], c.eps), pos)
        h = h + a
        h = h + mlp(lp, rms_norm(h, lp["ln2"], c.eps))
    return rms_norm(h, params["norm"], c.eps) @ params["head"]


def loss_fn(c, params, ids):
    # Transformers' causal-LM loss: labels are the inputs, shifted inside
    logits = forward(c, params, ids)[:, :-1]
    labels = ids[:, 1:]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))


def make_train_step(c, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, wd=0.01):
    """One step of forward, backward and AdamW (torch.optim.AdamW's defaults), jitted."""

    def step(params, m, v, t, ids):
        loss, g = jax.value_and_grad(lambda p: loss_fn(c, p, ids))(params)
        t = t + 1
        m = jax.tree_util.tree_map(lambda a, b: betas[0] * a + (1 - betas[0]) * b, m, g)
        v = jax.tree_util.tree_map(lambda a, b: betas[1] * a + (1 - betas[1]) * b * b, v, g)
        bc1, bc2 = 1 - betas[0] ** t, 1 - betas[1] ** t

        def upd(p, mm, vv):
            p = p * (1 - lr * wd)
            return p - lr * (mm / bc1) / (jnp.sqrt(vv / bc2) + eps)

        params = jax.tree_util.tree_map(upd, params, m, v)
        return params, m, v, t, loss

    return jax.jit(step, donate_argnums=(0, 1, 2))


def make_decode_step(c):
    """One greedy decode step over a static cache: (params, cache, token [B], pos) -> (cache, next token)."""

    def step(params, cache, tok, pos):
        h = params["embed"][tok][:, None, :]
        p = pos[None]
        valid = jnp.arange(cache[0][0].shape[2]) <= pos
        new = []
        for lp, (k_all, v_all) in zip(params["layers"], cache):
            a, k_all, v_all = attention(c, lp, rms_norm(h, lp["ln1"], c.eps), p, k_all, v_all, valid)
            h = h + a
            h = h + mlp(lp, rms_norm(h, lp["ln2"], c.eps))
            new.append((k_all, v_all))
        logits = rms_norm(h, params["norm"], c.eps) @ params["head"]
        return new, jnp.argmax(logits[:, -1], axis=-1)

    return jax.jit(step, donate_argnums=(1,))


def empty_cache(c, batch, max_len):
    shape = (batch, c.kv_heads, max_len, c.head_dim)
    return [(jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32)) for _ in range(c.layers)]


def check(model, ids):
    """Largest difference between this model's logits and the torch model's on `ids` (a CPU tensor)."""
    import torch

    c = Config(model.config)
    with torch.no_grad():
        want = model(ids).logits.float().numpy()
    got = np.asarray(jax.jit(lambda p, i: forward(c, p, i))(params_from_torch(model), jnp.asarray(ids.numpy())))
    return float(np.max(np.abs(got - want)))
