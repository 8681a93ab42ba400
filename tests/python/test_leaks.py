"""The short leak run (bench/leak_run.py runs the long one): after warm-up, training steps of a transformer
encoder and decode steps of a tiny Llama with a static cache leave live device buffers, device bytes and
the compile count where they were, and host RSS within bench/leak_run.py's RSS_BOUND (64 MiB)."""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))

import leak_run  # noqa: E402


def test_encoder_training_300_steps_leaks_nothing():
    r = leak_run.train_encoder(300)
    assert not leak_run.check(r), leak_run.check(r)


def test_llama_static_cache_decode_200_steps_leaks_nothing():
    r = leak_run.decode_llama(200)
    assert not leak_run.check(r), leak_run.check(r)
