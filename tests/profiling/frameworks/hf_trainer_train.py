"""A tiny Hugging Face Trainer run: a random-init BERT classifier built from a config.

48 samples, batch 4, two batches accumulated per optimizer step, 1 epoch: 6 optimizer
steps. Writes the steps the Trainer made (``state.global_step``) to the file in argv[1].
"""

import sys
import tempfile

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Rows(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 100, (n, 16), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def main() -> None:
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
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=4,
            gradient_accumulation_steps=2,
            num_train_epochs=1,
            logging_strategy="no",
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            dataloader_num_workers=0,
            disable_tqdm=True,
        )
        trainer = Trainer(model=model, args=args, train_dataset=Rows(48))
        trainer.train()
    with open(sys.argv[1], "w") as f:
        f.write(str(trainer.state.global_step))


if __name__ == "__main__":
    main()
