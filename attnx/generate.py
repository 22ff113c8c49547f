"""`attnx generate RUN PROMPT`: continue a prompt with a trained lm, one token at a time.

The model reads the prompt once (`CausalLM.prefill`) and then each new token alone through every block's
key/value cache and convolution state (`CausalLM.step`). Each next token is, at `--temperature` 0 (the
default), the most likely one (greedy), else drawn from softmax(logits / T), restricted with `--top-k` to
the K most likely (Fan et al. 2018), from a generator seeded by `--seed`, so a sampled continuation is
reproducible. RUN is a run folder (the checkpoint its results.json names) or a checkpoint, loaded as
`attnx predict` loads one. For a recall task (mqar) it also prints the model's answer at each query.

Bad input (no such run, a model other than an lm, prompt tokens the model never saw, a negative
temperature, top-k < 1, more tokens than the lm's position table holds) is one line, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnx.cli import ArgumentParser

if TYPE_CHECKING:
    import torch

    from attnx.models.lm import CausalLM


class GenerateError(Exception):
    """Bad input to `attnx generate`; the message is the one line the user sees."""


def parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="attnx generate",
        description="Continue PROMPT with the lm of a run folder or checkpoint, greedy or sampled.",
    )
    parser.add_argument("run", metavar="RUN", help="a run folder (its results.json's checkpoint) or a .ckpt")
    parser.add_argument("prompt", metavar="PROMPT", help="the prompt's tokens, as the task writes them")
    parser.add_argument("--max-new-tokens", type=int, default=16, metavar="N", help="tokens to add (16)")
    parser.add_argument(
        "--temperature", type=float, default=0.0, metavar="T", help="0 (default): greedy; > 0: sample"
    )
    parser.add_argument("--top-k", type=int, default=None, metavar="K", help="sample among the K likeliest")
    parser.add_argument("--seed", type=int, default=None, help="the sampling generator's seed (0)")
    for option, role in (("--top-k", "limits sampling"), ("--seed", "seeds sampling")):
        parser.needs(option, f"{role} (--temperature 0 is greedy)", "--temperature > 0", sampled)
    return parser


def sampled(args: argparse.Namespace) -> bool:
    return bool(args.temperature > 0)


def check(args: argparse.Namespace) -> None:
    """The bounds argparse's types leave open, each a GenerateError naming the option."""
    bounds = (
        ("--max-new-tokens", args.max_new_tokens, args.max_new_tokens >= 1, ">= 1"),
        ("--temperature", args.temperature, args.temperature >= 0, ">= 0 (0: greedy)"),  # also refuses nan
        ("--top-k", args.top_k, args.top_k is None or args.top_k >= 1, ">= 1"),
    )
    for option, value, ok, limit in bounds:
        if not ok:
            raise GenerateError(f"{option}={value}: must be {limit}")


def checkpoint_of(run: str) -> str:
    """The checkpoint `run` names: the path itself, or a run folder's (its results.json's `checkpoint`)."""
    from attnx.track.results import RESULTS, Unreadable, read_results

    path = Path(run)
    if not path.exists():
        raise GenerateError(f"{run}: no such run folder or checkpoint")
    if path.is_file():
        return run
    if not (path / RESULTS).is_file():
        raise GenerateError(f"{run}: not a run folder (no {RESULTS}) and not a checkpoint")
    try:
        record = read_results(path / RESULTS)
    except Unreadable as error:
        raise GenerateError(str(error)) from None
    if not record.get("checkpoint"):
        raise GenerateError(f"{run}: the run saved no checkpoint (status {record.get('status')})")
    return str(record["checkpoint"])


def symbol_logits(logits: torch.Tensor) -> torch.Tensor:
    """logits [..., V] with the special tokens' (ids 0..len(SPECIALS)−1: padding, <bos>, <eos>, <unk>) at
    −inf: an lm task's targets are its symbols, so those logits are untrained, and a barely trained model
    sampled them."""
    from attnx.vocab import SPECIALS

    logits = logits.clone()
    logits[..., : len(SPECIALS)] = float("-inf")
    return logits


def next_token(
    logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator
) -> torch.Tensor:
    """logits [B, V] -> the next tokens [B]: the argmax at temperature 0, else a draw from
    softmax(logits / temperature) over the `top_k` likeliest tokens (all when None); never a special token
    (`symbol_logits`)."""
    import torch

    logits = symbol_logits(logits)
    if temperature == 0:
        return logits.argmax(-1)
    scaled = logits / temperature
    if top_k is not None and top_k < scaled.size(-1):
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    return torch.multinomial(scaled.softmax(-1), 1, generator=generator)[:, 0]


def generate(
    model: CausalLM,
    prompt: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """prompt [B, P] -> (the continuation [B, N], the logits [B, P + N − 1, V] at every position the model
    read: the prompt's, then each step's). N = max_new_tokens; the last new token is never read."""
    import torch

    generator = torch.Generator(device=prompt.device).manual_seed(seed)
    with torch.no_grad():
        logits, state = model.prefill(prompt)
        read, new = [logits], [next_token(logits[:, -1], temperature, top_k, generator)]
        for _ in range(max_new_tokens - 1):
            step, state = model.step(new[-1], state)
            read.append(step[:, None])
            new.append(next_token(step, temperature, top_k, generator))
    return torch.stack(new, dim=1), torch.cat(read, dim=1)


def encode_prompt(task: Any, text: str, spec: Any, max_new_tokens: int) -> torch.Tensor:
    """The prompt's ids [1, P]: every token known to the model, and P + N − 1 positions within the
    lm's position table (`lm.max_len`; none with `lm.positions=none`)."""
    from attnx.predict import unknown_tokens

    unknown = unknown_tokens(task, text)
    if unknown:
        raise GenerateError(f"prompt tokens unknown to the model: {unknown}")
    try:
        prompt, _ = task.encode_source(text)
    except ValueError as error:  # no tokens
        raise GenerateError(str(error)) from None
    lm = spec.lm
    fed = prompt.size(1) + max_new_tokens - 1  # the last new token is never read
    if lm.get("positions") != "none" and fed > lm["max_len"]:
        raise GenerateError(
            f"--max-new-tokens={max_new_tokens}: the prompt's {prompt.size(1)} tokens and the new ones "
            f"need {fed} positions, more than lm.max_len={lm['max_len']} (the {lm['positions']} position "
            f"table); ask for at most {lm['max_len'] - prompt.size(1) + 1}"
        )
    return prompt


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    from attnx import registry
    from attnx.predict import PredictError

    try:
        check(args)
        return run(args)
    except (GenerateError, PredictError, registry.RegistryError, registry.PluginImportError) as error:
        print(f"attnx generate: {error}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    """Load the lm, continue the prompt and print prompt, continuation and (recall tasks) the answers."""
    from attnx.predict import load, trained_task

    ckpt = checkpoint_of(args.run)
    module = load(ckpt)
    spec = module.spec
    if not spec.declared.decodes:
        raise GenerateError(
            f"{args.run}: a {spec.model_type} model, which does not continue a sequence token by token "
            "(an lm does; attnx predict decodes and classifies)"
        )
    task = trained_task(spec)
    prompt = encode_prompt(task, args.prompt, spec, args.max_new_tokens)
    seed = 0 if args.seed is None else args.seed
    new, logits = generate(module.model, prompt, args.max_new_tokens, args.temperature, args.top_k, seed)
    itos = spec.src_itos
    print(f"prompt:       {' '.join(itos[i] for i in prompt[0].tolist())}")
    print(f"continuation: {' '.join(itos[i] for i in new[0].tolist())}")
    if hasattr(task, "query_mask"):
        _answers(task, itos, prompt, new, logits)
    return 0


def _answers(task: Any, itos: list[str], prompt: Any, new: Any, logits: Any) -> None:
    """A recall task's queries in the whole sequence and, at each, the model's most likely next token."""
    import torch

    sequence = torch.cat([prompt, new], dim=1)
    queries = task.query_mask(sequence)[0, : logits.size(1)].nonzero().flatten().tolist()
    if not queries:
        print("no query positions: the task marks none in this sequence")
        return
    print("position  query -> answer")
    for t in queries:
        print(f"{t:>8}  {itos[int(sequence[0, t])]:>5} -> {itos[int(logits[0, t].argmax())]}")
