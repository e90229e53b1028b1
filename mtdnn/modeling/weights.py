"""The model's weights on disk, as every checkpoint holds them::

    encoder/              the shared encoder as ``save_pretrained`` writes it: it loads in
                          plain transformers
    heads.safetensors     one tensor per head parameter, keyed "<task>.<param>"

A checkpoint folder (:mod:`mtdnn.runs.checkpoint`) keeps them beside its task definitions,
config, info, mean teacher and resume state; :func:`mtdnn.modeling.model.build_model` builds
a model from them. Writing and reading the weights is the model's business, so an encoder
of another shape (adapters) changes this module and no other.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mtdnn.errors import MtdnnError

# torch and transformers are imported by the functions that write or read tensors: a
# checkpoint's file names are read by commands that answer at once.
if TYPE_CHECKING:
    import torch

    from mtdnn.modeling.model import MultiTaskModel


ENCODER_DIR = "encoder"


HEADS_FILE = "heads.safetensors"


def save_weights(model: MultiTaskModel, folder: Path) -> None:
    """Write ``model``'s encoder and heads into ``folder`` (which the caller makes atomic)."""
    from safetensors.torch import save_file

    from mtdnn.modeling.model import quiet_transformers

    with quiet_transformers():
        model.encoder.save_pretrained(folder / ENCODER_DIR)
    heads = {f"{task}.{key}": value.detach().cpu().contiguous()
             for task, head in model.heads.items() for key, value in head.state_dict().items()}
    save_file(heads, folder / HEADS_FILE)


def load_heads(folder: Path) -> dict[str, dict[str, torch.Tensor]]:
    """The head weights saved in ``folder`` by task (each a head's state dict); a truncated
    file is a user error."""
    from safetensors.torch import load_file

    try:
        flat = load_file(folder / HEADS_FILE)
    except Exception as error:  # safetensors' own error type for a bad header
        raise MtdnnError(f"cannot read the head weights (a truncated or corrupt file?): "
                         f"{str(error).splitlines()[0]}", file=folder / HEADS_FILE,
                         allowed="a checkpoint written whole by train.py") from None
    heads: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in flat.items():
        task, name = key.split(".", 1)
        heads.setdefault(task, {})[name] = value
    return heads
