"""Recurrent cells written out: torch's RNN kernels step by step, for the loops attnx writes itself (the
rnn decoder's teacher forcing, and the compiled regions of both rnn encoder and decoder, where Dynamo
cannot trace torch's RNN modules)."""

from __future__ import annotations

from typing import Any

import torch


def cell_update(cell: str, gi: torch.Tensor, gh: torch.Tensor, previous: Any) -> Any:
    """A recurrent cell's new state from its input gates gi = W_i x + b_i and hidden gates
    gh = W_h h + b_h, in torch's gate order:

      gru   r = σ(gi_r + gh_r), z = σ(gi_z + gh_z), n = tanh(gi_n + r ⊙ gh_n), h' = (1 − z) ⊙ n + z ⊙ h
      lstm  i, f, g, o = σ, σ, tanh, σ of (gi + gh); c' = f ⊙ c + i ⊙ g, h' = o ⊙ tanh(c')
      rnn   h' = tanh(gi + gh)
    """
    if cell == "gru":
        i_r, i_z, i_n = gi.chunk(3, dim=-1)
        h_r, h_z, h_n = gh.chunk(3, dim=-1)
        r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        return n + z * (previous - n)
    if cell == "lstm":
        i, f, g, o = (gi + gh).chunk(4, dim=-1)
        c = torch.sigmoid(f) * previous[1] + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c
    return torch.tanh(gi + gh)
