"""Tasks: determinism, correct targets, disjoint splits, trimmed batches, clear argument errors."""

from __future__ import annotations

import statistics

import pytest
import torch
from omegaconf import OmegaConf, ValidationError

from attnx.registry import available, config_class, registry
from attnx.tasks.base import SPLITS, Batch, IndexBatchSampler, ResumableLoader, Task, padding_fraction
from attnx.tasks.listops import OPERATORS
from attnx.tasks.sentiment import NEGATIVE, NEGATORS, POSITIVE, polarity
from attnx.tasks.synthetic import rows_in
from attnx.tasks.text import TextTask
from attnx.vocab import BOS, EOS, PAD, UNK

BUILT_IN = ["addition", "copy", "listops", "reverse", "sentiment", "sort"]
TINY = {"train_size": 60, "val_size": 20, "test_size": 20, "batch_size": 16}


def make(name: str, **kwargs) -> Task:
    task = registry("task").get(name)(**{**TINY, **kwargs})
    task.setup()
    return task


def sources(task: Task, split: str) -> list[list[str]]:
    return [task.src_vocab.decode(row.tolist()) for row in task.splits[split].src]


def targets(task: Task, split: str) -> list[list[str]]:
    return [task.tgt_vocab.decode(row[1:].tolist()) for row in task.splits[split].tgt]


def labels(task: Task, split: str) -> list[str]:
    return [task.classes[i] for i in task.splits[split].label.tolist()]


def test_built_in_tasks_are_registered() -> None:
    assert set(BUILT_IN) <= set(available("task"))


@pytest.mark.parametrize("name", BUILT_IN)
def test_task_builds_splits_and_batches(name: str) -> None:
    task = make(name)
    assert [len(task.splits[s]) for s in SPLITS] == [60, 20, 20]
    batches = list(task.dataloader("train"))
    assert len(batches) == 4 and all(isinstance(b, Batch) for b in batches)
    for b in batches:
        assert b.src.dtype == torch.long and b.src.shape[1] == int(b.src_len.max())  # trimmed to the batch
        assert torch.equal((b.src != PAD).sum(1), b.src_len)
        if task.model_type == "seq2seq":
            assert b.label is None and (b.tgt[:, 0] == BOS).all()
            tgt_len = (b.tgt != PAD).sum(1)
            assert b.tgt.shape[1] == int(tgt_len.max())
            assert (b.tgt.gather(1, (tgt_len - 1)[:, None]) == EOS).all()
        else:
            assert b.tgt is None and b.label.shape == b.src_len.shape
            assert int(b.label.min()) >= 0 and int(b.label.max()) < len(task.classes)
    assert torch.equal(torch.cat([b.src_len for b in batches]), task.splits["train"].src_len)


@pytest.mark.parametrize("name", BUILT_IN)
def test_splits_are_deterministic_per_seed_and_disjoint(name: str) -> None:
    a, b, other = make(name, seed=1), make(name, seed=1), make(name, seed=2)
    for split in SPLITS:
        assert torch.equal(a.splits[split].src, b.splits[split].src)
    assert sources(a, "train") != sources(other, "train")
    train = {tuple(s) for s in sources(a, "train")}
    val = {tuple(s) for s in sources(a, "val")}
    test = {tuple(s) for s in sources(a, "test")}
    assert not (train & val) and not (train & test) and not (val & test)


def test_shuffling_is_deterministic_and_changes_per_epoch() -> None:
    def order(task: Task, epoch: int) -> list[int]:
        loader = task.dataloader("train", shuffle=True)
        loader.sampler.set_epoch(epoch)
        return torch.cat([b.src_len for b in loader]).tolist()

    a, b = make("reverse", seed=3), make("reverse", seed=3)
    assert order(a, 0) == order(b, 0) and order(a, 1) == order(b, 1)
    assert order(a, 0) != order(a, 1)
    assert sorted(order(a, 0)) == sorted(a.splits["train"].src_len.tolist())  # each example once
    loader = b.dataloader("train", shuffle=True)  # used bare, without Lightning's set_epoch
    assert [torch.cat([x.src_len for x in loader]).tolist() for _ in range(2)] == [order(a, 0), order(a, 1)]


def test_a_loader_restored_from_its_state_goes_on_with_the_rest_of_its_epoch() -> None:
    task = make("reverse", seed=3, train_size=100, batch_size=10)

    def loader(state: dict | None = None) -> ResumableLoader:
        chosen = task.dataloader("train", shuffle=True, bucketing=True)
        if state is not None:
            chosen.load_state_dict(state)  # what Lightning does on resume, before setting the epoch
        chosen.sampler.set_epoch(2)
        return chosen

    whole = [b.index.tolist() for b in loader()]
    stopped = loader()
    batches = iter(stopped)
    assert [next(batches).index.tolist() for _ in range(3)] == whole[:3]
    assert stopped.state_dict() == {"epoch": 2, "batches": 3}
    resumed = loader(stopped.state_dict())
    assert [b.index.tolist() for b in resumed] == whole[3:]
    assert resumed.state_dict() == {"epoch": 3, "batches": 0}  # a finished epoch: the next one's start
    resumed.sampler.set_epoch(3)
    assert len(list(resumed)) == 10  # a new epoch is whole


def test_bucketing_groups_similar_lengths_and_stays_a_deterministic_shuffle() -> None:
    task = make("reverse", min_len=1, max_len=30, train_size=3000, batch_size=10, seed=5)
    split = task.splits["train"]

    def epoch(bucketing: bool, number: int, pool: int | None = None) -> list[torch.Tensor]:
        loader = task.dataloader("train", shuffle=True, bucketing=bucketing)
        if pool is not None:
            loader.sampler.POOL_BATCHES = pool
        loader.sampler.set_epoch(number)
        return [b.index for b in loader]

    batches = epoch(True, 0)
    assert len(batches) == 300 and sorted(torch.cat(batches).tolist()) == list(range(3000))
    assert [b.tolist() for b in batches] == [b.tolist() for b in epoch(True, 0)]  # same seed, same epoch
    assert [b.tolist() for b in batches] != [b.tolist() for b in epoch(True, 1)]
    first = [int(split.src_len[b].min()) for b in batches[:20]]
    assert first != sorted(first)  # batches are shuffled, not served shortest first
    padding = padding_fraction(split, batches)
    random = padding_fraction(split, epoch(False, 0))
    assert random["tgt"] > 0.3 and padding["tgt"] < 0.05 and padding["src"] < 0.05
    assert padding_fraction(split, epoch(True, 0, pool=1)) == pytest.approx(
        random, abs=0.05
    )  # no pool, no gain

    evaluation = [b.index for b in task.dataloader("val", bucketing=True)]
    lengths = torch.cat([task.splits["val"].length_key()[b] for b in evaluation])
    assert torch.equal(lengths, lengths.sort().values) and len(lengths) == len(task.splits["val"])


@pytest.mark.parametrize("shuffle, bucketing", [(False, True), (True, False), (True, True)])
@pytest.mark.parametrize("size, ranks", [(100, 2), (97, 3), (33, 2), (250, 4)])
def test_ddp_ranks_share_each_batch_and_see_every_example_once(
    shuffle: bool, bucketing: bool, size: int, ranks: int
) -> None:
    lengths = torch.randint(1, 30, (size,)) if bucketing else None

    def sampler(rank: int = 0, replicas: int = 1) -> IndexBatchSampler:
        chosen = IndexBatchSampler(size, 16, shuffle, 7, lengths, num_replicas=replicas, rank=rank)
        chosen.POOL_BATCHES = 3  # several pools, each with its own short batch only in the last
        chosen.set_epoch(2)
        return chosen

    shares = [list(sampler(rank, ranks)) for rank in range(ranks)]
    assert {len(share) for share in shares} == {len(sampler(0, ranks))}  # DDP's collectives stay in step
    seen = torch.cat([batch for share in shares for batch in share]).tolist()
    assert sorted(seen) == list(range(size))  # each example once in the epoch: none repeated, none dropped
    steps = [torch.cat(parts) for parts in zip(*shares)]
    assert all(min(map(len, parts)) >= max(map(len, parts)) - 1 >= 0 for parts in zip(*shares))
    alone = list(sampler())
    if size % 16 >= ranks or size % 16 == 0:  # the ranks take one process's batches, step by step
        assert [sorted(s.tolist()) for s in steps] == [sorted(b.tolist()) for b in alone]
    else:  # a last batch of fewer examples than ranks joined the one before
        assert len(steps) == len(alone) - 1 and max(map(len, steps)) == 16 + size % 16
    with pytest.raises(ValueError, match="a split of 1 examples cannot be shared by 2 processes"):
        IndexBatchSampler(1, 16, shuffle, seed=7, num_replicas=2)


def test_padding_fraction_counts_each_batch_padded_to_its_longest() -> None:
    task = make("copy", min_len=1, max_len=8)
    split = task.splits["train"]
    index = torch.tensor([int((split.src_len == 2).nonzero()[0]), int((split.src_len == 8).nonzero()[0])])
    assert padding_fraction(split, [index]) == pytest.approx({"src": 6 / 16, "tgt": 6 / 20})  # tgt: +BOS, EOS


def test_copy_reverse_sort_targets() -> None:
    for name, expected in (
        ("copy", list),
        ("reverse", lambda s: s[::-1]),
        ("sort", lambda s: sorted(s, key=int)),
    ):
        task = make(name, vocab_size=12)
        for split in SPLITS:
            assert targets(task, split) == [expected(s) for s in sources(task, split)], name


def test_addition_targets_are_sums() -> None:
    task = make("addition", min_digits=1, max_digits=12, test_min_digits=13, test_max_digits=18)
    for split in SPLITS:
        for src, tgt in zip(sources(task, split), targets(task, split)):
            a, b = "".join(src).split("+")
            assert int("".join(tgt)) == int(a) + int(b) and (tgt[0] != "0" or len(tgt) == 1)
            assert a[0] != "0" or len(a) == 1  # no leading zeros
    digits = [len(x) for s in sources(task, "test") for x in "".join(s).split("+")]
    assert min(digits) >= 13 and max(digits) <= 18


def test_test_split_has_its_own_length_range() -> None:
    task = make("reverse", min_len=3, max_len=5, test_min_len=8, test_max_len=10)
    for split, (low, high) in (("train", (3, 5)), ("val", (3, 5)), ("test", (8, 10))):
        lengths = task.splits[split].src_len
        assert int(lengths.min()) >= low and int(lengths.max()) <= high
    assert set(task.splits["test"].src_len.tolist()) == {8, 9, 10}
    like_test = make("reverse", min_len=3, max_len=5, test_min_len=8, test_max_len=10, val_like_test=True)
    assert set(like_test.splits["val"].src_len.tolist()) == {8, 9, 10}
    assert torch.equal(like_test.splits["train"].src, task.splits["train"].src)
    assert not rows_in(like_test.splits["test"].src, like_test.splits["val"].src).any()
    mqar = make("mqar", seq_len=16, num_kv_pairs=2, test_seq_len=32, test_num_kv_pairs=4, val_like_test=True)
    assert mqar.splits["val"].src.shape[1] == mqar.splits["test"].src.shape[1] == 32


def evaluate_listops(tokens: list[str]) -> int:
    """Reference evaluator (a stack machine, independent of the generator's recursion)."""
    apply = {
        "[MIN": min,
        "[MAX": max,
        "[MED": lambda v: int(statistics.median(v)),
        "[SM": lambda v: sum(v) % 10,
    }
    stack: list = [[]]
    for token in tokens:
        if token in apply:
            stack.append([token])
        elif token == "]":
            op, *args = stack.pop()
            stack[-1].append(apply[op](args))
        else:
            stack[-1].append(int(token))
    (value,) = stack[0]
    return value


def test_listops_labels_match_a_reference_evaluator() -> None:
    task = make("listops", min_len=5, max_len=60, max_depth=4, max_args=5)
    for split in SPLITS:
        for src, label in zip(sources(task, split), labels(task, split)):
            assert 5 <= len(src) <= 60
            assert evaluate_listops(src) == int(label)
    assert task.classes == [str(d) for d in range(10)]
    assert set(task.src_vocab.itos[4:]) == {*OPERATORS, "]", *(str(d) for d in range(10))}
    assert max(nesting(s) for s in sources(task, "train")) <= 3  # operators only above max_depth


def nesting(tokens: list[str]) -> int:
    depth = deepest = 0
    for token in tokens:
        depth += 1 if token in OPERATORS else -1 if token == "]" else 0
        deepest = max(deepest, depth)
    return deepest


def flips(words: list[str]) -> str:
    """Independent reading of the rule: each negator flips the next sentiment word."""
    sentiment = [w for w in words if w in POSITIVE | NEGATIVE]
    if not sentiment:
        return "neutral"
    last = max(i for i, w in enumerate(words) if w in POSITIVE | NEGATIVE)
    previous = max((i for i, w in enumerate(words[:last]) if w in POSITIVE | NEGATIVE), default=-1)
    negated = any(w in NEGATORS for w in words[previous + 1 : last])
    return "positive" if (words[last] in POSITIVE) != negated else "negative"


@pytest.mark.parametrize(
    ("sentence", "label"),
    [
        ("i really hate this movie", "negative"),
        ("the plot was not bad at all", "positive"),
        ("i do not really like this film", "negative"),
        ("honestly the acting was very good", "positive"),
        ("yesterday i never hate the ending", "positive"),
        ("the movie was not long", "neutral"),
    ],
)
def test_sentiment_rule_on_hand_made_sentences(sentence: str, label: str) -> None:
    assert polarity(sentence.split()) == label


@pytest.mark.parametrize("num_classes", [2, 3])
def test_sentiment_labels_lengths_and_one_opinion(num_classes: int) -> None:
    task = make("sentiment", num_classes=num_classes, min_len=12, max_len=25, train_size=300)
    assert task.classes == ["negative", "positive", "neutral"][:num_classes]
    for split in SPLITS:
        for words, label in zip(sources(task, split), labels(task, split)):
            assert 12 <= len(words) <= 25
            assert sum(w in POSITIVE | NEGATIVE for w in words) <= 1  # filler never carries sentiment
            assert flips(words) == label
    train = list(zip(sources(task, "train"), labels(task, "train")))
    assert {label for _, label in train} == set(task.classes)
    negated = [label for words, label in train if NEGATORS & set(words) and label != "neutral"]
    assert {"positive", "negative"} == set(negated)  # negation occurs with both outcomes


def test_tokenize_and_encode_source_round_trip() -> None:
    reverse, addition, sentiment = make("reverse"), make("addition"), make("sentiment")
    src, src_len = reverse.encode_source("3 1 4 1 5")
    assert src.shape == (1, 5) and src_len.tolist() == [5]
    assert reverse.detokenize(reverse.src_vocab.decode(src[0].tolist())) == "3 1 4 1 5"
    src, _ = addition.encode_source("12 + 345")
    assert addition.detokenize(addition.src_vocab.decode(src[0].tolist())) == "12+345"
    assert sentiment.tokenize("I really HATE this movie!") == ["i", "really", "hate", "this", "movie", "!"]
    src, _ = sentiment.encode_source("I really hate this movie")
    assert UNK not in src[0].tolist()
    with pytest.raises(ValueError, match="no tokens"):
        reverse.encode_source("   ")


@pytest.mark.parametrize(
    ("name", "kwargs", "field"),
    [
        ("reverse", {"train_size": -1}, "train_size"),
        ("reverse", {"min_len": 5, "max_len": 4}, "max_len"),
        ("reverse", {"min_len": 0}, "min_len"),
        ("copy", {"test_min_len": 30, "test_max_len": 20}, "test_max_len"),
        ("sort", {"vocab_size": 1}, "vocab_size"),
        ("reverse", {"batch_size": 0}, "batch_size"),
        ("reverse", {"seed": -1}, "seed"),
        ("addition", {"max_digits": 19}, "max_digits"),
        ("addition", {"test_min_digits": 0}, "test_min_digits"),
        ("sentiment", {"num_classes": 4}, "num_classes"),
        ("sentiment", {"max_len": 5}, "max_len"),
        ("listops", {"max_args": 1}, "max_args"),
        ("listops", {"min_len": 50, "max_len": 40}, "max_len"),
        ("listops", {"val_size": 0}, "val_size"),
    ],
)
def test_invalid_arguments_name_the_field(name: str, kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"^task\.{field}=.* must be"):
        registry("task").get(name)(**kwargs)


def test_val_and_test_avoid_earlier_splits_in_a_small_space() -> None:
    symbols = make("copy", vocab_size=2, min_len=1, max_len=6, train_size=80)  # 126 strings in all
    listops = make("listops", min_len=1, max_len=1, train_size=5, val_size=3, test_size=2)  # 10 digits
    for task in (symbols, listops):
        seen = [{tuple(s) for s in sources(task, split)} for split in SPLITS]
        assert not (seen[0] & seen[1]) and not (seen[0] | seen[1]) & seen[2]
    assert sorted(s for split in SPLITS for (s,) in sources(listops, split)) == [str(d) for d in range(10)]


def test_exhausted_sequence_space_is_a_clear_error() -> None:
    task = registry("task").get("copy")(vocab_size=2, min_len=1, max_len=2, train_size=200, val_size=10)
    with pytest.raises(ValueError, match=r"task\.val_size=10 .* only 0 sources"):
        task.setup()
    task = registry("task").get("listops")(min_len=1, max_len=1, train_size=8, val_size=3)
    with pytest.raises(ValueError, match=r"task\.val_size=3 .* only 2 distinct"):
        task.setup()


SLICES = "test_slices"


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        (
            "reverse",
            ["vocab_size", "min_len", "max_len", "test_min_len", "test_max_len", "val_like_test", SLICES],
        ),
        (
            "addition",
            ["min_digits", "max_digits", "test_min_digits", "test_max_digits", "val_like_test", SLICES],
        ),
        ("sentiment", ["min_len", "max_len", "num_classes"]),
        ("listops", ["min_len", "max_len", "max_depth", "max_args"]),
    ],
)
def test_structured_config_fields(name: str, fields: list[str]) -> None:
    params = registry("task").entry(name).hyperparams()
    assert list(params) == [*fields, "train_size", "val_size", "test_size", "batch_size", "seed"]
    ranges = [f for f in fields if f.startswith("test_") and f != SLICES]
    assert all(params[f] is None for f in ranges)  # test range defaults to train's
    assert params.get(SLICES, ()) == ()  # no test slices unless asked
    config = OmegaConf.structured(config_class(registry("task").entry(name)))
    with pytest.raises(ValidationError):
        config.train_size = "many"  # typed fields: a wrong type fails at composition, not deep in training
    if "test_max_len" in fields:
        config.test_max_len = None


class Pairs(TextTask):
    """A file-backed task in miniature: only `examples()` is written."""

    model_type = "seq2seq"
    min_freq = 2

    def examples(self) -> dict[str, list[tuple[str, str]]]:
        return {
            "train": [("a b", "x"), ("b a c", "y x"), ("a", "x y")],
            "val": [("a z", "x")],
            "test": [("b", "y")],
        }


class Labels(TextTask):
    model_type = "classification"

    def examples(self) -> dict[str, list[tuple[str, str]]]:
        return {"train": [("a b", "yes"), ("b", "no")], "val": [("a", "yes")], "test": [("b", "maybe")]}


def test_text_task_needs_only_examples() -> None:
    task = Pairs(batch_size=2)
    task.setup()
    assert "c" not in task.src_vocab.stoi  # seen once in train, below min_freq
    assert sources(task, "val") == [["a", "<unk>"]]  # "z" is not in train's vocabulary
    assert targets(task, "train") == [["x"], ["y", "x"], ["x", "y"]]
    batch = next(iter(task.dataloader("train")))
    assert batch.tgt.tolist()[0] == [BOS, task.tgt_vocab.stoi["x"], EOS, PAD]
    with pytest.raises(ValueError, match="test split has labels not in train: maybe"):
        Labels().setup()
