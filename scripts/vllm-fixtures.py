"""Makes the vLLM suite's fixtures offline: a tiny random Llama-style model with its own tokenizer, and LoRA
adapters of it, each a safetensors directory. Nothing is downloaded.

Usage: vllm-fixtures.py OUT  ->  OUT/base, OUT/adapter-a-v1, OUT/adapter-a-v2, OUT/adapter-b-v1

The head size is 64: vLLM's CPU attention supports only some head sizes (32, 64, 80, ...; 16 stops the server at
the first request). The adapters' weights are random, not zero (peft starts B at zero, which would make an adapter
answer exactly as the base model), so each adapter changes the completions.
"""

import json
import sys
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

RANK = 8  # the server's --max-lora-rank must be at least this


def tokenizer(out: Path) -> PreTrainedTokenizerFast:
    words = "the a model peer network node file adapter weights load serve fast small tiny random byte".split()
    corpus = [" ".join(words[(i * 7 + j) % len(words)] for j in range(12)) for i in range(200)]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(out)
    return fast


def base_model(out: Path, vocab: int) -> None:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,  # head size 64
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)


def adapter(base: Path, out: Path, seed: int) -> None:
    torch.manual_seed(seed)
    model = LlamaForCausalLM.from_pretrained(base)
    lora = LoraConfig(r=RANK, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft = get_peft_model(model, lora)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_" in name:
                p.normal_(0.0, 0.5)
    peft.save_pretrained(out, safe_serialization=True)
    # The base is named by the path it was made from; vLLM does not read it, a reader should not look for it.
    config = json.loads((out / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "peerload-tiny-llama"
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2))


def main() -> None:
    out = Path(sys.argv[1])
    base = out / "base"
    base.mkdir(parents=True)
    vocab = len(tokenizer(base))
    base_model(base, vocab)
    for name, seed in (("adapter-a-v1", 1), ("adapter-a-v2", 2), ("adapter-b-v1", 3)):
        adapter(base, out / name, seed)
    for d in sorted(out.iterdir()):
        print(d.name, sorted(p.name for p in d.iterdir()), file=sys.stderr)


if __name__ == "__main__":
    main()
