"""Bad input to every subcommand is one stderr line naming the key, file or value, and exit code 2.

One table of what users plausibly type, run in-process through `attnx.cli.main` (a subprocess costs
seconds of Lightning import each). `{name}` in a command line is a path or a long input from the
`files` fixture, which trains one tiny seq2seq (RNN) and one self-attention checkpoint for predict.
`compare` cases also see the fixture's suites (`suite=nometric`, ...), and cannot train: a case whose
check is missing fails at once instead of launching a suite. Every command and config group has a case
(`test_every_command_and_config_group_has_a_case`): a new surface adds its rows here.

`attnx report` on a folder without any run folder is bad input too (a mistyped path, exit 2, as a
folder that does not exist); a damaged results.json next to good ones is listed in the report with why
(exit 0); with no good one there is nothing to report (exit 1, one line, the report still says why).
"""

from __future__ import annotations

import json
import re
import shlex
import socket
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest
import torch

from attnx.cli import main as cli

from helpers.tiny import TINY, TINY_BUDGET, TINY_LM, TINY_SELF_ATTN, train

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")

# A score plugin whose forward returns [..., Tk, Tq] when `transpose` is set: with its defaults it
# passes the conformance kit, so no other test that lists or checks plugins is disturbed by it.
TRANSPOSED = """
from attnx import register_score
from attnx.nn.scores import DotScore


@register_score("transposed_test")
class TransposedTestScore(DotScore):
    def __init__(self, query_dim: int, key_dim: int, transpose: bool = False) -> None:
        super().__init__(query_dim, key_dim)
        self.transpose = transpose

    def forward(self, query, keys):
        scores = super().forward(query, keys)
        return scores.transpose(-1, -2) if self.transpose else scores
"""

# Multi-head attention whose dropout is written F.dropout(w, p), on in eval mode too: with its default p = 0
# it passes the kit; a run that sets attention.dropout fails it before training, at the run's values.
EVAL_DROPOUT = """
import torch.nn.functional as F
from attnx import MultiHeadAttention, masked_softmax, register_attention, visible


@register_attention("eval_dropout_test")
class EvalDropout(MultiHeadAttention):
    def attend(self, query, prepared, need_weights=True, positions=None):
        _, keys, values, mask = prepared
        scores = self.score.at(self._split(self.W_q(query)), keys, positions)
        weights = masked_softmax(scores, visible(mask, positions))
        return self._merge(F.dropout(weights, self.dropout.p) @ values), weights if need_weights else None
"""

# (command line, what the one stderr line must contain, plugin folder for ATTNX_PLUGIN_PATH or None)
CASES = [
    # train: Lightning's Trainer arguments, checked against its signature before training
    ("train trainer.max_epochs=ten", "trainer.max_epochs=ten: expected Optional[int]", None),
    ("train trainer.gradient_clip_val=abc", "trainer.gradient_clip_val=abc: expected", None),
    ("train trainer.precision=33", "trainer.precision=33: expected", None),
    ("train trainer.deterministic=maybe", "trainer.deterministic=maybe: expected", None),
    (
        "train +trainer.max_epoch=3",
        "trainer.max_epoch: not an argument of lightning's Trainer; did you mean 'max_epochs'",
        None,
    ),
    ("train trainer.max_epoch=3", "trainer.max_epoch", None),
    (
        "train trainer.accelerator=tpux",
        "trainer.accelerator=tpux: unknown accelerator; did you mean 'tpu'",
        None,
    ),
    pytest.param(
        "train trainer.accelerator=gpu", "trainer.accelerator=gpu: not available", None, marks=NO_CUDA
    ),
    pytest.param("train trainer.accelerator=cuda", "available: auto, cpu", None, marks=NO_CUDA),
    # train: sizes and probabilities, one rule by field name for model and every registry section
    ("train decoder.hidden_dim=-8", "decoder.hidden_dim=-8: must be a positive integer", None),
    ("train decoder.embed_dim=0", "decoder.embed_dim=0: must be a positive integer", None),
    ("train decoder.num_layers=0", "decoder.num_layers=0: must be a positive integer", None),
    ("train classifier.dropout=1.5", "classifier.dropout=1.5: must be in [0, 1)", None),
    ("train encoder.hidden_dim=-1", "encoder.hidden_dim=-1: must be a positive integer", None),
    (
        "train encoder=self_attn encoder.attention.num_heads=0",
        "encoder.attention.num_heads=0: must be a positive integer",
        None,
    ),
    ("train encoder=self_attn encoder.max_len=0", "encoder.max_len=0: must be a positive integer", None),
    (
        "train encoder=self_attn encoder.attention=dot",
        "encoder.attention is a config group, chosen as encoder/attention=dot",
        None,
    ),
    (
        "train encoder/attention=dot",
        "encoder/attention: only encoder=self_attn has the slot `attention`",
        None,
    ),
    (
        "train encoder=self_attn encoder/attention=dott",
        "unknown encoder/attention 'dott'; did you mean 'dot'?",
        None,
    ),
    (
        "train encoder=self_attn encoder.attention.num_heads=abc",
        "encoder.attention.num_heads=abc; Value 'abc'",
        None,
    ),
    (
        "train encoder=self_attn encoder.attention.window=3",
        "Key 'window' not in 'MultiHeadAttentionConfig'",
        None,
    ),
    (
        "train encoder=self_attn encoder/attention=fixed_c",
        "encoder.attention=fixed_c: FixedContext cannot be a self-attention layer",
        None,
    ),
    (
        "train decoder=transformer decoder/attention=none",
        "decoder.attention=none: NoAttention cannot be a causal",
        None,
    ),
    (
        "train encoder=self_attn encoder/attention=none encoder/score=dot",
        "encoder.attention=none: NoAttention cannot be",
        None,
    ),
    (
        "train decoder=transformer decoder/attention=dot decoder.attention.input_feeding=abc",
        "decoder.attention.input_feeding=abc",
        None,
    ),
    ("train attention=multi_head attention.num_heads=0", "attention.num_heads=0: must be a positive", None),
    ("train task.batch_size=0", "task.batch_size=0: must be a positive integer", None),
    ("train task.train_size=-5", "task.train_size=-5: must be a positive integer", None),
    # train: Adam's betas
    ("train optim.optimizer.betas=0.9", "optim.optimizer.betas=0.9", None),
    ("train optim.optimizer.betas=[0.9]", "optim.optimizer.betas=[0.9]: must be two numbers in [0, 1)", None),
    ("train optim.optimizer.betas=[a,b]", "optim.optimizer.betas", None),
    ("train optim.optimizer.betas=[0.9,1.5]", "optim.optimizer.betas=[0.9, 1.5]: must be two", None),
    # train: every config group's options, with did-you-mean and the whole list
    (
        "train hydra/launcher=slurmx",
        "unknown hydra/launcher 'slurmx'; did you mean 'slurm'? available: basic, joblib, slurm, "
        "slurm_ddp, submitit_local, submitit_slurm",
        None,
    ),
    ("train -m hydra/launcher=slurmx", "unknown hydra/launcher 'slurmx'", None),
    (
        "train -m hydra.launcher=nope attention=dot,additive",
        "hydra.launcher=nope: hydra.launcher is a config group, chosen as hydra/launcher=nope",
        None,
    ),
    # train: a SLURM launcher asks for one task per DDP process, checked before anything is submitted
    (
        "train -m hydra/launcher=slurm trainer=ddp_cpu attention=dot,additive",
        "hydra.launcher.tasks_per_node=1 but trainer.devices=2: under SLURM each process of a run is a task",
        None,
    ),
    (
        "train -m hydra/launcher=slurm_ddp trainer=ddp_cpu trainer.num_nodes=2 hydra.launcher.nodes=1",
        "hydra.launcher.nodes=1 but trainer.num_nodes=2",
        None,
    ),
    ("train logger=wandbx", "unknown logger 'wandbx'; did you mean 'wandb'? available: csv, many,", None),
    ("train -m logger=csv,wandbx", "unknown logger 'wandbx'", None),
    (
        "train trainer=cpux",
        "unknown trainer 'cpux'; did you mean 'cpu'? available: cpu, ddp, ddp_cpu, default, gpu",
        None,
    ),
    ("train optim=adam", "unknown optim 'adam'; did you mean 'adamw'? available: adamw, sgd", None),
    ("train optim/scheduler=cosine", "unknown optim/scheduler 'cosine'; did you mean 'warmup_cosine'", None),
    ("train experiment=nope", "unknown experiment 'nope'", None),
    (
        "train +experiment=quickstart",
        "+experiment=quickstart: experiment is already a group of train.yaml; write experiment=quickstart",
        None,
    ),
    ("train task=revers", "unknown task 'revers'; did you mean 'reverse'", None),
    ("train -m attention=dot,bahdanu", "unknown attention 'bahdanu'", None),
    # train: keys and types, with and without -m and --cfg job
    ("train +seeed=3", "unknown key seeed; allowed: task", None),
    ("train threads=abc", "threads=abc; Value 'abc' of type 'str' could not be converted to Integer", None),
    ("train -m threads=abc", "threads=abc; Value 'abc' of type 'str'", None),
    ("train -m threads=1,abc", "threads=abc; Value 'abc' of type 'str'", None),
    ("train --cfg job threads=abc", "threads=abc; Value 'abc' of type 'str'", None),
    ("train decoder.hidden_dim=abc", "decoder.hidden_dim=abc; Value 'abc' of type 'str'", None),
    ("train -m decoder.hidden_dim=abc", "decoder.hidden_dim=abc; Value 'abc' of type 'str'", None),
    ("train score=cosine score.temperature=abc", "score.temperature=abc; Value 'abc' of type 'str'", None),
    ("train -m score=cosine score.temperature=abc", "score.temperature=abc; Value 'abc'", None),
    ("train --cfg job score=cosine score.temperature=abc", "score.temperature=abc; Value 'abc'", None),
    ("train decode.beam_size=0", "decode.beam_size must be >= 1, got 0", None),
    ("train decode.max_len_ratio=0", "decode.max_len_ratio must be > 0, got 0", None),
    ("train decode.length_penalty=abc", "decode.length_penalty=abc; Value 'abc'", None),
    ("train convergence.tolerance=-0.1", "convergence.tolerance must be >= 0, got -0.1", None),
    ("train convergence.tolerance=1.5", "convergence.tolerance must be < 1.0 (val/exact_match", None),
    ("train convergence.min_validations=1", "convergence.min_validations must be >= 2, got 1", None),
    ("train convergence.ceiling=0", "convergence.ceiling must be > 0, got 0", None),
    ("train convergence.metric=val/acc", "convergence.metric=val/acc: task reverse logs no", None),
    ("train compile=maybe", "compile must be true, false or auto, got 'maybe'", None),
    ("train -m compile=true,1", "compile must be true, false or auto, got 1", None),
    # a folder inside a file: the cache folder cannot be made, whoever runs it (root included)
    ("train compile_cache={text}/cache", "compile_cache={text}/cache: cannot create or write", None),
    ("train -m seed=0,1 compile_cache={text}/cache", "compile_cache={text}/cache: cannot create", None),
    # train: plugins that fail to import, or fail the kit's shape check with the configured hyperparameters
    ("train", "broken.py failed to import: ModuleNotFoundError: No module named 'nonexistent_mod'", "broken"),
    (
        "train attention=dot score=transposed_test score.transpose=true",
        "attention=dot: fails the conformance kit at this run's values (attnx plugins check "
        "transposed_test attention.input_feeding=True score.transpose=True d_model=16): shapes (outputs have "
        "the shapes of the contract): attention LuongAttention with score "
        "TransposedTestScore(transpose=True) (cross-attention, Tq=1, Tk=5; initial parameters, eval mode): "
        "wrong output shape: context is (3, 5, 16)",
        "transposed",
    ),
    (
        "train {lm} attention=eval_dropout_test attention.num_heads=16 lm.d_model=64 attention.dropout=0.1",
        "attention=eval_dropout_test: fails the conformance kit at this run's values (attnx plugins check "
        "eval_dropout_test attention.num_heads=16 attention.dropout=0.1 d_model=64): purity (eval is a pure "
        "function): attention EvalDropout with score ScaledDotScore",
        "eval_dropout",
    ),
    ("train trainer.devices=abc", "`devices` selected with `CPUAccelerator` should be an int > 0", None),
    ("train 'threads=${{oc.env:ATTNX_NO_SUCH_VARIABLE,abc}}'", "(key: threads)", None),
    # train: where a run writes, what a callback watches, what a search optimises
    (
        "train paths.output_dir={text}/x",
        "paths.output_dir={text}/x: cannot write there (Not a directory)",
        None,
    ),
    (
        "train callbacks.model_checkpoint.monitor=val/nope",
        "callbacks.model_checkpoint.monitor=val/nope: task reverse logs no such metric",
        None,
    ),
    ("train callbacks.stop_at.stopping_threshold=abc", "stop_at.stopping_threshold=abc: expected", None),
    ("train callbacks.model_checkpoint.save_top_k=x", "model_checkpoint.save_top_k=x: expected int", None),
    ("train callbacks.model_checkpoint.mode=maximum", "model_checkpoint: `mode` can be min, max", None),
    ("train hparams_search=optuna hydra.sweeper.n_trials=abc", "hydra.sweeper.n_trials=abc", None),
    ("train hparams_search=optuna hydra.sweeper.direction=up", "hydra.sweeper.direction=up: must be", None),
    (
        "train hparams_search=optuna optimized_metric=val/nope",
        "optimized_metric=val/nope: task reverse logs no such metric",
        None,
    ),
    ("train -m task=sort,reverse --cfg job", "-m and --cfg together: Hydra takes one of them", None),
    # train: checkpoints to start from, verified before training
    ("train ckpt_path={text}", "ckpt_path={text}: not a torch checkpoint (no zip archive)", None),
    ("train ckpt_path={truncated}", "ckpt_path={truncated}: a damaged or truncated archive", None),
    ("train ckpt_path={empty}", "ckpt_path={empty}: an empty file", None),
    ("train ckpt_path={folder}", "ckpt_path={folder}: a folder, not a file", None),
    ("train ckpt_path={missing}", "ckpt_path={missing}: no such file", None),
    ("train resume=yes", "resume must be null or auto, got 'yes'", None),
    # predict: checkpoints torch.load cannot read, or without a model spec
    ("predict ckpt={text} input=1", "ckpt={text}: not a torch checkpoint (no zip archive)", None),
    ("predict ckpt={truncated} input=1", "ckpt={truncated}: a damaged or truncated archive", None),
    ("predict ckpt={empty} input=1", "ckpt={empty}: an empty file", None),
    ("predict ckpt={folder} input=1", "ckpt={folder}: a folder, not a file", None),
    ("predict ckpt={missing} input=1", "ckpt={missing}: no such file", None),
    ("predict ckpt={tensor} input=1", "ckpt={tensor}: not a Lightning checkpoint", None),
    # predict: inputs
    ("predict ckpt={rnn} input=", "input '' has no tokens", None),
    ("predict ckpt={rnn} 'input=   '", "input '   ' has no tokens", None),
    (
        "predict ckpt={sa} 'input={x600}'",
        "input has 600 tokens, more than max_input_len=512 (the encoder's",
        None,
    ),
    ("predict ckpt={rnn} 'input={x2000}'", "input has 2000 tokens, more than max_input_len=1024", None),
    (
        "predict ckpt={rnn} 'input=3 1 4' max_input_len=2",
        "input has 3 tokens, more than max_input_len=2",
        None,
    ),
    (
        "predict ckpt={sa} input=1 max_input_len=1000",
        "max_input_len=1000: encoder=self_attn takes at most",
        None,
    ),
    ("predict ckpt={rnn} input=1 max_input_len=0", "max_input_len must be >= 1, got 0", None),
    # predict: options
    (
        "predict ckpt={rnn} input=1 decode.beam_size=two",
        "Value 'two' of type 'str' could not be converted",
        None,
    ),
    ("predict ckpt={rnn} input=1 decode.beam_size=two", "(key: decode.beam_size)", None),
    ("predict ckpt={rnn} input=1 decode.beam_size=0", "decode.beam_size must be >= 1, got 0", None),
    ("predict ckpt={rnn} input=1 decode.length_penalty=abc", "(key: decode.length_penalty)", None),
    ("predict ckpt={rnn} input=1 decode.max_len_ratio=-1", "decode.max_len_ratio must be > 0", None),
    ("predict ckpt={rnn} input=1 decode.beam=3", "Key 'beam' not in 'DecodeConfig'", None),
    (
        "predict ckpt={rnn} input=1 top_k=1.5",
        "Value '1.5' of type 'float' could not be converted to Integer (key: top_k)",
        None,
    ),
    ("predict ckpt={rnn} input=1 top_k=0", "top_k must be >= 1, got 0", None),
    # an option that acts only with another is refused, never ignored (`attnx.cli.Needs`), in every command
    (
        "predict ckpt={rnn} input=1 decode.length_penalty=0.6",  # the checkpoint decodes greedily
        "decode.length_penalty ranks beam search's answers: give decode.beam_size > 1 too",
        None,
    ),
    ("predict ckpt={rnn} input=1 topk=3", "Key 'topk' not in 'PredictOptions'", None),
    ("predict ckpt={rnn} input=1 beam", "expected key=value, got 'beam'", None),
    ("predict", "missing ckpt, input", None),
    ("predict input=1", "missing ckpt", None),
    ("predict ckpt={rnn} input=1", "broken.py failed to import", "broken"),
    # report
    ("report {empty_folder}", "no run folder under {empty_folder}", None),
    # generate: an lm run or checkpoint, and sampling options in range
    ("generate {missing} a", "{missing}: no such run folder or checkpoint", None),
    ("generate {runs} a", "a seq2seq model, which does not continue a sequence token by token", None),
    ("generate {rnn} a --temperature -1", "--temperature=-1.0: must be >= 0 (0: greedy)", None),
    ("generate {rnn} a --temperature 1 --top-k 0", "--top-k=0: must be >= 1", None),
    (
        "generate {rnn} a --top-k 3",
        "--top-k limits sampling (--temperature 0 is greedy): give --temperature > 0",
        None,
    ),
    (
        "generate {rnn} a --seed 0",
        "--seed seeds sampling (--temperature 0 is greedy): give --temperature > 0",
        None,
    ),
    ("report {runs} --panel nope", "--panel nope is not a swept key; swept: (none)", None),
    ("report {runs} --select seed", "--select seed is not a swept key", None),
    ("report {runs} --by val/loss", "--by ranks --select's choice: give --select too", None),
    ("report {runs} --bench-n 8", "--bench-n picks the N of --bench's rows: give --bench too", None),
    ("report {runs} --out {notaplan}", "--out {notaplan}: {notaplan} is a file, not a folder", None),
    ("report {missing}", "no such folder: {missing}", None),
    ("report {runs} --metric nope", "--metric nope: no run has it; metrics: test/exact_match", None),
    ("report {runs} --metric test/exact_match,val/nope", "--metric val/nope: no run has it", None),
    ("report {runs} --x nope", "--x nope is not a swept numeric key", None),
    ("report {runs} --metrics x", "unrecognized arguments: --metrics", None),
    ("report {runs} --alpha 1", "argument --alpha: 1: must be in (0, 1), e.g. 0.05", None),
    ("report {runs} --alpha five", "argument --alpha: 'five' is no number; give a level in (0, 1)", None),
    ("report {runs} --family task", "argument --family: invalid choice: 'task'", None),
    ("report {runs} --pareto speed", "argument --pareto: invalid choice: 'speed'", None),
    ("report {runs} --pareto state", "--pareto state: no completed run records a decoding state", None),
    ("report", "the following arguments are required: dirs", None),
    # compare: its own keys (typed by CompareConfig), the candidate, and what it sets itself
    ("compare", "name the candidate: attention=NAME (a mechanism) or score=NAME (a score)", None),
    ("compare attention=nope", "unknown attention 'nope'; did you mean 'none'?", None),
    (
        "compare attention=local_window store={text}/store",
        "store={text}/store: cannot write to {text}/store",
        None,
    ),
    (
        "compare attention=local_window verify=-1",
        "verify=-1: a count (>= 0) of stored runs to train again",
        None,
    ),
    ("compare attention=local_window store=null verify=2", "verify=2: a count (>= 0) of stored runs", None),
    (
        "compare attention=local_window tasks=[reverse,nope]",
        "nope is not a task of suite quick; its tasks: reverse, sentiment, mqar",
        None,
    ),
    ("store prune", "prune needs --older-than AGE (e.g. 30d, 12h)", None),
    ("store ls --store {text}", "--store {text}: a file, not a run store's folder", None),
    ("compare attention=local_window tasks=nope", "tasks=['nope']: nope is not a task of suite quick", None),
    ("store ls --older-than 3d", "--older-than chooses what prune removes: give the prune action too", None),
    ("store prune --older-than 3x", "argument --older-than: invalid age (e.g. 30d) value: '3x'", None),
    ("compare score=nope", "unknown score 'nope'", None),
    ("compare attention=local_window suite=quik", "unknown suite 'quik'; did you mean 'quick'?", None),
    ("compare attention=local_window protocol.lr_search=maybe", "protocol.lr_search=maybe", None),
    ("compare attention=local_window protocol.lr_serch=true", "Key 'lr_serch' not in 'ProtocolConfig'", None),
    ("compare attention=local_window seeds=[]", "seeds is empty", None),
    ("compare attention=local_window baseline=luong", "baseline=luong is not one of mechanisms=", None),
    ("compare attention=local_window seed=3", "sets seed itself (seeds come from the suite", None),
    ("compare attention=local_window resume=null", "it always resumes: resume=auto", None),
    ("compare attention=dot,additive", "give one value", None),
    ("compare attention=local_window -m", "-m: attnx compare takes overrides only", None),
    (
        "compare attention=local_window trainer.gradient_clip_val=abc",
        "suite task reverse: trainer.gradient_clip_val=abc: expected",
        None,
    ),
    # compare: protocol values out of range, checked before anything trains
    (
        "compare attention=local_window protocol.param_tolerance=-0.1",
        "protocol.param_tolerance=-0.1: must",
        None,
    ),
    ("compare attention=local_window protocol.lr_grid=[]", "protocol.lr_grid is empty", None),
    (
        "compare attention=local_window protocol.lr_grid=[0.01,-0.1]",
        "protocol.lr_grid=[0.01, -0.1]: -0.1 is no learning rate",
        None,
    ),
    ("compare attention=local_window seeds=[0,0,1]", "seeds=[0, 0, 1]: 0 is repeated", None),
    ("compare attention=local_window mechanisms=[none,additive,bahdanau]", "additive is repeated", None),
    (
        "compare attention=local_window protocol.grid.enabled=true protocol.grid.lr=[]",
        "protocol.grid.lr is empty",
        None,
    ),
    (
        "compare attention=local_window protocol.grid.enabled=true protocol.lr_search=true",
        "both choose the learning rate",
        None,
    ),
    ("compare attention=local_window pareto=speed", "must be one of time, state", None),
    ("compare attention=local_window bench.n=0", "bench.n=0: must be a positive integer", None),
    ("compare attention=local_window bench.heads=3", "bench.heads=3 must divide bench.dim=64", None),
    (
        "compare attention=local_window protocol.lr_grid=[0.1]",
        "protocol.lr_grid is what protocol.lr_search tries: give protocol.lr_search=true too",
        None,
    ),
    (
        "compare attention=local_window protocol.grid.lr=[0.1]",
        "protocol.grid.lr is an axis of MAD's grid: give protocol.grid.enabled=true too",
        None,
    ),
    (
        "compare attention=local_window protocol.grid.weight_decay=[0]",
        "give protocol.grid.enabled=true",
        None,
    ),
    (
        "compare attention=local_window protocol.param_tolerance=0.2",
        "protocol.param_tolerance bounds protocol.match_params: give protocol.match_params=true too",
        None,
    ),
    ("compare attention=local_window protocol.state_tolerance=0.2", "give protocol.match_state=true", None),
    (
        "compare attention=local_window score_host=additive",
        "score_host is the mechanism a candidate score runs in: give score=NAME without attention=NAME",
        None,
    ),
    ("compare attention=local_window score_host=nope", "score_host: unknown attention 'nope'", None),
    ("compare attention=local_window seeds=0", "seeds=0: a count must be within 1..64", None),
    ("compare attention=local_window seeds=65", "seeds=65: a count must be within 1..64", None),
    ("compare attention=local_window seeds=[0,4294967296]", "4294967296 is no seed", None),
    ("compare attention=local_window discrimination.spread=2", "discrimination.spread=2.0: must be in", None),
    ("compare attention=local_window alpha=0", "alpha=0.0: must be in (0, 1), e.g. alpha=0.05", None),
    ("compare attention=local_window family=tasks", "family=tasks: must be one of task, suite", None),
    (
        "compare attention=local_window protocol.grid.select=test",
        "protocol.grid.select chooses the grid point each run is read at: give protocol.grid.enabled=true",
        None,
    ),
    (
        "compare attention=local_window protocol.grid.enabled=true protocol.grid.select=best",
        "protocol.grid.select=best: must be one of validation, test",
        None,
    ),
    ("compare attention=local_window convergence.metric=val/loss", "sets convergence.metric itself", None),
    # compare: suite files (the `files` fixture's conf/suite/) that name what does not exist
    ("compare attention=local_window suite=noseeds", "missing value for seeds", None),
    ("compare attention=local_window suite=nometric", "suite task reverse: no metric", None),
    (
        "compare attention=local_window suite=badbaseline",
        "suite task reverse: baseline=luong is not one of mechanisms=['none', 'fixed_c', 'additive', 'dot', "
        "'multi_head']",
        None,
    ),
    (
        "compare attention=local_window suite=falling",
        "suite task reverse: metric test/loss: a suite's metric must rise as models improve (accuracy, exact "
        "match); it is declared lower-is-better",
        None,
    ),
    (
        "compare attention=local_window suite=wrongmetric",
        "suite task reverse: metric test/acc: its runs never log it; they log test/exact_match, test/loss",
        None,
    ),
    (
        "compare attention=local_window suite=badwidth",
        "width key encoder.hiden_dim does not exist; integer keys there: encoder.embed_dim, encoder.hidden",
        None,
    ),
    (
        "compare attention=local_window suite=unknownmech",
        "mechanisms: unknown attention 'nope'; did you mean 'none'? available: additive",
        None,
    ),
    (
        "compare attention=local_window suite=longmqar",
        "suite task mqar: lm.max_len=32: the test split of task=mqar needs 64 tokens",
        None,
    ),
    (
        "compare attention=local_window suite=shortenc",
        "suite task reverse: encoder.max_len=8: the train split of task=reverse needs 12 tokens",
        None,
    ),
    # compare: run overrides that the suite or the protocol sets (theirs would silently win)
    (
        "compare attention=local_window task=sort",
        "task=sort: suite quick sets task itself (task=reverse for task reverse)",
        None,
    ),
    (
        "compare attention=local_window trainer.max_epochs=1",
        "suite quick sets trainer.max_epochs itself",
        None,
    ),
    (
        "compare attention=local_window protocol.lr_search=true optim.lr=0.1",
        "optim.lr=0.1: protocol.lr_search=true sets optim.lr itself",
        None,
    ),
    (
        "compare attention=local_window protocol.match_params=true encoder.hidden_dim=8",
        "encoder.hidden_dim=8: protocol.match_params=true sets encoder.hidden_dim itself",
        None,
    ),
    ("compare attention=local_window paired_embeddings=false", "sets paired_embeddings itself", None),
    # compare: where it writes and what launches its runs
    ("compare attention=local_window out={text}", "out={text}: {text} is a file, not a folder", None),
    ("compare attention=local_window out={text}/sub", "{text} is a file, not a folder", None),
    (
        "compare attention=local_window hydra/launcher=nope",
        "unknown hydra/launcher 'nope'; available: basic, joblib",
        None,
    ),
    ("compare attention=local_window launcher=nope", "launcher: unknown hydra/launcher 'nope'", None),
    ("compare attention=local_window hydra.launcher=joblib", "hydra.launcher is a config group", None),
    # train: data longer than a model's max_len (the lm, mqar, architecture and positions groups)
    ("train {lm} lm.ff=relu", "lm.ff must be one of gelu, swiglu; got ff='relu'", None),
    ("train encoder=self_attn encoder.summary=max", "encoder.summary must be one of mean, cls", None),
    ("train {lm} lm.max_len=8", "lm.max_len=8: the train split of task=mqar needs 16 tokens", None),
    ("train {lm} task.test_seq_len=64 lm.max_len=32", "lm.max_len=32: the test split of task=mqar", None),
    (
        "train task=mqar +mqar=len64_pairs4 lm.d_model=16 lm.num_layers=1 lm.max_len=32",
        "lm.max_len=32: the train split of task=mqar needs 64 tokens",
        None,
    ),
    (
        "train encoder=self_attn encoder.max_len=8 task.max_len=12",
        "encoder.max_len=8: the train split of task=reverse needs 12 tokens of source",
        None,
    ),
    (
        "train encoder=self_attn encoder.max_len=12 task.max_len=12 task.test_max_len=20",
        "encoder.max_len=12: the test split of task=reverse needs",
        None,
    ),
    (
        "train encoder=self_attn encoder.max_len=30 task.max_len=12 task.test_slices=[2,4]",
        "encoder.max_len=30: the test@4x split of task=reverse needs",
        None,
    ),
    ("train task.test_slices=[1]", "task.test_slices=[1] is invalid: must be distinct integers >= 2", None),
    ("train +architecture=transformer encoder.max_len=4", "encoder.max_len=4: the train split", None),
    ("train decoder=transformer decoder.max_len=8", "decoder.max_len=8: the val split of task=reverse", None),
    (
        "train +positions=learned encoder=self_attn decoder=transformer encoder.max_len=4",
        "encoder.max_len=4",
        None,
    ),
    # train with a plan of jobs (hydra/sweeper=plan)
    ("train -m hydra/sweeper=plan hydra.sweeper.plan={missing}", "plan={missing}: cannot read it", None),
    ("train -m hydra/sweeper=plan hydra.sweeper.plan={notaplan}", "must be a list of jobs", None),
    # dashboard, sync
    ("dashboard {missing}", "no such folder: {missing}", None),
    ("dashboard {runs} --port 70000", "argument --port: expected a port number from 0 to 65535", None),
    (
        "dashboard {runs} --host nosuchhost.invalid",
        "attnx dashboard: --host nosuchhost.invalid: not an address to serve on",
        None,
    ),
    ("dashboard {runs} --port {busy}", "--port {busy}: cannot serve there (Address already in use)", None),
    ("sync {missing}", "no such folder: {missing}", None),
    ("sync {empty_folder}", "no offline W&B runs under {empty_folder}", None),
    ("sync", "the following arguments are required: dirs", None),
    # bench
    pytest.param(
        "bench --device cuda", "argument --device: 'cuda' is not available here", None, marks=NO_CUDA
    ),
    ("bench --device nope", "argument --device: not a torch device: 'nope'", None),
    ("bench --threads 0", "argument --threads", None),
    ("bench --warmup -3", "argument --warmup: expected an integer >= 0, got '-3'", None),
    ("bench --repeats 0", "argument --repeats", None),
    (
        "bench --attention multi_head --lengths 16 --out {text}/x",
        "--out {text}/x: {text} is a file, not a folder",
        None,
    ),
    ("bench --batch two", "argument --batch", None),
    ("bench --lengths 64,0", "argument --lengths", None),
    ("bench --max-seconds -1", "argument --max-seconds: expected a number > 0", None),
    ("bench --max-mib nan", "argument --max-mib", None),
    ("bench --attention nope", "unknown attention 'nope'", None),
    ("bench --score dott", "unknown score 'dott'; did you mean 'dot'", None),
    ("bench --encoder cnn", "--encoder must name some of rnn, self_attn; got 'cnn'", None),
    ("bench --attention multi_head --dim 64 --heads 3", "--heads must divide --dim", None),
    ("bench --bogus", "unrecognized arguments: --bogus", None),
    ("bench --causal --attention none,fixed_c,dot", "--causal: no causal mask in none, fixed_c", None),
    ("bench --attention '' --score dot", "--score picks the scores of --attention's mechanisms: give", None),
    ("bench --attention '' --lm dot --causal", "--causal masks --attention's mechanisms", None),
    # plugins, and the dispatcher
    ("plugins chek", "argument action: invalid choice: 'chek'", None),
    ("plugins --bogus", "unrecognized arguments: --bogus", None),
    ("plugins", "broken.py failed to import", "broken"),
    (
        "plugins check sliding_window attention.windw=4",
        "attention.windw=4: no attention checked for sliding_window takes windw; their hyperparameters: "
        "dropout, num_heads, window",
        None,
    ),
    (
        "plugins check sliding_window attention.window=abc",
        "attention.window=abc: Value 'abc' of type 'str' could not be converted to Integer",
        None,
    ),
    ("plugins check gaussian d_model=wide", "d_model=wide: expected a positive integer", None),
    ("plugins check attention.window=4", "name the plugin to check at attention.window=4 first", None),
    ("nope", "invalid choice: 'nope'", None),
]


# A plugin that renames the score `dot`: its old name still works, warned (`Registry.deprecate`)
RENAMES_DOT = (
    'from attnx import registry\n\nregistry.registry("score").deprecate("_test_dot_before", "dot")\n'
)

# Suites with one thing wrong each (`compare suite=NAME`, from the `files` fixture's conf/suite/)
SUITE_TASK = """  reverse:
    overrides: [task=reverse, task.min_len=3, task.max_len=5, task.train_size=48, task.val_size=16,
                task.test_size=16, encoder.embed_dim=8, encoder.hidden_dim=16, decoder.embed_dim=8,
                decoder.hidden_dim=16]
"""
SUITES = {
    "noseeds": f"tasks:\n{SUITE_TASK}    metric: test/exact_match\n",
    "nometric": f"seeds: [0, 1]\ntasks:\n{SUITE_TASK}    width: [encoder.hidden_dim]\n",
    "wrongmetric": f"seeds: [0, 1]\ntasks:\n{SUITE_TASK}    metric: test/acc\n",
    "falling": f"seeds: [0, 1]\ntasks:\n{SUITE_TASK}    metric: test/loss\n",
    "badbaseline": f"seeds: [0, 1]\ntasks:\n{SUITE_TASK}    metric: test/exact_match\n    baseline: luong\n",
    "badwidth": f"seeds: [0, 1]\ntasks:\n{SUITE_TASK}    metric: test/exact_match\n"
    "    width: [encoder.hiden_dim]\n",
    "unknownmech": f"seeds: [0, 1]\nmechanisms: [none, additive, nope]\ntasks:\n{SUITE_TASK}"
    "    metric: test/exact_match\n",
    "longmqar": """seeds: [0, 1]
tasks:
  mqar:
    overrides: [task=mqar, task.vocab_size=16, task.seq_len=16, task.test_seq_len=64, task.num_kv_pairs=2,
                task.train_size=48, task.val_size=16, task.test_size=16, lm.d_model=16, lm.max_len=32]
    metric: test/acc
""",
    "shortenc": """seeds: [0, 1]
tasks:
  reverse:
    overrides: [task=reverse, task.min_len=3, task.max_len=12, task.train_size=48, task.val_size=16,
                task.test_size=16, encoder=self_attn, encoder.max_len=8]
    metric: test/exact_match
""",
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Paths the table names: two tiny trained runs, unreadable checkpoints, plugin folders, suites,
    a port in use."""
    root = tmp_path_factory.mktemp("bad_input")
    assert train(root / "rnn", *TINY) == 0
    assert train(root / "sa", *TINY, *TINY_SELF_ATTN) == 0
    rnn = root / "rnn" / "checkpoints" / "last.ckpt"
    (root / "text.ckpt").write_text("not a checkpoint\n")
    (root / "truncated.ckpt").write_bytes(rnn.read_bytes()[:4096])
    (root / "empty.ckpt").write_bytes(b"")
    (root / "folder.ckpt").mkdir()
    torch.save(torch.zeros(2), root / "tensor.ckpt")
    (root / "notaplan.yaml").write_text("attention: dot\n")
    (root / "empty_folder").mkdir()
    (root / "broken").mkdir()
    (root / "broken" / "broken.py").write_text("import nonexistent_mod\n")
    (root / "transposed").mkdir()
    (root / "transposed" / "transposed.py").write_text(TRANSPOSED)
    (root / "eval_dropout").mkdir()
    (root / "eval_dropout" / "eval_dropout.py").write_text(EVAL_DROPOUT)
    (root / "renames_dot").mkdir()
    (root / "renames_dot" / "renames_dot.py").write_text(RENAMES_DOT)
    (root / "conf" / "experiment").mkdir(parents=True)
    (root / "conf" / "experiment" / "old_model.yaml").write_text(
        "# @package _global_\nmodel:\n  dropout: 1.5\n"
    )
    (root / "conf" / "suite").mkdir(parents=True)
    for name, text in SUITES.items():
        (root / "conf" / "suite" / f"{name}.yaml").write_text(f"# @package _global_\n{text}")
    paths = {p.stem: str(p) for p in root.iterdir()}
    with socket.socket() as busy:
        busy.bind(("localhost", 0))
        busy.listen()
        yield paths | {
            "rnn": str(rnn),
            "sa": str(root / "sa" / "checkpoints" / "last.ckpt"),
            "runs": str(root / "rnn"),
            "missing": str(root / "missing"),
            "x600": " ".join(["3"] * 600),
            "x2000": " ".join(["3"] * 2000),
            "lm": " ".join(TINY_LM),
            "busy": str(busy.getsockname()[1]),
        }


def run(argv: list[str], capfd: pytest.CaptureFixture) -> tuple[int | str | None, str]:
    """The CLI's exit code (argparse's errors exit through SystemExit) and its stderr."""
    capfd.readouterr()
    try:
        code = cli(argv)
    except SystemExit as exit_:
        code = exit_.code
    return code, capfd.readouterr().err


def _no_training(*args: object, **kwargs: object) -> int:
    raise AssertionError("attnx compare got past its checks: it would train")


def argv_of(line: str, files: dict[str, str], tmp: Path) -> list[str]:
    """The command line with `{name}`s filled in; `train` gets the tiny overrides after its Hydra
    flags (later overrides win, so the case's own come last) and a run folder in `tmp`."""
    command, *args = shlex.split(line.format(**files))
    if command != "train":
        return [command, *args]
    flags = [a for i, a in enumerate(args) if a.startswith("-") or (i and args[i - 1] == "--cfg")]
    overrides = [a for a in args if a not in flags]
    folder = f"hydra.sweep.dir={tmp}" if "-m" in flags else f"hydra.run.dir={tmp}"
    transformer = {"decoder=transformer", "+architecture=transformer"} & set(overrides)
    tiny = TINY_BUDGET if transformer else TINY  # TINY sizes the rnn decoder
    return [command, *flags, *tiny, *overrides, folder]


@pytest.mark.parametrize(("line", "expected", "plugins"), CASES)
def test_bad_input_is_one_line_and_exit_2(
    line: str,
    expected: str,
    plugins: str | None,
    files: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture,
) -> None:
    if plugins:
        monkeypatch.setenv("ATTNX_PLUGIN_PATH", files[plugins])
    if line.startswith("compare"):  # the table's suites; a check that lets a case through fails, not trains
        monkeypatch.setenv("ATTNX_CONFIG_PATH", files["conf"])
        monkeypatch.setattr("attnx.compare.cli.launch", _no_training)
    code, err = run(argv_of(line, files, tmp_path), capfd)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert expected.format(**files) in lines[0]


# Config groups of conf/ that no case names, and why; every other group, and every command, has a case
UNCASED_GROUPS = {"task_defaults": "chosen by the task and encoder, never named on the command line"}


def test_every_command_and_config_group_has_a_case() -> None:
    """The table grows with each new surface: a new command or config group fails here until it has a
    case (a group is named as `group=`, `+group=`, `group.` or `group/`)."""
    from attnx.cli import COMMANDS
    from attnx.config.compose import CONF_DIR

    lines = [case.values[0] if hasattr(case, "values") else case[0] for case in CASES]
    assert set(COMMANDS) <= {line.split()[0] for line in lines}
    groups = {p.name for p in Path(CONF_DIR).iterdir() if p.is_dir()} - set(UNCASED_GROUPS)
    named = {g for g in groups if any(re.search(rf"(^|[ +{{]){g}[=./}}]", line) for line in lines)}
    assert sorted(groups - named) == []


# A renamed key, config section or registered name, still read: (command line, its two stderr lines)
RENAMED = [
    (
        "train model.dropout=-0.1",
        "attnx train: warning: `model` is now `classifier`: write classifier.dropout=-0.1",
        "attnx train: classifier.dropout=-0.1: must be in [0, 1)",
    ),
    (
        "train experiment=old_model",
        "attnx train: warning: config section `model:` is now `classifier:`",
        "attnx train: classifier.dropout=1.5: must be in [0, 1)",
    ),
    (
        "bench --attention multi_head --score _test_dot_before --dim 64 --heads 3",
        "attnx bench: warning: score '_test_dot_before' was renamed 'dot'; the old name will be removed",
        "attnx bench: --heads must divide --dim; got d=64, heads=3",
    ),
]


@pytest.mark.parametrize(("line", "warning", "error"), RENAMED)
def test_a_renamed_name_warns_in_one_line_before_the_one_line_error(
    line: str,
    warning: str,
    error: str,
    files: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture,
) -> None:
    """Python would show `file:line: FutureWarning: ...` and the source line under it; attnx's own
    warnings are one line, like its errors. pytest records warnings: here they are shown as Python shows
    them outside it (`showwarning` writing `formatwarning`'s text), once each as by default."""

    def as_python_shows(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    monkeypatch.setattr(warnings, "showwarning", as_python_shows)
    monkeypatch.setenv("ATTNX_CONFIG_PATH", files["conf"])
    monkeypatch.setenv("ATTNX_PLUGIN_PATH", files["renames_dot"])
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        code, err = run(argv_of(line, files, tmp_path), capfd)
    assert code == 2
    assert err.splitlines() == [warning, error]


def test_unknown_input_tokens_are_a_warning(files: dict[str, str], capfd: pytest.CaptureFixture) -> None:
    code, err = run(["predict", f"ckpt={files['rnn']}", "input=3 zz 1 qq zz"], capfd)
    assert code == 0
    assert err.strip() == "attnx predict: warning: read as <unk>, unknown to the model: zz, qq"


# results.json files that are not a run record, and why the report says so
UNREADABLE = {
    "list": "a JSON list, not a run record",
    "string": "a JSON str, not a run record",
    "truncated": "ends at line 1, mid-record (truncated?)",
    "garbled": "not valid JSON at line 1, column 2: Expecting property name enclosed in double quotes",
}
DAMAGED = {"list": "[1, 2]", "string": '"x"', "truncated": '{"status": ', "garbled": "{status}"}


def test_report_lists_each_unreadable_file_and_builds_from_the_rest(
    files: dict[str, str], tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    damage(tmp_path)
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "results.json").write_text(Path(files["runs"], "results.json").read_text())
    code, _ = run(["report", str(tmp_path)], capfd)
    assert code == 0
    report = (tmp_path / "report.md").read_text()
    assert "1/5 runs completed; 4 unreadable" in report
    assert_listed_with_why(report, tmp_path)
    assert json.loads((tmp_path / "good" / "results.json").read_text())["status"] == "completed"


def test_report_with_no_readable_run_is_nothing_to_report_exit_1(
    tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    """A report with nothing in it is a failure for a script: one stderr line, exit 1 (not 2: the folder
    holds runs, as typed); the report is still written, with why of each run folder."""
    damage(tmp_path)
    code, err = run(["report", str(tmp_path)], capfd)
    assert code == 1
    says = f"({tmp_path / 'report.md'} says why)"
    assert err.splitlines() == [f"attnx report: nothing to report: 0/4 runs completed; 4 unreadable {says}"]
    assert_listed_with_why((tmp_path / "report.md").read_text(), tmp_path)


def damage(folder: Path) -> None:
    """A run folder per DAMAGED results.json under `folder`."""
    for name, text in DAMAGED.items():
        (folder / name).mkdir()
        (folder / name / "results.json").write_text(text)


def assert_listed_with_why(report: str, folder: Path) -> None:
    listed = {row.split("|")[-2].strip(): row for row in report.splitlines() if "| unreadable " in row}
    for name, reason in UNREADABLE.items():
        assert f"results.json: {reason}" in listed[str(folder / name)], listed
