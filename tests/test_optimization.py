from __future__ import annotations

import copy

import pytest
import torch

from mtdnn.config.train_config import OptimizerConfig
from mtdnn.modeling.model import MultiTaskModel, load_encoder
from mtdnn.tasks.task_def import load_task_defs
from mtdnn.training.optimization import build_optimizer, build_scheduler, layer_of


def lrs(schedule: str, total: int = 100, **kwargs) -> list[float]:
    param = torch.nn.Parameter(torch.zeros(2))
    config = OptimizerConfig(lr=1.0, schedule=schedule, **kwargs)
    optimizer = torch.optim.SGD([param], lr=1.0)
    scheduler = build_scheduler(optimizer, config, total)
    values = []
    for _ in range(total):
        values.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return values


def test_schedules_have_their_shapes() -> None:
    linear, cosine = lrs("linear"), lrs("cosine")
    assert linear[0] == 0.0 and linear[10] == pytest.approx(1.0)
    assert linear[55] == pytest.approx(0.5, abs=0.02) and linear[-1] < 0.02
    assert cosine[10] == pytest.approx(1.0) and cosine[55] == pytest.approx(0.5, abs=0.03)
    constant = lrs("constant")
    assert constant[10:] == [1.0] * 90
    stlr = lrs("slanted_triangular", warmup_ratio=0.1, stlr_ratio=32.0)
    assert stlr[0] == pytest.approx(1 / 32) and stlr[10] == pytest.approx(1.0)
    assert stlr[-1] == pytest.approx((1 + (1 / 90) * 31) / 32)  # falls to the floor ratio
    assert all(a <= b for a, b in zip(stlr[:10], stlr[1:11], strict=True))
    assert all(a >= b for a, b in zip(stlr[10:-1], stlr[11:], strict=True))


def test_layer_wise_lr_decay(tiny_encoder_dir) -> None:
    encoder, _ = load_encoder(str(tiny_encoder_dir))
    model = MultiTaskModel(encoder, {"rte": load_task_defs()["rte"]})
    assert layer_of("encoder.embeddings.word_embeddings.weight", 2) == 0
    assert layer_of("encoder.encoder.layer.1.output.dense.weight", 2) == 2
    assert layer_of("heads.rte.proj.weight", 2) == 3
    optimizer = build_optimizer(model, OptimizerConfig(lr=1.0, layer_lr_decay=0.5))
    lr_of = {id(p): group["lr"] for group in optimizer.param_groups for p in group["params"]}
    named = dict(model.named_parameters())
    assert lr_of[id(named["heads.rte.proj.weight"])] == 1.0
    assert lr_of[id(named["encoder.encoder.layer.1.attention.self.query.weight"])] == 0.5
    assert lr_of[id(named["encoder.encoder.layer.0.attention.self.query.weight"])] == 0.25
    assert lr_of[id(named["encoder.embeddings.word_embeddings.weight"])] == 0.125
    decay_of = {id(p): g["weight_decay"] for g in optimizer.param_groups for p in g["params"]}
    assert decay_of[id(named["encoder.embeddings.LayerNorm.weight"])] == 0.0
    assert decay_of[id(named["heads.rte.proj.weight"])] == 0.01


def test_frozen_encoder_does_not_move(prepared_data, tiny_encoder_dir, tmp_path) -> None:
    from safetensors.torch import load_file

    from conftest import head_jsonl
    from mtdnn.config.resolve import resolve_config
    from mtdnn.training.trainer import train

    rows = head_jsonl(prepared_data / "rte/train.jsonl", tmp_path / "rte.jsonl", 16)
    common = ["tasks=[rte]", f"tasks.rte.train={rows}", f"tasks.rte.dev={rows}",
              f"encoder={tiny_encoder_dir}", "batch_size=8", "max_steps=2", "progress_bar=false",
              f"cache_dir={tmp_path / 'cache'}", "optimizer.warmup_ratio=0"]
    train(resolve_config(None, [*common, "freeze_encoder_steps=2", f"output_dir={tmp_path / 'f'}"]))
    train(resolve_config(None, [*common, f"output_dir={tmp_path / 'u'}"]))
    start = load_file(tiny_encoder_dir / "model.safetensors")
    frozen = load_file(tmp_path / "f/last/encoder/model.safetensors")
    moved = load_file(tmp_path / "u/last/encoder/model.safetensors")
    key = "encoder.layer.0.attention.self.query.weight"
    prefix = next(k for k in start if k.endswith(key))
    assert torch.equal(frozen[next(k for k in frozen if k.endswith(key))], start[prefix])
    assert not torch.equal(moved[next(k for k in moved if k.endswith(key))], start[prefix])


def _updated(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> None:
    for step in range(steps):
        for param in model.parameters():
            param.grad = torch.full_like(param, 0.1 * (step + 1)).sin() + param.detach()
        optimizer.step()


def test_updates_run_on_fused_kernels_and_do_what_the_per_tensor_loop_does(
        tiny_encoder_dir) -> None:
    from mtdnn.training.optimization import resume_optimization

    def model() -> MultiTaskModel:
        torch.manual_seed(0)
        encoder, _ = load_encoder(str(tiny_encoder_dir))
        return MultiTaskModel(encoder, {"rte": load_task_defs()["rte"]})

    config = OptimizerConfig(lr=1e-3)
    fused_model, loop_model = model(), model()
    fused = build_optimizer(fused_model, config)
    assert all(group["fused"] for group in fused.param_groups)
    loop = build_optimizer(loop_model, config, fused=False)  # torch's per-tensor loop
    assert not any(group["fused"] or group["foreach"] for group in loop.param_groups)
    _updated(fused_model, fused, 3)
    _updated(loop_model, loop, 3)
    for (name, a), b in zip(fused_model.named_parameters(), loop_model.parameters(),
                            strict=True):
        torch.testing.assert_close(a, b, msg=name)
    # a run saved by the per-tensor loop goes on on the fused kernels, from where it was
    resumed_model = model()
    resumed_model.load_state_dict(loop_model.state_dict())
    resumed = build_optimizer(resumed_model, config)
    scheduler = build_scheduler(resumed, config, 10)
    saved = copy.deepcopy({"optimizer": loop.state_dict(), "scheduler": scheduler.state_dict()})
    resume_optimization(resumed, scheduler, 10, saved, {})
    assert all(group["fused"] and not group["foreach"] for group in resumed.param_groups)
    _updated(resumed_model, resumed, 2)
    _updated(loop_model, loop, 2)
    for a, b in zip(resumed_model.parameters(), loop_model.parameters(), strict=True):
        torch.testing.assert_close(a, b)
