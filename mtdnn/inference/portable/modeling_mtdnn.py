"""One mtdnn task head on any Hugging Face encoder, loadable with
``AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)``.

Copied into an exported model's folder by ``python -m mtdnn.export`` for encoder families
whose own classification head is not mtdnn's (dropout → linear on the pooled output, or on
the first token where the encoder has no pooler). Imports only torch and transformers.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput


class MtdnnClassifierConfig(PretrainedConfig):
    model_type = "mtdnn_classifier"

    def __init__(self, encoder: dict | None = None, head_dropout: float = 0.1,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.encoder = encoder or {}
        self.head_dropout = head_dropout


class MtdnnForSequenceClassification(PreTrainedModel):
    config_class = MtdnnClassifierConfig
    base_model_prefix = "encoder"

    def __init__(self, config: MtdnnClassifierConfig) -> None:
        super().__init__(config)
        settings = dict(config.encoder)
        encoder_config = AutoConfig.for_model(settings.pop("model_type"), **settings)
        self.encoder = AutoModel.from_config(encoder_config)
        self.dropout = nn.Dropout(config.head_dropout)
        self.classifier = nn.Linear(encoder_config.hidden_size, config.num_labels)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear) and module is self.classifier:
            nn.init.normal_(module.weight, std=0.02)
            nn.init.zeros_(module.bias)

    def forward(self, input_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, **kwargs) -> SequenceClassifierOutput:
        extra = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **extra)
        pooled = getattr(out, "pooler_output", None)
        if pooled is None:
            pooled = out.last_hidden_state[:, 0]
        logits = self.classifier(self.dropout(pooled))
        loss = None
        if labels is not None:
            loss = (nn.functional.mse_loss(logits.squeeze(-1), labels.float())
                    if self.config.num_labels == 1
                    else nn.functional.cross_entropy(logits, labels))
        return SequenceClassifierOutput(loss=loss, logits=logits)
