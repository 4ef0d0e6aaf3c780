"""A transformers Llama built from a config, trained on the GPU under launch/attnscope-run (the
zero-code attach): tests/gpu/run.sh runs it and checks the summary it leaves. No weights are
downloaded: the model is random, bf16, SDPA attention.

    attnscope-run --nproc_per_node 1 tests/gpu/hf_gpu.py --seconds 10
"""
import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seconds", type=float, default=10)
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("hf_gpu: no CUDA device; nothing run")
        raise SystemExit(77)
    config = LlamaConfig(hidden_size=a.hidden, intermediate_size=4 * a.hidden,
                         num_hidden_layers=a.layers, num_attention_heads=a.heads,
                         num_key_value_heads=a.heads, vocab_size=a.vocab,
                         max_position_embeddings=a.seq, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to("cuda", torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    start, steps = time.time(), 0
    while time.time() - start < a.seconds:  # never reads the loss back: the host runs ahead
        tokens = torch.randint(a.vocab, (a.batch, a.seq), device="cuda")
        loss = model(input_ids=tokens, labels=tokens).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps += 1
    torch.cuda.synchronize()
    print(f"hf_gpu: {steps} steps in {time.time() - start:.1f} s, {a.layers} layers, "
          f"torch {torch.__version__}, {torch.cuda.get_device_name()}")


if __name__ == "__main__":
    main()
