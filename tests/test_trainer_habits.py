"""Habits users bring from Hugging Face Trainer: extending a finished run, gradient
checkpointing, warm-up in steps, per-task loss weights and label smoothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import head_jsonl, read_metrics
from mtdnn.config.resolve import resolve_config
from mtdnn.training.trainer import TrainingRecipe, train


def rte_keys(data: Path, encoder: Path, tmp_path: Path, *overrides: str) -> list[str]:
    rows = head_jsonl(data / "rte/dev.jsonl", tmp_path / "rte.jsonl", 40)
    return ["tasks=[rte]", f"tasks.rte.train={rows}", f"tasks.rte.dev={rows}",
            f"encoder={encoder}", "batch_size=8", "progress_bar=false",
            f"output_dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}",
            "log_every_steps=1", "eval_every_epoch=false", "precision=fp32", *overrides]


def test_a_finished_run_extended_goes_on_under_the_longer_schedule(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    keys = rte_keys(prepared_data, tiny_encoder_dir, tmp_path, "optimizer.lr=1e-4")
    first = train(resolve_config(None, [*keys, "max_steps=12"]))
    assert first["steps"] == 12
    with caplog.at_level("INFO"):
        longer = train(resolve_config(None, [*keys, "max_steps=24",
                                          f"resume={tmp_path / 'run'}"]))
    assert longer["steps"] == 24 and longer["resumed_from_step"] == 12
    # both processes named in the record of who trained which steps
    from mtdnn.runs.provenance import code_version

    assert [seg["from_step"] for seg in first["trained_by"]] == [0]
    assert [seg["from_step"] for seg in longer["trained_by"]] == [0, 12]
    assert all(seg["code_version"] == code_version() and seg["machine"]["torch"]
               for seg in longer["trained_by"])
    assert "extending the run (max_steps 12 → 24) to 24 steps: from step 13" in caplog.text
    lrs = {e["step"]: e["lr"] for e in read_metrics(tmp_path / "run") if e["kind"] == "train"}
    assert sorted(lrs) == list(range(1, 25))  # step 13 follows step 12, nothing repeated
    assert lrs[12] == pytest.approx(0.0)  # the 12-step schedule had ended
    warmup = int(0.1 * 24)
    for step in (13, 18, 24):  # the 24-step linear schedule after its warm-up
        assert lrs[step] == pytest.approx(1e-4 * (24 - step) / (24 - warmup))
    # shrinking a run is not an extension
    from mtdnn.errors import MtdnnError

    with pytest.raises(MtdnnError, match="the run to resume has max_steps=24, this one 6"):
        train(resolve_config(None, [*keys, "max_steps=6", f"resume={tmp_path / 'run'}"]))


def recipe(keys: list[str]) -> TrainingRecipe:
    made = TrainingRecipe(resolve_config(None, keys))
    made.setup()
    # the test drives the steps itself: no train.log, and (as train() does at its end) the
    # package's log level put back, so that later tests see logging as they set it
    made.run_log.detach()
    return made


def first_step_gradient(made: TrainingRecipe) -> tuple[float, torch.Tensor]:
    """The first step's task loss and gradient norm (before clipping)."""
    made.sampler.restore(made.state.sampler_state)
    refs = made.sampler.plan_epoch()[0]
    losses = made.backward(refs)
    norm = torch.nn.utils.clip_grad_norm_(made.model.parameters(), float("inf"))
    return float(losses[0][1]), norm


def test_loss_weight_scales_a_tasks_gradient_and_not_its_logged_loss(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path) -> None:
    base = rte_keys(prepared_data, tiny_encoder_dir, tmp_path, "max_steps=2")
    loss, norm = first_step_gradient(recipe([*base, f"output_dir={tmp_path / 'a'}"]))
    weighted_loss, weighted_norm = first_step_gradient(recipe(
        [*base, f"output_dir={tmp_path / 'b'}", "tasks.rte.loss_weight=2.5"]))
    assert weighted_loss == pytest.approx(loss)
    assert float(weighted_norm) == pytest.approx(2.5 * float(norm), rel=1e-5)


def test_label_smoothing_reaches_the_loss(prepared_data: Path, tiny_encoder_dir: Path,
                                          tmp_path: Path) -> None:
    import torch.nn.functional as F

    base = rte_keys(prepared_data, tiny_encoder_dir, tmp_path, "max_steps=2")
    made = recipe([*base, "label_smoothing=0.3"])
    made.sampler.restore(made.state.sampler_state)
    ref = made.sampler.plan_epoch()[0][0]
    from mtdnn.data.tokenized import get_batch

    data = made.data["rte"]
    batch = get_batch(data.train, ref.indices, data.collator)
    labels = batch.pop("labels")
    made.model.eval()  # no dropout: the same outputs twice
    with torch.no_grad():
        logits = made.model("rte", **batch)
    from mtdnn.modeling.objective import batch_loss

    with torch.no_grad():
        smoothed = batch_loss(made.model, made.tasks["rte"], batch, labels, made.config.smart,
                              0.0, None, made.config.label_smoothing).task_loss
    assert float(smoothed) == pytest.approx(float(F.cross_entropy(
        logits, labels, label_smoothing=0.3)), rel=1e-5)
    assert float(smoothed) != pytest.approx(float(F.cross_entropy(logits, labels)), rel=1e-4)


def test_gradient_checkpointing_is_on_and_changes_no_number(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path) -> None:
    base = rte_keys(prepared_data, tiny_encoder_dir, tmp_path, "max_steps=2")
    plain = recipe([*base, f"output_dir={tmp_path / 'a'}"])
    loss, norm = first_step_gradient(plain)
    checkpointed = recipe([*base, f"output_dir={tmp_path / 'b'}", "gradient_checkpointing=true"])
    loss_c, norm_c = first_step_gradient(checkpointed)
    assert checkpointed.model.encoder.is_activation_checkpointing
    assert not plain.model.encoder.is_activation_checkpointing
    assert loss_c == pytest.approx(loss) and float(norm_c) == pytest.approx(float(norm), rel=1e-5)


def test_warmup_steps_replace_the_warmup_ratio() -> None:
    from mtdnn.config.train_config import OptimizerConfig
    from mtdnn.training.optimization import build_scheduler

    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scheduler = build_scheduler(optimizer, OptimizerConfig(warmup_ratio=0.5, warmup_steps=4),
                                total_steps=100)
    lrs = []
    for _ in range(5):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])  # 4 steps, not 50
    assert json.dumps(lrs)  # plain floats


def terminal_screen(output: str) -> list[str]:
    """What a terminal shows of ``output``: each carriage return rewrites its line."""
    screen = []
    for raw in output.replace("\r\n", "\n").split("\n"):
        line = ""
        for part in raw.split("\r"):
            line = part + line[len(part):]
        screen.append(line.rstrip())
    return screen


@pytest.mark.skipif(not hasattr(__import__("os"), "openpty"), reason="needs a terminal")
def test_in_a_terminal_the_progress_bar_ends_once_with_the_log_lines_above_it(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path) -> None:
    """Log lines printed while the bar runs go above it, so the finished bar is one line,
    not a copy left behind by each log line and another at the end."""
    import fcntl
    import os
    import select
    import struct
    import subprocess
    import sys
    import termios

    keys = [k for k in rte_keys(prepared_data, tiny_encoder_dir, tmp_path, "max_steps=6",
                                "log_every_steps=2") if k != "progress_bar=false"]
    master, terminal = os.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    run = subprocess.Popen([sys.executable, "-c", "from mtdnn.cli import train_command; "
                            "train_command()", *keys], stdin=terminal,
                           stdout=terminal, stderr=terminal, close_fds=True,
                           env={**os.environ, "HF_HUB_OFFLINE": "1"})
    os.close(terminal)
    output = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the run ended and closed the terminal
                break
            if not chunk:
                break
            output += chunk
        elif run.poll() is not None:
            break
    os.close(master)
    assert run.wait(timeout=60) == 0, output.decode()[-2000:]
    screen = terminal_screen(output.decode())
    bars = [line for line in screen if line.startswith("train:")]
    assert len(bars) == 1 and "6/6" in bars[0], screen[-12:]
    dev = [i for i, line in enumerate(screen) if " dev {" in line]
    assert dev and dev[-1] < screen.index(bars[0])  # the last evaluation, above the bar


def test_a_run_saved_before_a_key_existed_resumes(
        prepared_data: Path, tiny_encoder_dir: Path, tmp_path: Path) -> None:
    """A config.yaml written by an older version lacks the keys added since; they read as
    their defaults (which keep the former behaviour), so the run resumes. A key that does
    differ still stops the resume."""
    import yaml

    from mtdnn.errors import MtdnnError

    keys = rte_keys(prepared_data, tiny_encoder_dir, tmp_path)
    train(resolve_config(None, [*keys, "max_steps=2"]))
    for saved in (tmp_path / "run" / "config.yaml", tmp_path / "run" / "last" / "config.yaml"):
        old = yaml.safe_load(saved.read_text())
        for added in ("gradient_checkpointing", "label_smoothing"):
            del old[added]
        del old["optimizer"]["warmup_steps"]
        del old["tasks"]["rte"]["loss_weight"]
        saved.write_text(yaml.safe_dump(old))
    state_file = tmp_path / "run" / "last" / "training_state.pt"
    state = torch.load(state_file, weights_only=False)
    del state["run"]["trained_by"]  # a loop state saved before it was kept
    torch.save(state, state_file)
    resumed = train(resolve_config(None, [*keys, "max_steps=4", f"resume={tmp_path / 'run'}"]))
    assert resumed["steps"] == 4 and resumed["resumed_from_step"] == 2
    assert [seg["from_step"] for seg in resumed["trained_by"]] == [2]  # steps 1-2: unknown
    with pytest.raises(MtdnnError, match="the run to resume has label_smoothing=0.0, this one 0.1"):
        train(resolve_config(None, [*keys, "max_steps=6", "label_smoothing=0.1",
                                    f"resume={tmp_path / 'run'}"]))
