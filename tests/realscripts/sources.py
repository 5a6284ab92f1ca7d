"""Real training scripts written by others, pinned by repository, commit and path.

Nothing here is third-party code: ``fetch.py`` downloads each file at its commit into
``tests/realscripts/.cache/`` (ignored by git) and checks its SHA-256. Each script runs
unmodified on data this module generates; ``expected`` is the verdict written down from the
separate measurement (``measure.py``: PyTorch's own profiler over a window of steps, with the
input pipeline's and the optimizer's time read from its spans) before gpuwise's was read.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

CACHE = Path(__file__).parent / ".cache"


@dataclass(frozen=True)
class Source:
    """One script: where it comes from, how it is run, and the expected verdict.

    Attributes:
        name: Short id used in tests and the README table.
        repo: GitHub ``owner/name``.
        commit: The pinned commit.
        path: The script's path in the repository.
        sha256: SHA-256 of the script at that commit.
        companions: Other files of the repository the script imports, with their SHA-256.
        argv: Arguments after the script.
        data: Writes the generated input files into the run directory.
        optimizer: The script steps a ``torch.optim`` optimizer.
        expected: The verdict (first finding kind) from the separate measurement.
        measured: The separate measurement's figures behind ``expected``.
        licence: The licence the repository publishes the script under.
    """

    name: str
    repo: str
    commit: str
    path: str
    sha256: str
    companions: tuple[tuple[str, str], ...] = ()
    argv: tuple[str, ...] = ()
    data: Callable[[Path], None] | None = None
    expected: str = ""
    optimizer: bool = True
    measured: dict[str, float] = field(default_factory=dict)
    licence: str = ""

    @property
    def local(self) -> Path:
        """Where ``fetch.py`` puts the script."""
        return CACHE / self.repo.replace("/", "+") / self.path


def names_file(directory: Path) -> None:
    """2,000 made-up lowercase names, one a line (makemore's input format)."""
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    lines = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(2000)]
    (directory / "names.txt").write_text("\n".join(lines) + "\n")


def wikitext_file(directory: Path) -> None:
    """A made-up ``data/wikitext-2.txt`` (Lightning's WikiText2 demo reads it, no download).

    6,000 lines of 32 words from a 200-word vocabulary: 5,000+ blocks of 35 tokens, enough
    for the script's 4,000-block validation and test splits and a few hundred steps.
    """
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(200)]
    lines = [" ".join(rng.choice(vocab) for _ in range(32)) for _ in range(6000)]
    (directory / "data").mkdir(exist_ok=True)
    (directory / "data" / "wikitext-2.txt").write_text("\n".join(lines) + "\n")


def tiny_llama_and_instructions(directory: Path) -> None:
    """A random-init 2-layer Llama in ``tiny-llama/`` and 200 made-up instructions in ``alpaca/``.

    The model (hidden size 64, 128 positions) and its word-level tokenizer are saved the way
    a downloaded checkpoint is, so ``from_pretrained("tiny-llama")`` reads them with nothing
    fetched; ``alpaca/train.json`` has the instruction/input/output records of Alpaca's
    format, on a 200-word vocabulary, which ``load_dataset("alpaca")`` reads from the disk.
    """
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    rng = random.Random(0)
    words = [f"w{i}" for i in range(200)]
    special = ["<unk>", "<s>", "</s>"]
    markup = ["###", "Instruction", "Input", "Response", ":"]
    vocab = {token: i for i, token in enumerate([*special, *markup, *words])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    tokenizer.model_max_length = 128
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        bos_token_id=1,
        eos_token_id=2,
    )
    model_dir = directory / "tiny-llama"
    LlamaForCausalLM(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)

    def text(low: int, high: int) -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(low, high)))

    records = [
        {"instruction": text(4, 12), "input": text(0, 8) if i % 2 else "", "output": text(8, 40)}
        for i in range(200)
    ]
    (directory / "alpaca").mkdir(exist_ok=True)
    (directory / "alpaca" / "train.json").write_text(json.dumps(records))


GRAYKODE = ("graykode/nlp-tutorial", "d05e31ec81d56d70c1db89b99ab07e948f7ebc11")
JCJOHNSON = ("jcjohnson/pytorch-examples", "0003fcdc606a79951e53bf8f46f8574fa4739f23")

SOURCES: tuple[Source, ...] = (
    Source(
        "makemore",
        "karpathy/makemore",
        "988aa59e4d8fefa526d06f3b453ad116258398d4",
        "makemore.py",
        "49b281f40d2c4897737cb90f21f55d4cbbe7d10329212caab72a9054ba17be96",
        argv=(
            *("-i", "names.txt", "-o", "out", "--max-steps", "505", "-n", "0", "--seed", "1"),
            *("--n-layer", "1", "--n-embd", "16", "--n-embd2", "16"),
        ),
        data=names_file,
        expected="healthy",
        measured={"step_mean_s": 0.129314, "data_fraction": 0.0271, "optimizer_fraction": 0.0212},
    ),
    Source(
        "nnlm",
        *GRAYKODE,
        "1-1.NNLM/NNLM.py",
        "8e914031a8f0265f763296f9a99be6fcfef1af1c2c0bec82d6e1b572f60d0ee2",
        expected="healthy",
        measured={"step_mean_s": 0.033323, "data_fraction": 0.0, "optimizer_fraction": 0.0552},
    ),
    Source(
        "text_lstm",
        *GRAYKODE,
        "3-2.TextLSTM/TextLSTM.py",
        "d779cd0a920ce83071cf9f77bf17f4abddde66906fb44084e63d8740b297b032",
        expected="optimizer_bound",
        measured={"step_mean_s": 0.307312, "data_fraction": 0.0, "optimizer_fraction": 0.2571},
    ),
    Source(
        "text_cnn",
        *GRAYKODE,
        "2-1.TextCNN/TextCNN.py",
        "9708e9b4fc648c59cae919e19c6c7c624fef0bb5fcf3bf130c6d47c4cf6823b1",
        expected="healthy",
        measured={"step_mean_s": 0.266927, "data_fraction": 0.0, "optimizer_fraction": 0.0032},
    ),
    Source(
        "two_layer_manual_update",
        *JCJOHNSON,
        "nn/two_layer_net_nn.py",
        "99c548dc3de1bc9520051eedeb9db4cc0ed2759b3f0e0f3b25934e10cd4f7f27",
        optimizer=False,
        expected="healthy",
        measured={"data_fraction": 0.0, "optimizer_fraction": 0.0},
    ),
    Source(
        "two_layer_adam",
        *JCJOHNSON,
        "nn/two_layer_net_optim.py",
        "cb211e45e016fcf77ebba8ef6efd7bf01dbca233d0e79de64f28af42b4e7c075",
        expected="optimizer_bound",
        measured={"step_mean_s": 0.065961, "data_fraction": 0.0, "optimizer_fraction": 0.399},
    ),
)

FRAMEWORK_SOURCES: tuple[Source, ...] = (
    Source(
        "lightning_transformer",
        "Lightning-AI/pytorch-lightning",
        "7f0c3436cd3f6ad3753125672024fc415cbcb414",
        "examples/pytorch/basics/transformer.py",
        "417e7ceb2e0611d7656ea6ea72927c18a04dcf4fda824e3baca2645a9e464367",
        data=wikitext_file,
        licence="Apache-2.0",
    ),
    Source(
        "hf_trainer_bnb_cpu",
        "bitsandbytes-foundation/bitsandbytes",
        "45bd314622fec8826456e31c3c15099a4711bfe1",
        "examples/cpu/cpu_training.py",
        "2ca58f56716aa436789b867994a5d2560a6d208e3c3d3884ec4f916696bca6fe",
        argv=(
            *("--use_trainer", "--model", "tiny-llama", "--dataset", "alpaca"),
            *("--dtype", "fp32", "--steps", "1000", "--log_interval", "1000"),
        ),
        data=tiny_llama_and_instructions,
        licence="MIT",
    ),
    Source(
        "fabric_language_model",
        "Lightning-AI/pytorch-lightning",
        "7f0c3436cd3f6ad3753125672024fc415cbcb414",
        "examples/fabric/language_model/train.py",
        "80f1547b28d91690e8d7624cb090503269a4b010f0bd4e9c0bc93550430dcfd6",
        data=wikitext_file,
        licence="Apache-2.0",
    ),
)
"""Third-party scripts of a framework (Lightning, the Hugging Face Trainer, Lightning
Fabric), tried by ``benchmarks/try_budget.py`` and ``test_frameworks.py``;
they carry no expected verdict of ``measure.py`` and are not in ``SOURCES``' tests."""
