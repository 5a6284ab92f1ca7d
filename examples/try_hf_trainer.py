"""A Hugging Face Trainer job whose batches arrive slowly: `gpuwise try -- python THIS`.

A small random-init BERT classifier (built from a config, nothing downloaded). Each sample
takes ``--read-ms`` milliseconds to arrive (``time.sleep``, as a read from network storage
would) and ``TrainingArguments`` loads in the training process, so the model waits for
every batch. The Trainer already picks the fused AdamW on this PyTorch, so ``gpuwise``
suggests no optimizer change; ``gpuwise try`` measures loader workers and prints the
change as a diff of the ``TrainingArguments(...)`` call.
"""

import argparse
import tempfile
import time

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class SlowRows(torch.utils.data.Dataset):
    """Random token ids and labels; each item waits ``read_s`` like a remote read."""

    def __init__(self, n: int, read_s: float) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 100, (n, 16), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)
        self.read_s = read_s

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        time.sleep(self.read_s)
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read-ms", type=float, default=8.0, help="wait per sample")
    parser.add_argument("--samples", type=int, default=2048)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    with tempfile.TemporaryDirectory() as out:
        training_args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=8,
            num_train_epochs=1,
            logging_strategy="no",
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
        )
        rows = SlowRows(args.samples, args.read_ms / 1000)
        trainer = Trainer(model=model, args=training_args, train_dataset=rows)
        trainer.train()


if __name__ == "__main__":
    main()
