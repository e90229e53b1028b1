"""SMART's pure functions and mean teacher (Jiang et al. 2020, eqs. 1-3, Algorithm 1)."""

from __future__ import annotations

import copy
from functools import partial

import pytest
import torch

from mtdnn.modeling.model import MultiTaskModel, load_encoder
from mtdnn.modeling.smart import (
    MeanTeacher,
    adversarial_loss,
    bregman_loss,
    rng_replayer,
    scaled_beta,
    teacher_beta,
    teacher_start_share,
    without_parameter_grads,
)
from mtdnn.tasks.divergences import squared_error, symmetric_kl
from mtdnn.tasks.task_def import load_task_defs

TASKS = load_task_defs()


def test_symmetric_kl_is_symmetric_nonnegative_and_zero_on_equal() -> None:
    p, q = torch.randn(8, 3), torch.randn(8, 3)
    assert symmetric_kl(p, q).item() == pytest.approx(symmetric_kl(q, p).item(), rel=1e-6)
    assert symmetric_kl(p, q).item() > 0
    assert symmetric_kl(p, p).item() == pytest.approx(0.0, abs=1e-7)
    log_p, log_q = p.log_softmax(-1), q.log_softmax(-1)
    by_definition = ((log_p.exp() * (log_p - log_q)).sum(-1)
                     + (log_q.exp() * (log_q - log_p)).sum(-1)).mean()
    assert symmetric_kl(p, q).item() == pytest.approx(by_definition.item(), rel=1e-5)


def test_squared_error_for_regression() -> None:
    p, q = torch.tensor([[1.0], [2.0]]), torch.tensor([[0.5], [4.0]])
    assert squared_error(p, q).item() == pytest.approx((0.25 + 4.0) / 2)
    assert squared_error(p, p).item() == 0.0


@pytest.fixture(scope="module")
def tiny_model(tiny_encoder_dir) -> MultiTaskModel:
    encoder, _ = load_encoder(str(tiny_encoder_dir))
    model = MultiTaskModel(encoder, {"rte": TASKS["rte"], "stsb": TASKS["stsb"]})
    return model.eval()


def batch() -> dict[str, torch.Tensor]:
    ids = torch.tensor([[101, 2023, 2003, 1037, 3231, 102], [101, 7592, 102, 0, 0, 0]])
    return {"input_ids": ids, "attention_mask": (ids != 0).long()}


def test_perturbation_inside_ball_and_zero_on_padding(tiny_model: MultiTaskModel) -> None:
    inputs = batch()
    embeddings = tiny_model.embed_words(inputs["input_ids"])
    clean = tiny_model("rte", inputs_embeds=embeddings, attention_mask=inputs["attention_mask"])
    result = adversarial_loss(
        lambda e: tiny_model("rte", inputs_embeds=e, attention_mask=inputs["attention_mask"]),
        embeddings, clean, inputs["attention_mask"], symmetric_kl, epsilon=1e-3, noise_std=1e-2,
        step_size=1e-1, steps=3)
    real = inputs["attention_mask"].bool()
    assert result.delta[real].abs().max().item() <= 1e-3 + 1e-9
    assert result.delta[real].abs().max().item() == pytest.approx(1e-3)  # the ball is reached
    assert result.delta[~real].abs().max().item() == 0.0
    assert result.loss is not None and result.loss.item() > 0


def test_ascent_step_increases_the_divergence(tiny_model: MultiTaskModel) -> None:
    inputs = batch()
    mask = inputs["attention_mask"]
    embeddings = tiny_model.embed_words(inputs["input_ids"]).detach()
    clean = tiny_model("rte", inputs_embeds=embeddings, attention_mask=mask)

    def run(steps: int) -> float:
        generator = torch.Generator().manual_seed(5)
        result = adversarial_loss(
            lambda e: tiny_model("rte", inputs_embeds=e, attention_mask=mask), embeddings, clean,
            mask, symmetric_kl, epsilon=0.05, noise_std=0.01, step_size=0.05, steps=steps,
            generator=generator)
        return result.loss.item()

    assert run(steps=1) > 2 * run(steps=0)


def test_regression_uses_squared_error(tiny_model: MultiTaskModel) -> None:
    inputs = batch()
    mask = inputs["attention_mask"]
    embeddings = tiny_model.embed_words(inputs["input_ids"])
    clean = tiny_model("stsb", inputs_embeds=embeddings, attention_mask=mask)
    result = adversarial_loss(lambda e: tiny_model("stsb", inputs_embeds=e, attention_mask=mask),
                              embeddings, clean, mask, squared_error, epsilon=1e-2)
    assert result.loss is not None and result.loss.item() >= 0


def test_nan_gradient_skips_the_term(tiny_model: MultiTaskModel) -> None:
    inputs = batch()
    mask = inputs["attention_mask"]
    embeddings = tiny_model.embed_words(inputs["input_ids"])
    clean = tiny_model("rte", inputs_embeds=embeddings, attention_mask=mask)

    def broken(e: torch.Tensor) -> torch.Tensor:
        return tiny_model("rte", inputs_embeds=e * float("nan"), attention_mask=mask)

    result = adversarial_loss(broken, embeddings, clean, mask, symmetric_kl)
    assert bool(result.skipped) and result.loss.item() == 0.0
    # NaN in the ascent only: the term is dropped and no NaN reaches a parameter gradient
    model = copy.deepcopy(tiny_model)
    embeddings = model.embed_words(inputs["input_ids"])
    clean = model("rte", inputs_embeds=embeddings, attention_mask=mask)
    result = adversarial_loss(
        lambda e: model("rte", inputs_embeds=e, attention_mask=mask), embeddings, clean, mask,
        symmetric_kl, ascent_forward=broken)
    assert bool(result.skipped) and result.loss.item() == 0.0
    (clean.sum() + result.loss).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_gradients_flow_to_parameters_not_from_the_ascent(tiny_model: MultiTaskModel) -> None:
    model = copy.deepcopy(tiny_model)
    inputs = batch()
    mask = inputs["attention_mask"]
    embeddings = model.embed_words(inputs["input_ids"])
    clean = model("rte", inputs_embeds=embeddings, attention_mask=mask)
    model.zero_grad()
    result = adversarial_loss(lambda e: model("rte", inputs_embeds=e, attention_mask=mask),
                              embeddings, clean, mask, symmetric_kl, epsilon=1e-2, steps=2)
    assert all(p.grad is None for p in model.parameters())  # the ascent accumulated nothing
    result.loss.backward()
    assert model.heads["rte"].proj.weight.grad.abs().sum() > 0
    assert model.encoder.get_input_embeddings().weight.grad.abs().sum() > 0


def test_ascent_without_parameter_grads_finds_the_same_perturbation(
        tiny_model: MultiTaskModel) -> None:
    model = copy.deepcopy(tiny_model)
    model.encoder.embeddings.requires_grad_(False)  # frozen before: must stay frozen
    inputs = batch()
    mask = inputs["attention_mask"]
    embeddings = model.embed_words(inputs["input_ids"]).detach()
    clean = model("rte", inputs_embeds=embeddings, attention_mask=mask)

    def forward(e: torch.Tensor) -> torch.Tensor:
        return model("rte", inputs_embeds=e, attention_mask=mask)

    seen_trainable = []

    def frozen_and_watched(e: torch.Tensor) -> torch.Tensor:
        out = without_parameter_grads(model, forward)(e)
        seen_trainable.append(out.grad_fn is not None)
        return out

    results = []
    for ascent_forward in (None, frozen_and_watched):
        generator = torch.Generator().manual_seed(3)
        results.append(adversarial_loss(forward, embeddings, clean, mask, symmetric_kl,
                                        epsilon=0.05, noise_std=0.01, step_size=0.05, steps=2,
                                        generator=generator, ascent_forward=ascent_forward))
    assert torch.equal(results[0].delta, results[1].delta)
    assert results[0].loss.item() == results[1].loss.item()
    assert seen_trainable == [True, True]  # still differentiable in the noise
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert "heads.rte.proj.weight" in trainable
    assert not any(n.startswith("encoder.embeddings.") for n in trainable)


def test_shared_dropout_isolates_the_perturbation(tiny_encoder_dir) -> None:
    encoder, _ = load_encoder(str(tiny_encoder_dir))
    model = MultiTaskModel(encoder, {"rte": TASKS["rte"]}).train()
    inputs = batch()
    mask = inputs["attention_mask"]
    losses = {}
    for share in (True, False):
        torch.manual_seed(0)
        replay = rng_replayer(torch.device("cpu"))
        embeddings = model.embed_words(inputs["input_ids"])
        clean = model("rte", inputs_embeds=embeddings, attention_mask=mask)
        run = replay if share else (lambda fn, *a, **k: fn(*a, **k))
        forward = partial(run, model, "rte", attention_mask=mask)
        losses[share] = adversarial_loss(lambda e: forward(inputs_embeds=e), embeddings,  # noqa: B023
                                         clean, mask, symmetric_kl, steps=0).loss.item()
    # With ε = 1e-5 the perturbation alone moves the output far less than a new dropout mask.
    assert losses[True] < 1e-3 * losses[False]


def test_bregman_is_zero_for_equal_teacher_and_trains_only_the_student(
        tiny_model: MultiTaskModel) -> None:
    student = copy.deepcopy(tiny_model).eval()
    teacher = MeanTeacher(student, total_updates=10, dropout=False)
    inputs = batch()
    assert bregman_loss(student("rte", **inputs), teacher("rte", **inputs),
                        symmetric_kl).item() == pytest.approx(0.0, abs=1e-7)
    with torch.no_grad():
        student.heads["rte"].proj.bias[0] += 0.5  # one class: a shift of every logit is invisible
    loss = bregman_loss(student("rte", **inputs), teacher("rte", **inputs), symmetric_kl)
    assert loss.item() > 0
    loss.backward()
    assert student.heads["rte"].proj.weight.grad.abs().sum() > 0
    assert all(p.grad is None and not p.requires_grad for p in teacher.model.parameters())


def test_ema_update_matches_formula_with_beta_switch(tiny_model: MultiTaskModel) -> None:
    student = copy.deepcopy(tiny_model)
    teacher = MeanTeacher(student, total_updates=20, early=0.99, late=0.999, dropout=False)
    assert [teacher_beta(t, 20) for t in (1, 2, 3)] == [0.99, 0.99, 0.999]
    betas = []
    for _ in range(3):
        before = teacher.model.heads["rte"].proj.weight.clone()
        with torch.no_grad():
            for p in student.parameters():
                p.add_(0.1)
        beta = teacher.update(student)
        betas.append(beta)
        expected = beta * before + (1 - beta) * student.heads["rte"].proj.weight
        torch.testing.assert_close(teacher.model.heads["rte"].proj.weight, expected)
    assert betas == [0.99, 0.99, 0.999]
    assert teacher.updates == 3 and not teacher.model.training


def test_ramp_makes_the_teacher_the_running_mean_of_the_student(
        tiny_model: MultiTaskModel) -> None:
    """Mean Teacher's ramp with β near 1: after t updates the teacher is the mean of the
    student's weights θ_1 … θ_t, and the start weights are gone (share 0)."""
    student = copy.deepcopy(tiny_model)
    teacher = MeanTeacher(student, total_updates=1000, early=0.9999, late=0.9999,
                          dropout=False, schedule="ramp")
    generator = torch.Generator().manual_seed(0)
    seen = []
    for _ in range(6):
        with torch.no_grad():
            for p in student.parameters():
                p.add_(torch.randn(p.shape, generator=generator))
        seen.append([p.detach().clone() for p in student.parameters()])
        teacher.update(student)
        for i, mine in enumerate(teacher.model.parameters()):
            mean = torch.stack([weights[i] for weights in seen]).mean(0)
            torch.testing.assert_close(mine, mean, rtol=1e-5, atol=1e-5)
    assert teacher.start_share == 0.0
    # once the ramp passes β, the EMA takes over
    assert teacher_beta(20000, 100000, 0.9999, 0.9999, schedule="ramp") == 0.9999


def test_paper_schedule_keeps_the_start_share_the_issue_measured() -> None:
    """The paper's β over T updates leaves 0.99^(0.1T)·0.999^(0.9T) of the start weights."""
    for total, share in ((100, 0.83), (310, 0.55), (1000, 0.15)):
        teacher = MeanTeacher(torch.nn.Linear(2, 2), total_updates=total, dropout=False)
        for _ in range(total):
            teacher.update(teacher.model)
        assert teacher.start_share == pytest.approx(0.99 ** int(0.1 * total)
                                                    * 0.999 ** (total - int(0.1 * total)))
        assert teacher.start_share == pytest.approx(share, abs=0.01)
        # the same product without a model: what the tables compute for older records
        assert teacher_start_share(total, total) == pytest.approx(teacher.start_share)
    assert teacher_start_share(10, 100, schedule="scaled") == 0.0


@pytest.mark.parametrize("total", [100, 2000])
def test_scaled_schedule_gives_the_stated_lag(total: int) -> None:
    """The scaled β's lag 1/(1 - β) is the stated fraction of the run (3% by default)."""
    beta = scaled_beta(total)
    assert 1 / (1 - beta) == pytest.approx(0.03 * total)
    assert 1 / (1 - scaled_beta(total, 0.1)) == pytest.approx(0.1 * total)
    late = total // 2
    assert teacher_beta(late, total, schedule="scaled") == pytest.approx(beta)
    assert teacher_beta(1, total, schedule="scaled") == 0.0  # the ramp first


def test_teacher_share_survives_a_resume(tiny_model: MultiTaskModel) -> None:
    teacher = MeanTeacher(tiny_model, total_updates=50, dropout=False, schedule="scaled")
    for _ in range(7):
        teacher.update(tiny_model)
    again = MeanTeacher(tiny_model, total_updates=50, dropout=False, schedule="scaled")
    again.restore(teacher.snapshot())
    assert again.start_share == pytest.approx(teacher.start_share)


# -- issue 23: ε and η together, where to perturb, the reference ascent, teacher dropout ----


def test_step_follows_the_radius_and_a_step_that_cannot_reach_the_ball_is_an_error() -> None:
    from mtdnn.config.resolve import resolve_config
    from mtdnn.config.smart_config import SmartConfig
    from mtdnn.errors import MtdnnError

    paper = SmartConfig()
    assert (paper.epsilon, paper.eta) == (1e-5, pytest.approx(1e-3))  # the paper's defaults
    assert SmartConfig(epsilon=1e-2).eta == pytest.approx(1.0)  # η/ε = 100 follows ε
    assert SmartConfig(epsilon=1e-2, step_ratio=2).eta == pytest.approx(2e-2)
    with pytest.raises(MtdnnError) as error:
        resolve_config(None, ["tasks=[rte]", "smart.epsilon=1e-2", "smart.step_size=1e-3"])
    assert error.value.key == "smart.step_size" and "smart.epsilon" in error.value.problem
    # three steps of 4e-3 reach 1e-2; the reference ascent has no ball at all
    resolve_config(None, ["tasks=[rte]", "smart.epsilon=1e-2", "smart.step_size=4e-3",
                       "smart.ascent_steps=3"])
    resolve_config(None, ["tasks=[rte]", "smart.epsilon=1e-2", "smart.step_size=1e-3",
                       "smart.ascent=reference"])


def test_reference_step_formula_on_fixed_tensors() -> None:
    """(ν + η g) / (max over the hidden dimension of |ν + η g| + guard), per token; it
    replaces ν, with no projection (so ε plays no part)."""
    from mtdnn.modeling.smart import reference_step

    noise = torch.tensor([[[1e-5, -2e-5, 0.0], [3e-5, 1e-5, -1e-5]]])
    grad = torch.tensor([[[1.0, 0.0, -1.0], [0.0, 0.0, 0.0]]])
    eta, guard = 1e-5, 1e-6
    # token 1: ν + η g = [2e-5, -2e-5, -1e-5], max 2e-5; token 2: [3e-5, 1e-5, -1e-5], max 3e-5
    expected = torch.tensor([[[2e-5, -2e-5, -1e-5], [3e-5, 1e-5, -1e-5]]])
    expected[0, 0] /= 2e-5 + guard
    expected[0, 1] /= 3e-5 + guard
    got = reference_step(noise, grad, epsilon=123.0, step_size=eta, guard=guard)
    torch.testing.assert_close(got, expected)
    assert got.abs().amax(-1)[0].tolist() == pytest.approx([2 / 2.1, 3 / 3.1], rel=1e-5)


def test_reference_ascent_gives_unit_tokens_and_ignores_the_radius(
        tiny_model: MultiTaskModel) -> None:
    inputs = batch()
    mask = inputs["attention_mask"]
    embeddings = tiny_model.embed_words(inputs["input_ids"])
    clean = tiny_model("rte", inputs_embeds=embeddings, attention_mask=mask)
    result = adversarial_loss(
        lambda e: tiny_model("rte", inputs_embeds=e, attention_mask=mask), embeddings, clean,
        mask, symmetric_kl, epsilon=1e-9, noise_std=1e-5, step_size=1e-3, ascent="reference",
        generator=torch.Generator().manual_seed(0))
    per_token = result.delta.abs().amax(-1)
    assert per_token[mask.bool()].min() > 0.9 and per_token[mask.bool()].max() < 1.0
    assert per_token[~mask.bool()].abs().max() == 0  # padding is never perturbed
    assert result.loss.item() > 0


@pytest.mark.parametrize("site", ["word_embeddings", "embedding_output"])
def test_perturbation_is_applied_once_at_its_site(tiny_model: MultiTaskModel, site: str) -> None:
    inputs = batch()
    clean_outputs, perturbable = tiny_model.clean_pass("rte", inputs, site)
    torch.testing.assert_close(clean_outputs, tiny_model("rte", **inputs))
    torch.testing.assert_close(tiny_model.perturbed_pass("rte", inputs, site, perturbable),
                               clean_outputs)
    delta = 0.05 * torch.randn(perturbable.shape, generator=torch.Generator().manual_seed(0))
    # The same perturbation added by hand, once, at the site's own place in the network:
    # after the word-embedding lookup, or after the embedding LayerNorm (eval: no dropout).
    layer = (tiny_model.encoder.get_input_embeddings() if site == "word_embeddings"
             else tiny_model.encoder.embeddings.LayerNorm)
    hook = layer.register_forward_hook(lambda module, args, output: output + delta)
    try:
        by_hand = tiny_model("rte", **inputs)
    finally:
        hook.remove()
    torch.testing.assert_close(
        tiny_model.perturbed_pass("rte", inputs, site, perturbable + delta), by_hand)
    assert (by_hand - clean_outputs).abs().max() > 1e-4


@pytest.mark.parametrize("dropout", ["shared", "off"])
def test_bregman_is_zero_for_teacher_equal_to_student_in_training_mode(
        tiny_model: MultiTaskModel, dropout: str) -> None:
    """Eqs. (2)-(3) compare f(x; θ) with f(x; θ̃) for one f: with the student's dropout
    masks the teacher's copy of the student gives D_Breg = 0; without dropout it does not."""
    from mtdnn.config.smart_config import SmartConfig
    from mtdnn.modeling.objective import batch_loss

    student = copy.deepcopy(tiny_model).train()
    for module in student.modules():  # enough dropout to see it
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.3
    teacher = MeanTeacher(student, total_updates=10, dropout=dropout == "shared")
    smart = SmartConfig(enabled=True, adv_weight=0, teacher_dropout=dropout)
    step = batch_loss(student, TASKS["rte"], batch(), torch.tensor([0, 1]), smart, 0.0, teacher)
    if dropout == "shared":
        assert step.terms["bregman_loss"].item() == 0.0
    else:
        assert step.terms["bregman_loss"].item() > 1e-6
    assert step.terms["bregman_ratio"].item() == pytest.approx(
        step.terms["bregman_loss"].item() / step.task_loss.item())


def test_batch_loss_adds_the_weighted_terms_and_logs_their_size(
        tiny_model: MultiTaskModel) -> None:
    from mtdnn.config.smart_config import SmartConfig
    from mtdnn.modeling.objective import batch_loss

    model = copy.deepcopy(tiny_model).train()
    teacher = MeanTeacher(model, total_updates=10)
    with torch.no_grad():  # a teacher that differs in one class only, so that D_Breg > 0
        teacher.model.heads["rte"].proj.bias[0] += 0.3  # (a shift of every logit is invisible)
    smart = SmartConfig(enabled=True, adv_weight=2.0, bregman_weight=0.5, epsilon=1e-2)
    step = batch_loss(model, TASKS["rte"], batch(), torch.tensor([0, 1]), smart, 2.0, teacher)
    terms = {k: v.item() for k, v in step.terms.items()}
    expected = step.task_loss.item() + 2.0 * terms["adv_loss"] + 0.5 * terms["bregman_loss"]
    assert step.loss.item() == pytest.approx(expected, rel=1e-5)
    assert terms["adv_ratio"] == pytest.approx(2.0 * terms["adv_loss"] / step.task_loss.item())
    assert 0 < terms["delta_linf"] <= 1e-2 * (1 + 1e-6)
    assert -1 <= terms["adv_grad_cos"] <= 1 and terms["bregman_loss"] > 0
