"""The training losses and batch helpers against naive reference implementations."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from chexretrieve.phantom.training import (
    PhantomTrainingConfig,
    augment_images,
    choose_texts,
    learning_rate_at,
    multi_positive_clip_loss,
    positives_for,
    prompt_pair_loss,
    training_loss,
)


def _unit(n: int, d: int, seed: int) -> torch.Tensor:
    return F.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(seed)), dim=-1)


def _naive_multi_positive(images, texts, positives, scale):
    n = images.shape[0]
    logits = [[scale * float(images[i] @ texts[j]) for j in range(n)] for i in range(n)]
    total_rows = 0.0
    for i in range(n):
        norm = math.log(sum(math.exp(v) for v in logits[i]))
        pos = [j for j in range(n) if positives[i][j]]
        total_rows += -sum(logits[i][j] - norm for j in pos) / len(pos)
    total_cols = 0.0
    for j in range(n):
        norm = math.log(sum(math.exp(logits[i][j]) for i in range(n)))
        pos = [i for i in range(n) if positives[i][j]]
        total_cols += -sum(logits[i][j] - norm for i in pos) / len(pos)
    return 0.5 * (total_rows / n + total_cols / n)


def test_identity_positives_give_the_clip_loss():
    images, texts = _unit(6, 8, 0), _unit(6, 8, 1)
    scale = torch.tensor(math.log(10.0))
    logits = 10.0 * images @ texts.T
    target = torch.arange(6)
    clip = 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))
    ours = multi_positive_clip_loss(images, texts, torch.eye(6, dtype=torch.bool), scale)
    assert torch.allclose(ours, clip, atol=1e-6)


def test_multi_positive_loss_matches_a_naive_loop():
    images, texts = _unit(5, 4, 2), _unit(5, 4, 3)
    positives = torch.eye(5, dtype=torch.bool)
    positives[0, 3] = positives[3, 0] = positives[2, 4] = True
    scale = torch.tensor(1.5)
    ours = float(multi_positive_clip_loss(images, texts, positives, scale))
    naive = _naive_multi_positive(images, texts, positives.tolist(), math.exp(1.5))
    assert ours == pytest.approx(naive, rel=1e-5)


def test_prompt_pair_loss_is_a_two_way_softmax_cross_entropy():
    images, pos, neg = _unit(4, 6, 4), _unit(3, 6, 5), _unit(3, 6, 6)
    truth = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    scale = torch.tensor(2.0)
    naive = 0.0
    for i in range(4):
        for f in range(3):
            both = torch.stack([images[i] @ pos[f], images[i] @ neg[f]]) * math.exp(2.0)
            p = torch.softmax(both, 0)
            naive += -math.log(p[0] if truth[i, f] else p[1])
    ours = float(prompt_pair_loss(images, pos, neg, truth, scale))
    assert ours == pytest.approx(naive / 12, rel=1e-5)


def test_positives_mark_texts_shared_between_reports():
    text_ids = torch.tensor([[0, 5, 6, -1], [1, 5, 7, 8], [2, 9, -1, -1]])
    chosen = torch.tensor([5, 8, 2])
    naive = [[c in set(row) for c in chosen.tolist()] for row in text_ids.tolist()]
    assert positives_for(text_ids, chosen).tolist() == naive
    assert naive == [[True, False, False], [True, True, False], [False, False, True]]


def test_choose_texts_draws_only_the_cases_own_texts():
    text_ids = torch.tensor([[0, 10, 11, -1], [1, 12, -1, -1], [2, -1, -1, -1]])
    generator = torch.Generator().manual_seed(0)
    always_report = choose_texts(text_ids, 1.0, generator)
    assert always_report.tolist() == [0, 1, 2]
    for _ in range(20):
        sentences = choose_texts(text_ids, 0.0, generator).tolist()
        assert sentences[0] in (10, 11) and sentences[1] == 12
        assert sentences[2] == 2  # no sentences: the report stands in


def test_learning_rate_warms_up_then_decays():
    config = PhantomTrainingConfig(steps=100, learning_rate=1.0, warmup_fraction=0.1)
    assert learning_rate_at(0, config) == pytest.approx(0.1)
    assert learning_rate_at(9, config) == pytest.approx(1.0)
    assert learning_rate_at(10, config) == pytest.approx(1.0)
    assert learning_rate_at(99, config) < 0.03
    rates = [learning_rate_at(s, config) for s in range(10, 100)]
    assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))


def test_augmentation_keeps_range_shape_and_is_seeded():
    images = torch.rand(3, 1, 32, 32)
    first = augment_images(images, torch.Generator().manual_seed(1))
    again = augment_images(images, torch.Generator().manual_seed(1))
    assert first.shape == images.shape
    assert float(first.min()) >= 0.0 and float(first.max()) <= 1.0
    assert torch.equal(first, again)
    assert not torch.equal(first, images)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"steps": 0}, "steps must be a positive integer"),
        ({"batch_size": 1}, "batch_size must be at least 2"),
        ({"image_size": 30}, "multiple of 4"),
        ({"widths": (8,)}, "needs a stem width"),
        ({"report_probability": 1.5}, "report_probability must lie in"),
        ({"seed": -1}, "non-negative"),
        ({"prevalence": 5.0}, "prevalence must lie in"),
        ({"render_size": 16}, "size 16 is out of range"),
    ],
)
def test_bad_training_settings_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        PhantomTrainingConfig(**changes)


def test_default_training_loss_has_no_finding_prompt_term():
    """Weight 0 (the default): the loss is the report CLIP loss alone; neither the prompts nor the
    generator's truth enter it, so no gradient reaches them."""
    assert PhantomTrainingConfig().prompt_loss_weight == 0.0
    images, texts = _unit(6, 8, 7).requires_grad_(True), _unit(6, 8, 8)
    positives = torch.eye(6, dtype=torch.bool)
    scale = torch.tensor(math.log(10.0))
    prompts = _unit(2 * 3, 8, 9).reshape(2, 3, 8).requires_grad_(True)
    truth = torch.tensor([[1.0, 0.0, 1.0]] * 6)
    loss = training_loss(images, texts, positives, scale, 0.0, prompts, truth)
    clip = multi_positive_clip_loss(images, texts, positives, scale)
    assert float(loss.detach()) == float(clip.detach())
    loss.backward()
    assert prompts.grad is None and images.grad is not None
    assert training_loss(images, texts, positives, scale, 0.0, None, 1 - truth) == loss
    # with a positive weight the prompt term is there (the test above could not fail otherwise)
    images = images.detach()
    with_prompts = training_loss(images, texts, positives, scale, 0.5, prompts, truth)
    expected = clip + 0.5 * prompt_pair_loss(images, prompts[0], prompts[1], truth, scale)
    assert float(with_prompts) == pytest.approx(float(expected), rel=1e-6)
    with_prompts.backward()
    assert prompts.grad is not None and float(prompts.grad.abs().sum()) > 0
