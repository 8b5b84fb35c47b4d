"""Rows in lockstep: images that joined a step session at the same boundary with the same scheduler, config and
steps run the same timesteps together, so one scheduler instance steps them all on their stacked latents, as the
pipeline's own scheduler steps its batch: one ``scale_model_input`` and one ``step`` per step instead of one per row.

Why each row's pixels stay what it gets alone: the scheduler arithmetic on latents is elementwise (products and
sums with per-step scalars; a multistep solver's history is kept per element), so a stacked call computes every
element with the same float32 operations in the same order as the row's own call (tests/unit/
test_runtime_image_steps.py holds the pixels equal). Only schedulers whose step draws no noise that reaches the
result go in lockstep (an ancestral sampler draws each row's noise from its own generator); a row that leaves
early (canceled) keeps its slot, stepped with zero noise, so the others' slots and the solver history stay put.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.runtimes.image.rows import ImageRow

#: Schedulers whose ``step`` takes a generator but draws no noise into the result with the settings genq uses
#: (Euler with s_churn 0, DDIM with eta 0, DPM-Solver++ but its SDE variants): they step in lockstep with a
#: generator of the group's own, so no row's generator and no global state is touched.
DETERMINISTIC_WITH_GENERATOR = {"EulerDiscreteScheduler", "DDIMScheduler", "DPMSolverMultistepScheduler"}


def can_lockstep(row: ImageRow) -> bool:
    """Whether ``row``'s scheduler steps it alone for a reason: ancestral noise, inpainting's blend, DeepCache."""
    if row.blend is not None or row.cache is not None or row.done:
        return False
    if "generator" not in row.step_kwargs:
        return True
    scheduler = row.scheduler
    name = type(scheduler).__name__
    if name == "DPMSolverMultistepScheduler" and "sde" in str(scheduler.config.get("algorithm_type", "")):
        return False
    return name in DETERMINISTIC_WITH_GENERATOR and not row.step_kwargs.get("eta")


@dataclass(eq=False)
class Lockstep:
    """Rows that joined together and run the same timesteps; ``members`` keep their order (their slots)."""

    scheduler: Any
    members: list[ImageRow]
    step_kwargs: dict[str, Any]

    def scaled_inputs(self) -> Any:
        """Every member's latents scaled for the UNet at the group's timestep, stacked in member order."""
        import torch

        return self.scheduler.scale_model_input(torch.cat([row.latents for row in self.members]), self.timestep)

    def advance(self, noise: dict[int, Any]) -> None:
        """One scheduler step on the stacked latents; ``noise``: each live member's guided noise, by ``id``
        (a member no longer stepped, dropped, takes zeros)."""
        import torch

        first = next(iter(noise.values()))
        outputs = torch.cat([noise.get(id(row), torch.zeros_like(first)) for row in self.members])
        latents = torch.cat([row.latents for row in self.members])
        stepped = self.scheduler.step(outputs, self.timestep, latents, **self.step_kwargs, return_dict=False)[0]
        for i, row in enumerate(self.members):
            row.latents = stepped[i : i + 1]
            row.done += 1

    @property
    def timestep(self) -> Any:
        return self.members[0].timestep


def lock_rows(rows: list[ImageRow]) -> None:
    """Put newcomers' rows that can run in lockstep into groups of the same scheduler class, config and
    timesteps (each group's scheduler is its first row's, still unstepped)."""
    import torch

    groups: dict[tuple[Any, ...], list[ImageRow]] = {}
    for row in rows:
        if can_lockstep(row):
            key = (type(row.scheduler), repr(dict(row.scheduler.config)), tuple(row.timesteps.tolist()))
            groups.setdefault(key, []).append(row)
    for members in groups.values():
        if len(members) < 2:
            continue
        scheduler = members[0].scheduler
        kwargs = dict(members[0].step_kwargs)
        if "generator" in kwargs:
            kwargs["generator"] = torch.Generator(str(members[0].latents.device)).manual_seed(0)  # drawn, never used
        group = Lockstep(scheduler, members, kwargs)
        for row in members:
            row.scheduler = scheduler
            row.lockstep = group


def scaled_inputs(rows: list[ImageRow]) -> list[Any]:
    """Each row's latents scaled for the UNet: a lockstep group's in one call, sliced per member."""
    out: list[Any] = []
    stacked: dict[int, tuple[Any, dict[int, int]]] = {}
    for row in rows:
        group = row.lockstep
        if group is None:
            out.append(row.scaled_input())
            continue
        if id(group) not in stacked:
            stacked[id(group)] = (group.scaled_inputs(), {id(m): k for k, m in enumerate(group.members)})
        scaled, slot = stacked[id(group)]
        k = slot[id(row)]
        out.append(scaled[k : k + 1])
    return out


def advance_rows(rows: list[ImageRow], noise: Any) -> None:
    """One scheduler step for each row on its slice of ``noise`` (row i: ``noise[i]``), a group's in one call."""
    groups: dict[int, tuple[Lockstep, dict[int, Any]]] = {}
    for i, row in enumerate(rows):
        group = row.lockstep
        if group is None:
            row.advance(noise[i : i + 1])
        else:
            groups.setdefault(id(group), (group, {}))[1][id(row)] = noise[i : i + 1]
    for group, slices in groups.values():
        group.advance(slices)
