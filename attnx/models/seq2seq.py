"""Encoder-decoder model with teacher-forced training and batched greedy / beam-search decoding."""

from __future__ import annotations

import torch
from torch import nn

from attnx.nn.decoders import Decoder
from attnx.nn.encoders import Encoder, EncoderOutput
from attnx.vocab import BOS, EOS, PAD


def until_eos(tokens: torch.Tensor) -> torch.Tensor:
    """[B, L] -> bool [B, L]: True up to and including the first EOS of each row."""
    eos = tokens == EOS
    return (eos.cumsum(1) - eos.long()) == 0


def gnmt_penalty(lengths: torch.Tensor, alpha: float) -> torch.Tensor:
    """GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^α (Wu et al. 2016); α = 0 ranks by raw log-prob."""
    return ((5.0 + lengths.float()) / 6.0) ** alpha


class Seq2Seq(nn.Module):
    def __init__(self, encoder: Encoder, decoder: Decoder) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def forward(
        self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor, need_weights: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher forcing: tgt_in = [BOS, y_1, ..., y_{U-1}] -> (logits [B, U, V], weights or None)."""
        return self.decoder(self.encoder(src, src_len), tgt_in, need_weights)

    @staticmethod
    def _log_probs(logits: torch.Tensor) -> torch.Tensor:
        """log p(y | ...) over the vocabulary with PAD and BOS ruled out as outputs."""
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        log_probs[:, [PAD, BOS]] = float("-inf")
        return log_probs

    @torch.no_grad()
    def greedy(
        self, src: torch.Tensor, src_len: torch.Tensor, max_len: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """argmax decoding -> (tokens [B, L] ending in EOS then PAD, weights [B, (H,) L, Tk] or None).

        Stops as soon as every row has emitted EOS (L <= max_len).
        """
        tokens, weights, _ = self._greedy(self.encoder(src, src_len), max_len, need_weights=True)
        return tokens, weights

    def _greedy(
        self, enc: EncoderOutput, max_len: int, need_weights: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Greedy decoding from an encoded batch; also returns each row's summed log-prob [B]."""
        state = self.decoder.init_state(enc)
        y = enc.summary.new_full((enc.summary.size(0),), BOS, dtype=torch.long)
        finished = torch.zeros_like(y, dtype=torch.bool)
        score = enc.summary.new_zeros(y.shape, dtype=torch.float32)
        tokens, weights = [], []
        for _ in range(max_len):
            logits, state, w = self.decoder.step(y, state, need_weights)
            log_probs = self._log_probs(logits)
            best, y = log_probs.max(dim=-1)
            score = score + best.masked_fill(finished, 0.0)
            y = y.masked_fill(finished, PAD)
            tokens.append(y)
            weights.append(w)
            finished = finished | (y == EOS)
            if finished.all():
                break
        stacked = None if weights[0] is None else torch.stack([w for w in weights if w is not None], dim=-2)
        return torch.stack(tokens, dim=1), stacked, score

    @torch.no_grad()
    def beam_search(
        self,
        src: torch.Tensor,
        src_len: torch.Tensor,
        max_len: int,
        beam_size: int = 5,
        length_penalty: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Batched beam search -> (tokens [B, L] ending in EOS then PAD, scores [B]).

        All B·K hypotheses advance together. Beams are pruned by summed log-prob; a finished
        hypothesis keeps its slot and score (it can only be extended by PAD at no cost). The
        answer maximises log p(Y) / lp(Y) with the GNMT penalty `length_penalty` (α; 0 = raw sum).
        Beam search alone can end below the greedy sequence (greedy's prefix may be pruned), so
        for K > 1 the greedy hypothesis is a candidate too: a wider beam never scores below greedy.
        With K = 1 the result is exactly greedy's.
        """
        batch, k = src.size(0), beam_size
        enc = self.encoder(src, src_len)
        state = self.decoder.init_state(EncoderOutput(*(t.repeat_interleave(k, dim=0) for t in enc)))
        y = src.new_full((batch * k,), BOS)
        scores = enc.summary.new_full((batch, k), float("-inf"), dtype=torch.float32)
        scores[:, 0] = 0.0  # all beams start identical: keep one so the first step yields K distinct
        finished = torch.zeros(batch * k, dtype=torch.bool, device=src.device)
        lengths = torch.zeros(batch * k, dtype=torch.long, device=src.device)
        tokens = src.new_empty(batch * k, 0)
        vocab = self.decoder.vocab_size
        only_pad = torch.full((vocab,), float("-inf"), device=src.device)
        only_pad[PAD] = 0.0
        for _ in range(max_len):
            logits, state, _ = self.decoder.step(y, state, need_weights=False)
            log_probs = torch.where(finished[:, None], only_pad, self._log_probs(logits))
            candidates = (scores.view(-1, 1) + log_probs).view(batch, k * vocab)
            scores, flat = candidates.topk(k, dim=1)
            origin = (flat // vocab + torch.arange(batch, device=src.device)[:, None] * k).view(-1)
            y = (flat % vocab).view(-1)
            state = state.select(origin)
            tokens = torch.cat([tokens.index_select(0, origin), y[:, None]], dim=1)
            lengths = lengths.index_select(0, origin) + (~finished.index_select(0, origin)).long()
            # -inf rows exist only when K exceeds the first step's choices; they never win.
            finished = finished.index_select(0, origin) | (y == EOS) | scores.view(-1).isneginf()
            if finished.all():
                break

        final = scores / gnmt_penalty(lengths.view(batch, k), length_penalty)
        best_score, best = final.max(dim=1)
        rows = best + torch.arange(batch, device=src.device) * k
        best_tokens = tokens.index_select(0, rows)
        if k == 1:
            return best_tokens, best_score
        greedy_tokens, _, greedy_score = self._greedy(enc, max_len, need_weights=False)
        greedy_score = greedy_score / gnmt_penalty(until_eos(greedy_tokens).sum(1), length_penalty)
        use_greedy = greedy_score > best_score
        width = max(best_tokens.size(1), greedy_tokens.size(1))
        best_tokens = nn.functional.pad(best_tokens, (0, width - best_tokens.size(1)), value=PAD)
        greedy_tokens = nn.functional.pad(greedy_tokens, (0, width - greedy_tokens.size(1)), value=PAD)
        return (
            torch.where(use_greedy[:, None], greedy_tokens, best_tokens),
            torch.where(use_greedy, greedy_score, best_score),
        )

    @torch.no_grad()
    def sequence_logprob(
        self, src: torch.Tensor, src_len: torch.Tensor, tokens: torch.Tensor
    ) -> torch.Tensor:
        """log p(tokens | src) [B], summed up to and including each row's first EOS."""
        tgt_in = torch.cat([torch.full_like(tokens[:, :1], BOS), tokens[:, :-1]], dim=1)
        logits, _ = self(src, src_len, tgt_in, need_weights=False)
        log_probs = torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens[..., None]).squeeze(-1)
        return log_probs.masked_fill(~until_eos(tokens), 0.0).sum(1)
