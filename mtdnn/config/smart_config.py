"""SMART's settings (Jiang et al. 2020): the regulariser's and the mean teacher's keys, and the
named recipes (presets) that fill them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mtdnn.config.fields import _positive, _ratio, key
from mtdnn.errors import MtdnnError


def _adv_weight_check() -> dict:
    return {"check": (lambda v: v == 0 or 1 <= v <= 5, "0 (off) or 1 <= lambda_s <= 5")}


@dataclass(frozen=True)
class SmartConfig:
    """SMART (Jiang et al. 2020); defaults are the paper's (Section 4.1, Appendix B).

    ``enabled: false`` is plain fine-tuning. ``adv_weight`` (λ_s) = 0 turns off the
    adversarial regulariser R_s; ``bregman_weight`` (μ) = 0 turns off the Bregman term and
    no teacher is kept. The norm of the perturbation ball is ℓ∞ (p = ∞). ``preset`` fills
    the keys a named recipe sets (``SMART_PRESETS``); keys given explicitly win, wherever
    and in whatever order they are given (:func:`warn_settings_that_cannot_act`).
    """

    enabled: bool = key(False, "SMART fine-tuning (Jiang et al. 2020)")
    preset: Literal["paper", "reference", "calibrated"] | None = key(
        None, "fill the keys of a named recipe: paper, reference or calibrated; a key "
        "given explicitly (in the file or on the command line, in any order) wins, with a "
        "warning"
    )
    adv_weight: float = key(
        1.0, "λ_s, the weight of the adversarial regulariser R_s (0: off)", _adv_weight_check()
    )
    epsilon: float = key(
        1e-5, "ε, the radius of the perturbation's ℓ∞ ball", _positive("epsilon")
    )  # radius of the ball
    noise_std: float = key(
        1e-5, "σ, the initial perturbation's standard deviation", _positive("noise_std")
    )  # σ
    # η: the ascent's step. null: step_ratio × ε (the paper's 1e-3 = 100 × 1e-5), so that a
    # larger radius gets a step that reaches it
    step_size: float | None = key(
        None, "η, the ascent's step (null: step_ratio × ε)", _positive("step_size")
    )
    step_ratio: float = key(
        100.0, "η ÷ ε when step_size is null (the paper's 100)", _positive("step_ratio")
    )
    ascent_steps: int = key(1, "T_x̃, ascent steps per minibatch", _positive("ascent_steps"))
    # paper: ℓ∞-normalised gradient step projected onto the ε-ball (Algorithm 1);
    # reference: ν ← (ν + η g) / (‖ν + η g‖∞ per token + guard), no projection (smart-pytorch,
    # mt-dnn); guard is their division guard (mt-dnn's adv_epsilon), not a radius
    ascent: Literal["paper", "reference"] = key(
        "paper", "paper (projected ℓ∞ step) or reference (normalised, no projection)"
    )
    guard: float = key(
        1e-6, "the reference ascent's division guard (mt-dnn's adv_epsilon)", _positive("guard")
    )
    # word_embeddings: before position/type embeddings and LayerNorm; embedding_output: the
    # embedding layer's output (the reference codes' reading of "the first embedding layer")
    perturb: Literal["word_embeddings", "embedding_output"] = key(
        "word_embeddings", "word_embeddings or embedding_output (after LayerNorm)"
    )
    # The adversarial passes reuse the clean pass's dropout masks, so R_s measures the
    # perturbation alone; false reproduces the reference code (independent masks).
    share_dropout: bool = key(True, "adversarial passes reuse the clean pass's dropout masks")
    bregman_weight: float = key(
        1.0,
        "μ, the weight of the Bregman proximal term (0: no teacher)",
        {"check": (lambda v: v >= 0, "mu >= 0")},
    )
    # shared: the teacher runs in training mode with the student's dropout masks, so
    # D_Breg(θ, θ̃) = 0 at θ = θ̃ (eqs. 2-3 on one f); off: the teacher runs without dropout
    teacher_dropout: Literal["shared", "off"] = key(
        "shared", "shared: teacher uses the student's masks; off: no dropout"
    )
    teacher_beta_early: float = key(0.99, "the mean teacher's EMA β early in training", _ratio())
    teacher_beta_late: float = key(
        0.999, "the mean teacher's EMA β after the early fraction", _ratio()
    )
    teacher_early_fraction: float = key(0.1, "fraction of the steps that use the early β", _ratio())
    teacher_update_every: int = key(
        1, "update the teacher every N steps", _positive("teacher_update_every")
    )
    # How β moves over the run (mtdnn.modeling.smart.teacher_beta). paper: the two β above, as
    # written; ramp: capped by Mean Teacher's running mean, so the start weights drop out
    # at the first update; scaled: the ramp, then the β whose lag 1/(1 - β) is
    # teacher_lag_fraction of the run's updates (the paper's share on its long runs: 3%).
    # scaled is the default: on runs of a few hundred updates the paper's β keeps most of
    # the start weights in the teacher, and SMART lost to plain fine-tuning by it
    # (docs/results.md, "SMART's mean teacher"); the paper preset keeps the paper's β.
    teacher_schedule: Literal["paper", "ramp", "scaled"] = key(
        "scaled",
        "paper (β as written), ramp (Mean Teacher's running mean first) or scaled "
        "(ramp, then a lag of a fraction of the run)",
    )
    teacher_lag_fraction: float = key(
        0.03,
        "scaled schedule: the teacher's lag 1/(1-β) as a fraction of the run's updates",
        {"check": (lambda v: 0 < v <= 1, "0 < fraction <= 1")},
    )

    @property
    def keeps_teacher(self) -> bool:
        """Whether the run has a Bregman term, hence a mean teacher to train and save."""
        return self.enabled and self.bregman_weight > 0

    @property
    def eta(self) -> float:
        """The ascent step η: ``step_size``, else ``step_ratio`` × ε."""
        return self.step_size if self.step_size is not None else self.step_ratio * self.epsilon


# Named SMART recipes: the keys each sets (keys given next to `preset` win).
SMART_PRESETS: dict[str, dict[str, Any]] = {
    # Jiang et al. 2020 as written: ε = σ = 1e-5, η = 1e-3, λ_s = μ = 1 (the defaults) and
    # the mean teacher's β = 0.99, then 0.999 (Tarvainen and Valpola's constants)
    "paper": {"epsilon": 1e-5, "noise_std": 1e-5, "adv_weight": 1.0, "bregman_weight": 1.0,
              "teacher_schedule": "paper"},
    # what smart-pytorch's SMARTLoss and mt-dnn run by default
    "reference": {
        "ascent": "reference",
        "perturb": "embedding_output",
        "share_dropout": False,
        "bregman_weight": 0.0,
        "noise_std": 1e-5,
        "step_size": 1e-3,
        "guard": 1e-6,
    },
    # the SMART calibration's choice (docs/results.md, issue 23): ε and λ_s picked by a rule
    # written before the runs, on tuning splits from train (SciTail 1%, RTE 80/20) with μ = 0;
    # η = step_ratio × ε and the paper's μ = 1 as defaults
    "calibrated": {"epsilon": 1e-3, "adv_weight": 1.0},
}


def check_smart(smart: SmartConfig, source: str | Path | None) -> None:
    """A paper ascent whose steps cannot reach the ε-ball from its start is an error (the
    radius would not be what bounds the perturbation)."""
    if smart.ascent == "paper" and smart.ascent_steps * smart.eta < smart.epsilon:
        raise MtdnnError(
            f"smart.step_size {smart.eta:g} × smart.ascent_steps {smart.ascent_steps} is "
            f"smaller than smart.epsilon {smart.epsilon:g}: the ascent cannot reach the "
            "ε-ball",
            file=source,
            key="smart.step_size",
            allowed="step_size: null (step_ratio × ε), or step_size × ascent_steps >= epsilon",
        )
