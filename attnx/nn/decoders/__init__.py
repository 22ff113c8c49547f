"""Decoders (kind "decoder"): the target side of a `Seq2Seq`, one module per network.

  base.py         the `Decoder` base class and the `State` a decoding step advances
  rnn.py          `RNNDecoder`: an RNN that hosts a mechanism where its paper puts it (placements)
  transformer.py  `TransformerDecoder`: pre-LN blocks, causal self- and cross-attention

Importing this package registers both built-ins (the registry imports it for them).
"""

from attnx.nn.decoders.base import Decoder, State
from attnx.nn.decoders.rnn import DecoderState, RNNDecoder, first_rows
from attnx.nn.decoders.transformer import TransformerDecoder, TransformerState

__all__ = [
    "Decoder",
    "DecoderState",
    "RNNDecoder",
    "State",
    "TransformerDecoder",
    "TransformerState",
    "first_rows",
]
