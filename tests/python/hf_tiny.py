"""Tiny random-weight Hugging Face models for the tests (hidden 64, 2 layers, vocab 256), built from
configs in code: nothing is downloaded."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

# bos/eos/pad inside the 256-token vocabulary (Phi-3's default pad id 32000 would not be)
_TOKENS = dict(vocab_size=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)
_DECODER = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=256, **_TOKENS)


def _configs():
    import transformers as tf

    return {
        "llama": lambda: tf.LlamaConfig(**_DECODER),
        "qwen3": lambda: tf.Qwen3Config(head_dim=16, **_DECODER),
        "qwen3_moe": lambda: tf.Qwen3MoeConfig(head_dim=16, moe_intermediate_size=32, num_experts=4,
                                                num_experts_per_tok=2, decoder_sparse_step=1, **_DECODER),
        "mistral": lambda: tf.MistralConfig(head_dim=16, sliding_window=None, **_DECODER),
        # sliding_window 16 < prompt + 32 new tokens: the sliding layer's window is crossed while generating
        "gemma3_text": lambda: tf.Gemma3TextConfig(head_dim=16, sliding_window=16,
                                                    layer_types=["sliding_attention", "full_attention"],
                                                    **_DECODER),
        "phi3": lambda: tf.Phi3Config(**_DECODER),
        "gpt2": lambda: tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=256, **_TOKENS),
        "bert": lambda: tf.BertConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, max_position_embeddings=256, vocab_size=256,
                                      pad_token_id=0),
    }


MODELS = ["llama", "qwen3", "qwen3_moe", "mistral", "gemma3_text", "phi3", "gpt2", "bert"]
ENCODERS = {"bert"}


def make_model(name, seed=0):
    """A float32 model with seeded random weights, in eval mode, on the CPU."""
    import transformers as tf

    config = _configs()[name]()
    torch.manual_seed(seed)
    cls = tf.AutoModel if name in ENCODERS else tf.AutoModelForCausalLM
    return cls.from_config(config, dtype=torch.float32).eval()


def save_model(name, path, seed=0):
    make_model(name, seed).save_pretrained(path, safe_serialization=True)
    assert (path / "model.safetensors").is_file()
    return path


def load(name, path, **kw):
    import transformers as tf

    cls = tf.AutoModel if name in ENCODERS else tf.AutoModelForCausalLM
    return cls.from_pretrained(path, **kw).eval()
