"""Benchmark 10: the default seq2seq training step on benchmark 9's data, change by change.

The default model (BiGRU encoder, GRU decoder with additive attention) trains on the reverse task of
benchmark 9 (lengths 1-25, vocabulary 50). Each row adds one change to the row above and keeps
the rest; all rows run the same weights and are timed interleaved in one process, so their ratios
hold on a shared machine:

  before        uniformly random batches; torch's packed RNN for the encoder; the decoder's step
                loop (`step` per target token: RNN module call, output layer and all)
  + encoder     each direction one whole-sequence RNN kernel call, no packing (`RNNEncoder`)
  + hoisting    teacher forcing with the embedding part of the input gates and the output layer
                out of the time loop, each step on the rows whose target goes on
                (`RNNDecoder._teacher_forced`) = attnx now
  + bucketing   batches of similar lengths (`IndexBatchSampler` with lengths; `bucketing=true`)

A round runs each row's training steps (forward, loss, backward, AdamW update) over its first
`--batches` batches of the epoch; rows are timed round by round and compared per round.

    python benchmarks/training_step.py [--batches 20 --budget 30]
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable

import common
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnx.bench.measure import interleaved, ratios
from attnx.nn.encoders import EncoderOutput, length_mask
from attnx.tasks.base import padding_fraction
from attnx.vocab import PAD

SPEC = [
    "task=reverse",
    "task.vocab_size=50",
    "task.min_len=1",
    "task.max_len=25",
    "task.train_size=50000",
    "task.val_size=100",
    "task.test_size=100",
]


def packed_encoder(encoder: torch.nn.Module, tokens: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
    """The RNN encoder as it was: torch's packed RNN and `pad_packed_sequence`, same weights."""
    x = encoder.dropout(encoder.embed(tokens))
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, h_n = encoder.rnn(packed)
    states = pad_packed_sequence(out, batch_first=True, total_length=tokens.size(1))[0]
    summary = h_n[-encoder.directions :].transpose(0, 1).reshape(tokens.size(0), -1)
    return EncoderOutput(
        encoder.dropout(states), encoder.dropout(summary), length_mask(lengths, tokens.size(1))
    )


def step_loop(decoder: torch.nn.Module, enc: EncoderOutput, tgt_in: torch.Tensor) -> torch.Tensor:
    """Teacher forcing as it was: the decoder's `step`, one target token at a time."""
    state = decoder.init_state(enc)
    logits = []
    for t in range(tgt_in.size(1)):
        logits_t, state, _ = decoder.step(tgt_in[:, t], state, need_weights=False)
        logits.append(logits_t)
    return torch.stack(logits, dim=1)


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=20, help="batches per round")
    args = p.parse_args()
    device = common.start(args)
    task, module, _ = common.assemble(SPEC, "/tmp/attnx-bench-training-step")
    model = module.model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    split = task.splits["train"]

    def batches(bucketing: bool) -> list:
        return list(
            itertools.islice(task.dataloader("train", shuffle=True, bucketing=bucketing), args.batches)
        )

    def training_steps(batches_: list, encode: Callable, decode: Callable) -> Callable[[], None]:
        def run() -> None:
            for batch in batches_:
                enc = encode(batch.src, batch.src_len)
                logits = decode(enc, batch.tgt[:, :-1])
                loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt[:, 1:].flatten(), ignore_index=PAD)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

        return run

    random, bucketed = batches(False), batches(True)
    hoisted = lambda enc, tgt_in: model.decoder(enc, tgt_in, need_weights=False)[0]  # noqa: E731
    packed = lambda src, src_len: packed_encoder(model.encoder, src, src_len)  # noqa: E731
    stepped = lambda enc, tgt_in: step_loop(model.decoder, enc, tgt_in)  # noqa: E731
    rows = {
        "before": (random, packed, stepped),
        "+ encoder without packing": (random, model.encoder, stepped),
        "+ hoisted decoder on active rows (attnx now)": (random, model.encoder, hoisted),
        "+ bucketing (bucketing=true)": (bucketed, model.encoder, hoisted),
    }
    steps = {name: training_steps(b, e, d) for name, (b, e, d) in rows.items()}
    samples = {name: sum(len(b.src) for b in batches_) for name, (batches_, _, _) in rows.items()}
    repeats = common.rounds(list(steps.values()), device, args.budget)
    times = interleaved(steps, device, repeats, warmup=2)
    speedup = ratios(times, "before")
    pad = {
        False: padding_fraction(split, [b.index for b in random]),
        True: padding_fraction(split, [b.index for b in bucketed]),
    }
    table = []
    for name, (batches_, _, _) in rows.items():
        fraction = pad[batches_ is bucketed]
        seconds = statistics.median(times[name])
        per_batch = seconds / args.batches * 1e3
        table.append(
            [
                name,
                f"{fraction['tgt']:.1%}",
                f"{per_batch:.1f}",
                f"{samples[name] / seconds:.0f}",
                f"{speedup[name]:.2f}x",
            ]
        )
    header = ["training step", "target padding", "ms per batch", "samples/s", "vs before"]
    print(f"{repeats} interleaved rounds of {args.batches} batches of {task.batch_size} per row")
    now, bucketing = (speedup[name] for name in list(rows)[-2:])
    values = {"now": now, "bucketing": bucketing, "rounds": repeats}
    values |= {"src_padding_random": pad[False]["src"], "src_padding_bucketed": pad[True]["src"]}
    headline = {
        "what": "the default seq2seq training step, change by change",
        "goal": "—",
        "measured": f"{now:.2f}× (random batches), {bucketing:.2f}× with `bucketing=true`",
        "verdict": "",
    }
    common.record(args, {"changes": common.table(header, table, right_from=1)}, values, [headline])


if __name__ == "__main__":
    main()
