"""Convert SmolLM2-135M-Instruct's GGUF to a plain Hugging Face Llama model for vLLM.

    VENV/bin/python scripts/realserver/gguf_to_hf.py MODEL.gguf OUT_DIR

transformers reads (and dequantizes) the GGUF; the weights are copied into a fresh
LlamaForCausalLM in float32 and saved with the tokenizer (chat template included).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> None:
    import torch  # type: ignore[import-not-found]  # runs in the vLLM venv
    from transformers import (  # type: ignore[import-not-found]
        AutoModelForCausalLM,
        AutoTokenizer,
        LlamaForCausalLM,
    )

    gguf, out = Path(sys.argv[1]), Path(sys.argv[2])
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    src = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    config = src.config
    # a plain float model: vLLM rejects the "gguf" quantization_config transformers leaves
    for attr in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(config, attr):
            delattr(config, attr)
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(src.state_dict(), strict=False)
    if unexpected or [m for m in missing if "lm_head" not in m]:
        raise SystemExit(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    if getattr(src.config, "tie_word_embeddings", False):
        model.tie_weights()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    print(f"saved {out}")


if __name__ == "__main__":
    main()
