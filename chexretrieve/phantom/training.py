"""Training the offline phantom encoder: a CLIP-style image tower against the frozen MiniLM.

One run: draw ``n_images`` phantom cases of the training split (patients of the validation split are
never seen), embed every distinct report and report sentence once with the frozen MiniLM, then train
the image CNN and the text projection with

* the symmetric CLIP (InfoNCE) loss with a learned logit scale, where each image is paired with its
  whole report (probability ``report_probability``) or one of its sentences; a sentence that is true
  of several images in the batch (the same "No pneumothorax." in two reports) counts as a positive
  for all of them instead of a false negative;
* only when ``prompt_loss_weight`` > 0 (an experiment; the default is 0, report text alone, as
  CheXzero was trained): a finding-prompt loss, for every image and every finding a two-way
  softmax over a positive and a negative prompt ("there is {}" / "there is no {}" and similar)
  against the generator's truth. The evaluation pair ("{}", "no {}") is never among them.

Everything is seeded: the same configuration on the same machine and thread count gives the same
weights.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from chexretrieve.encoders.phantom_model import (
    INITIAL_LOGIT_SCALE,
    MAX_LOGIT_SCALE,
    MiniLMSentenceEncoder,
    architecture_of,
    build_towers,
    images_to_tensor,
    save_phantom_weights,
)
from chexretrieve.findings import FINDINGS
from chexretrieve.phantom.config import PhantomConfig, PhantomTrainingConfig
from chexretrieve.phantom.splits import generator_fingerprint, split_indices

#: prompt pairs of the finding-prompt loss ({} = the finding's name in lower case)
TRAINING_PROMPT_PAIRS: tuple[tuple[str, str], ...] = (
    ("there is {}", "there is no {}"),
    ("{} is present", "{} is absent"),
    ("evidence of {}", "no evidence of {}"),
    ("findings of {}", "no findings of {}"),
    ("{} is seen", "{} is not seen"),
)
#: the grey level images are centred on and scaled by before the CNN (fixed, stored in the weights)
PIXEL_MEAN = 0.45
PIXEL_STD = 0.25

#: (texts) -> (n, 384) unit sentence embeddings
SentenceEncoder = Callable[[Sequence[str]], torch.Tensor]
#: (seed, index, PhantomConfig) -> a phantom case
CaseGenerator = Callable[[int, int, PhantomConfig], Any]


@dataclass
class TrainingSet:
    """Everything a run trains on, already in memory."""

    images: torch.Tensor  # (n, 1, s, s) float16 in [0, 1], already resized to the model input
    truth: torch.Tensor  # (n, 13) float32, 1 where the finding is really present
    text_ids: torch.Tensor  # (n, k) int64: the report's id, then its sentences' ids, padded with -1
    text_embeddings: torch.Tensor  # (m, 384) frozen MiniLM embeddings of the m distinct texts
    prompt_embeddings: torch.Tensor  # (pairs, 2, 13, 384): [pair, positive/negative, finding]
    case_indices: list[int]  # the generator indices of the cases, in order

    @property
    def size(self) -> int:
        return int(self.images.shape[0])


@dataclass
class TrainingResult:
    """What a run produced."""

    path: Path  # the weights file
    sha256: str  # of the weights file
    losses: list[float]  # total loss per step
    seconds: float  # wall time of the whole run
    cpu_seconds: float  # CPU time of the run, worker processes included
    logit_scale: float  # the learned log inverse temperature


def finding_prompts(templates: Sequence[str]) -> list[str]:
    """Every template filled with every finding name in lower case, template-major."""
    return [template.format(name.lower()) for template in templates for name in FINDINGS]


def draw_training_cases(
    config: PhantomTrainingConfig,
    generate: CaseGenerator,
    progress: Callable[[int], None] | None = None,
) -> list[Any]:
    """The first ``config.n_images`` training-split cases of the world ``config.seed``.

    With ``config.threads`` > 1 the cases are drawn by that many forked worker processes (numpy
    only); the order, and so the result, does not depend on the number of workers.
    """
    world = phantom_world_config(config)
    indices = split_indices(config.seed, "train", config.n_images, world)
    jobs = [(generate, config.seed, index, world) for index in indices]
    if config.threads == 1:
        results = map(_draw_one, jobs)
        return [_advance(case, progress) for case in results]
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(config.threads) as pool:
        return [_advance(case, progress) for case in pool.imap(_draw_one, jobs, chunksize=8)]


def _draw_one(job: tuple[CaseGenerator, int, int, PhantomConfig]) -> Any:
    generate, seed, index, world = job
    case = generate(seed, index, world)
    case.metadata["index"] = index
    return case


def _advance(case: Any, progress: Callable[[int], None] | None) -> Any:
    if progress is not None:
        progress(1)
    return case


def phantom_world_config(config: PhantomTrainingConfig) -> PhantomConfig:
    """The generator settings the training images are drawn with."""
    return PhantomConfig(size=config.render_size, prevalence=config.prevalence)


def build_training_set(
    cases: Sequence[Any], config: PhantomTrainingConfig, sentence_encoder: SentenceEncoder
) -> TrainingSet:
    """Images resized to the model input, truth, text ids and the frozen text embeddings."""
    texts: dict[str, int] = {}

    def text_id(text: str) -> int:
        return texts.setdefault(text, len(texts))

    rows = [[text_id(case.report)] + [text_id(s) for s in case.sentences] for case in cases]
    width = max(len(row) for row in rows)
    text_ids = torch.full((len(rows), width), -1, dtype=torch.int64)
    for i, row in enumerate(rows):
        text_ids[i, : len(row)] = torch.tensor(row)
    images = torch.cat(
        [
            images_to_tensor([case.image], config.image_size, 0.0, 1.0).to(torch.float16)
            for case in cases
        ]
    )
    truth = torch.tensor(
        [[float(bool(case.truth[name])) for name in FINDINGS] for case in cases],
        dtype=torch.float32,
    )
    ordered = sorted(texts, key=texts.__getitem__)
    text_embeddings = sentence_encoder(ordered).float()
    positives, negatives = zip(*TRAINING_PROMPT_PAIRS, strict=True)
    prompts = sentence_encoder(finding_prompts(positives) + finding_prompts(negatives)).float()
    prompt_embeddings = prompts.reshape(2, len(TRAINING_PROMPT_PAIRS), len(FINDINGS), -1)
    return TrainingSet(
        images=images,
        truth=truth,
        text_ids=text_ids,
        text_embeddings=text_embeddings,
        prompt_embeddings=prompt_embeddings.transpose(0, 1).contiguous(),
        case_indices=[int(case.metadata["index"]) for case in cases],
    )


def multi_positive_clip_loss(
    image_embeddings: torch.Tensor,
    text_embeddings: torch.Tensor,
    positives: torch.Tensor,
    logit_scale: torch.Tensor,
) -> torch.Tensor:
    """Symmetric InfoNCE where ``positives[i, j]`` says text j is true of image i.

    Each row (image -> texts) and each column (text -> images) is a cross-entropy against the
    uniform distribution over its positives; with the identity as ``positives`` this is CLIP's loss.
    Embeddings must be unit rows; the diagonal of ``positives`` must be true.
    """
    logits = logit_scale.exp() * image_embeddings @ text_embeddings.T
    weights = positives.float()
    image_to_text = -(weights * logits.log_softmax(dim=1)).sum(1) / weights.sum(1)
    text_to_image = -(weights * logits.log_softmax(dim=0)).sum(0) / weights.sum(0)
    return 0.5 * (image_to_text.mean() + text_to_image.mean())


def prompt_pair_loss(
    image_embeddings: torch.Tensor,
    positive_prompts: torch.Tensor,
    negative_prompts: torch.Tensor,
    truth: torch.Tensor,
    logit_scale: torch.Tensor,
) -> torch.Tensor:
    """Mean two-way cross-entropy of (positive, negative) prompt per finding against the truth.

    ``positive_prompts``/``negative_prompts``: (findings, d) unit rows; ``truth``: (n, findings).
    """
    scale = logit_scale.exp()
    margin = scale * image_embeddings @ (positive_prompts - negative_prompts).T
    return F.binary_cross_entropy_with_logits(margin, truth)


def training_loss(
    image_embeddings: torch.Tensor,
    texts: torch.Tensor,
    positives: torch.Tensor,
    logit_scale: torch.Tensor,
    prompt_loss_weight: float,
    prompts: torch.Tensor | None,
    truth: torch.Tensor,
) -> torch.Tensor:
    """One step's loss: the report CLIP loss, plus the finding-prompt loss only when its weight is
    positive (``prompts``: (2, findings, d) unit positive/negative prompts; unused at weight 0, so
    the default training never sees a finding prompt nor the generator's truth)."""
    loss = multi_positive_clip_loss(image_embeddings, texts, positives, logit_scale)
    if prompt_loss_weight > 0:
        if prompts is None:
            raise ValueError("a positive prompt_loss_weight needs the prompt embeddings")
        pair_loss = prompt_pair_loss(image_embeddings, prompts[0], prompts[1], truth, logit_scale)
        loss = loss + prompt_loss_weight * pair_loss
    return loss


def augment_images(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Small random shifts, zooms and rotations plus grey-level gamma and contrast jitter."""
    n = images.shape[0]

    def uniform(low: float, high: float) -> torch.Tensor:
        return low + (high - low) * torch.rand(n, generator=generator)

    angle = uniform(-0.05, 0.05)
    zoom = uniform(0.92, 1.06)
    shift = torch.stack([uniform(-0.05, 0.05), uniform(-0.05, 0.05)], dim=1)
    cos, sin = torch.cos(angle) / zoom, torch.sin(angle) / zoom
    theta = torch.stack(
        [torch.stack([cos, -sin, shift[:, 0]], 1), torch.stack([sin, cos, shift[:, 1]], 1)], 1
    )
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    moved = F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    gamma = uniform(0.8, 1.25).view(n, 1, 1, 1)
    contrast = uniform(0.85, 1.15).view(n, 1, 1, 1)
    offset = uniform(-0.05, 0.05).view(n, 1, 1, 1)
    return (moved.clamp(1e-6, 1.0).pow(gamma) * contrast + offset).clamp(0.0, 1.0)


def positives_for(text_ids: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """(n, n) bool: text ``chosen[j]`` is the report or a sentence of case i (row i of text_ids)."""
    return (text_ids[:, :, None] == chosen[None, None, :]).any(dim=1)


def choose_texts(
    text_ids: torch.Tensor, report_probability: float, generator: torch.Generator
) -> torch.Tensor:
    """Per case its report's id (chance ``report_probability``), else a random sentence's id."""
    n = text_ids.shape[0]
    sentence_counts = (text_ids[:, 1:] >= 0).sum(1)
    pick = (torch.rand(n, generator=generator) * sentence_counts).long() + 1
    use_report = (torch.rand(n, generator=generator) < report_probability) | (sentence_counts == 0)
    pick = torch.where(use_report, torch.zeros_like(pick), pick)
    return text_ids.gather(1, pick[:, None])[:, 0]


def learning_rate_at(step: int, config: PhantomTrainingConfig) -> float:
    """Linear warm-up, then cosine decay to 2% of the peak."""
    warmup = max(1, round(config.warmup_fraction * config.steps))
    if step < warmup:
        return config.learning_rate * (step + 1) / warmup
    progress = (step - warmup) / max(1, config.steps - warmup)
    return config.learning_rate * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_on_set(
    data: TrainingSet,
    config: PhantomTrainingConfig,
    device: torch.device,
    on_step: Callable[[int, float], None] | None = None,
) -> tuple[torch.nn.Module, torch.nn.Module, torch.Tensor, list[float]]:
    """Train the towers on an in-memory set; (image tower, projection, logit scale, losses)."""
    torch.manual_seed(config.seed)
    architecture = training_architecture(config)
    image_tower, projection = build_towers(architecture)
    image_tower.to(device).to(memory_format=torch.channels_last).train()
    projection.to(device).train()
    logit_scale = torch.nn.Parameter(torch.tensor(INITIAL_LOGIT_SCALE, device=device))
    decayed = [p for p in image_tower.parameters() if p.ndim > 1] + [projection.linear.weight]
    kept = [p for p in image_tower.parameters() if p.ndim <= 1] + [projection.linear.bias]
    optimizer = torch.optim.AdamW(
        [
            {"params": decayed, "weight_decay": config.weight_decay},
            {"params": kept + [logit_scale], "weight_decay": 0.0},
        ],
        lr=config.learning_rate,
    )
    sampler = torch.Generator().manual_seed(config.seed)
    text_embeddings = data.text_embeddings.to(device)
    prompt_embeddings = data.prompt_embeddings.to(device)
    batch = min(config.batch_size, data.size)
    order = torch.randperm(data.size, generator=sampler)
    cursor = 0
    losses = []
    for step in range(config.steps):
        if cursor + batch > data.size:
            order, cursor = torch.randperm(data.size, generator=sampler), 0
        rows = order[cursor : cursor + batch]
        cursor += batch
        images = data.images[rows].float()
        if config.augment:
            images = augment_images(images, sampler)
        pixels = ((images - PIXEL_MEAN) / PIXEL_STD).to(device)
        pixels = pixels.contiguous(memory_format=torch.channels_last)
        chosen = choose_texts(data.text_ids[rows], config.report_probability, sampler)
        positives = positives_for(data.text_ids[rows], chosen).to(device)
        # drawn even when the prompt loss is off, so the batches do not depend on its weight
        pair = int(torch.randint(len(TRAINING_PROMPT_PAIRS), (1,), generator=sampler))
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(step, config)

        image_embeddings = F.normalize(image_tower(pixels), dim=-1)
        texts = F.normalize(projection(text_embeddings[chosen.to(device)]), dim=-1)
        prompts = None
        if config.prompt_loss_weight > 0:
            prompts = F.normalize(projection(prompt_embeddings[pair]), dim=-1)
        loss = training_loss(
            image_embeddings,
            texts,
            positives,
            logit_scale,
            config.prompt_loss_weight,
            prompts,
            data.truth[rows].to(device),
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            logit_scale.clamp_(0.0, MAX_LOGIT_SCALE)
        losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(step, losses[-1])
    image_tower.eval()
    projection.eval()
    return image_tower, projection, logit_scale.detach(), losses


def training_architecture(config: PhantomTrainingConfig) -> dict[str, Any]:
    """The architecture record a run builds and stores."""
    return architecture_of(
        config.image_size, config.widths, config.depth, config.embed_dim, PIXEL_MEAN, PIXEL_STD
    )


def train_phantom_encoder(
    config: PhantomTrainingConfig,
    out: str | Path,
    sentence_encoder: SentenceEncoder | None = None,
    generate: CaseGenerator | None = None,
    show_progress: bool = True,
) -> TrainingResult:
    """Draw the phantom training set, train the encoder, write its weights to ``out``."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from chexretrieve.encoders.device import select_device

    started, cpu_started = time.perf_counter(), cpu_time()
    out = Path(out)
    device = select_device(config.device)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    if generate is None:
        from chexretrieve.phantom import generate_case as generate
    try:
        columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}"))
        with Progress(*columns, TimeElapsedColumn(), disable=not show_progress) as bar:
            task = bar.add_task("phantom training images", total=config.n_images)
            cases = draw_training_cases(config, generate, lambda k: bar.advance(task, k))
            task = bar.add_task("frozen MiniLM text embeddings", total=None)
            if sentence_encoder is None:
                sentence_encoder = MiniLMSentenceEncoder(device)
            data = build_training_set(cases, config, sentence_encoder)
            bar.update(task, total=1, completed=1)
            world = phantom_world_config(config)
            case_range = (data.case_indices[0], data.case_indices[-1])
            fingerprint = generator_fingerprint(cases)
            del cases
            task = bar.add_task("training", total=config.steps)

            def on_step(step: int, loss: float) -> None:
                bar.update(task, completed=step + 1, description=f"training (loss {loss:.3f})")

            image_tower, projection, logit_scale, losses = train_on_set(
                data, config, device, on_step
            )
    finally:
        torch.set_num_threads(previous_threads)
    seconds = time.perf_counter() - started
    provenance = {
        "training": training_record(config),
        "generator": {**asdict(world), "seed": config.seed, "split": "train"},
        "generator_indices": list(case_range),
        "generator_fingerprint": fingerprint,
        "distinct_texts": int(data.text_embeddings.shape[0]),
        "final_loss": float(np.mean(losses[-20:])) if losses else float("nan"),
        "device": device.type,
        "torch": str(torch.__version__),
        # the pairs the prompt loss draws from; used only when training.prompt_loss_weight > 0
        "training_prompts": [list(pair) for pair in TRAINING_PROMPT_PAIRS],
    }
    sha = save_phantom_weights(
        out, training_architecture(config), image_tower, projection, float(logit_scale), provenance
    )
    cpu_seconds = cpu_time() - cpu_started
    return TrainingResult(out, sha, losses, seconds, cpu_seconds, float(logit_scale))


def cpu_time() -> float:
    """CPU seconds used so far by this process and its finished child processes."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def training_record(config: PhantomTrainingConfig) -> dict[str, Any]:
    """The training configuration as plain values (tuples become lists) for the weights file."""
    return {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in asdict(config).items()
    }
