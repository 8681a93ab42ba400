"""Tiny Diffusers pipelines with seeded random weights, for tests, the demo and benchmarks.

Everything is built from configs in code, tokenizers included (a character-level vocabulary held in
memory): nothing is downloaded and the same seed gives the same weights. Each function returns a float32
pipeline on the CPU with its progress bar off; move it with ``pipe.to("tpu")``.

    from torch_pjrt import tiny_pipelines
    pipe = tiny_pipelines.flux().to("tpu")
    image = pipe("a cat", height=16, width=16, num_inference_steps=2, output_type="np").images

``ddpm()`` and ``ddim()`` are unconditional UNet2D pipelines (16x16 RGB by default; ``ddpm(size=64,
channels=(64, 128))`` is a UNet of 2.8 million parameters). ``flux()`` and ``sd3()`` are text-to-image
pipelines with CLIP and T5 text encoders; call them with ``height=width=16`` and ``max_sequence_length=16``.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _seeded(seed, build):
    torch.manual_seed(seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        return build().eval()
    finally:
        torch.set_default_dtype(default)


def _finish(pipe):
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _unet(size, channels, seed):
    from diffusers import UNet2DModel

    # the last level has attention, the others not
    down = ["DownBlock2D"] * (len(channels) - 1) + ["AttnDownBlock2D"]
    up = ["AttnUpBlock2D"] + ["UpBlock2D"] * (len(channels) - 1)
    return _seeded(seed, lambda: UNet2DModel(sample_size=size, in_channels=3, out_channels=3, layers_per_block=1,
                                             block_out_channels=tuple(channels), norm_num_groups=8,
                                             down_block_types=tuple(down), up_block_types=tuple(up)))


# The UNet predicts v, not the noise: with a random UNet, epsilon prediction makes DDIM's update multiply any
# error (float32 rounding included) by sqrt(alpha_bar_prev / alpha_bar) at every step, about 100x over 20
# steps; with v prediction the update shrinks errors.
_PREDICTION = "v_prediction"


def ddpm(size=16, channels=(16, 32), seed=0):
    """DDPMPipeline: UNet2DModel (``size`` x ``size`` RGB, one level per entry of ``channels``, the last with
    attention) and DDPMScheduler."""
    from diffusers import DDPMPipeline, DDPMScheduler

    scheduler = DDPMScheduler(prediction_type=_PREDICTION)
    return _finish(DDPMPipeline(unet=_unet(size, channels, seed), scheduler=scheduler))


def ddim(size=16, channels=(16, 32), seed=0):
    """DDIMPipeline: the same UNet2DModel as :func:`ddpm` and DDIMScheduler."""
    from diffusers import DDIMPipeline, DDIMScheduler

    scheduler = DDIMScheduler(prediction_type=_PREDICTION)
    return _finish(DDIMPipeline(unet=_unet(size, channels, seed), scheduler=scheduler))


def _clip_tokenizer():
    from transformers import CLIPTokenizer

    # byte-pair encoding without merges: one token per character, "</w>" marking a word's last one
    specials = ["<|startoftext|>", "<|endoftext|>"]
    pieces = specials + list(_LETTERS) + [c + "</w>" for c in _LETTERS]
    return CLIPTokenizer(vocab={p: i for i, p in enumerate(pieces)}, merges=[], model_max_length=77)


def _t5_tokenizer():
    from transformers import T5Tokenizer

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    pieces += [(c, -3.0) for c in _LETTERS] + [("\u2581" + c, -2.5) for c in _LETTERS]
    return T5Tokenizer(vocab=pieces, extra_ids=0, model_max_length=512)


def _clip(seed, hidden, projection):
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    config = CLIPTextConfig(vocab_size=len(_clip_tokenizer()), hidden_size=hidden, intermediate_size=2 * hidden,
                            projection_dim=hidden, num_hidden_layers=2, num_attention_heads=2,
                            max_position_embeddings=77, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    cls = CLIPTextModelWithProjection if projection else CLIPTextModel
    return _seeded(seed, lambda: cls(config))


def _t5(seed, d_model):
    from transformers import T5Config, T5EncoderModel

    config = T5Config(vocab_size=len(_t5_tokenizer()), d_model=d_model, d_kv=8, d_ff=2 * d_model, num_layers=2,
                      num_heads=4, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    return _seeded(seed, lambda: T5EncoderModel(config))


def _vae(seed, latent_channels, **factors):
    from diffusers import AutoencoderKL

    return _seeded(seed, lambda: AutoencoderKL(block_out_channels=(8,), latent_channels=latent_channels,
                                               norm_num_groups=4, sample_size=16, use_quant_conv=False,
                                               use_post_quant_conv=False, **factors))


def flux(seed=0):
    """FluxPipeline: FluxTransformer2DModel (one double and one single block), AutoencoderKL (one level, so
    latents are image-sized, packed 2x2), CLIP and T5 text encoders with their tokenizers,
    FlowMatchEulerDiscreteScheduler."""
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    transformer = _seeded(seed, lambda: FluxTransformer2DModel(
        patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=[4, 4, 8]))
    return _finish(FluxPipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=_vae(seed + 1, 1, scaling_factor=1.5, shift_factor=0.06),
        text_encoder=_clip(seed + 2, 32, projection=False), tokenizer=_clip_tokenizer(),
        text_encoder_2=_t5(seed + 3, 32), tokenizer_2=_t5_tokenizer()))


def sd3(seed=0):
    """StableDiffusion3Pipeline: SD3Transformer2DModel (two blocks, patch 2), AutoencoderKL (one level),
    two CLIP text encoders with projection and a T5 encoder with their tokenizers,
    FlowMatchEulerDiscreteScheduler. The two CLIPs' hidden states side by side are as wide as T5's (32)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline

    transformer = _seeded(seed, lambda: SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=32, pooled_projection_dim=32,
        pos_embed_max_size=16))
    return _finish(StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=_vae(seed + 1, 4, scaling_factor=1.5, shift_factor=0.06),
        text_encoder=_clip(seed + 2, 16, projection=True), tokenizer=_clip_tokenizer(),
        text_encoder_2=_clip(seed + 3, 16, projection=True), tokenizer_2=_clip_tokenizer(),
        text_encoder_3=_t5(seed + 4, 32), tokenizer_3=_t5_tokenizer()))
