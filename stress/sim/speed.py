"""How long one engine step takes, in simulated seconds.

One step computes a chunk of prompt tokens (chunked prefill, throughput shared by every
sequence in prefill) *and* one token for every decoding sequence. Decode time grows with
the batch and with the total context the batch attends over. Because both share the
step, one user's long paste stretches everyone else's inter-token gap, which is exactly
the "4 tok/s while someone pastes" effect operators see (FIELD_NOTES trap 9).
"""

from __future__ import annotations

from dataclasses import dataclass

from stress.config.sim import SimConfig


@dataclass(frozen=True, slots=True)
class SpeedModel:
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    batch_slowdown: float
    context_slowdown_per_1k: float

    @classmethod
    def from_config(cls, cfg: SimConfig) -> SpeedModel:
        return cls(
            prefill_tokens_per_s=cfg.prefill_tokens_per_s,
            decode_tokens_per_s=cfg.decode_tokens_per_s,
            batch_slowdown=cfg.decode_batch_slowdown,
            context_slowdown_per_1k=cfg.decode_context_slowdown_per_1k,
        )

    def prefill_s(self, prefill_tokens: int) -> float:
        return prefill_tokens / self.prefill_tokens_per_s

    def decode_s(self, n_decode: int, context_tokens: int) -> float:
        if n_decode <= 0:
            return 0.0
        factor = (
            1.0
            + self.batch_slowdown * (n_decode - 1)
            + self.context_slowdown_per_1k * context_tokens / 1000.0
        )
        return factor / self.decode_tokens_per_s

    def step_s(self, prefill_tokens: int, n_decode: int, context_tokens: int) -> float:
        """Simulated duration of a step that mixes a prefill chunk with a decode batch."""
        return self.prefill_s(prefill_tokens) + self.decode_s(n_decode, context_tokens)
