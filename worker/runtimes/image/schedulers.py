"""Each image row's own scheduler instance (schedulers keep per-run state), set for its steps: copied from one
prepared per (name, steps) rather than built from the config and set anew for every row."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

#: A fresh scheduler instance with its timesteps set, by contract scheduler name and steps (``SchedulerTemplates``).
PreparedScheduler = Callable[[str, int], Any]


class SchedulerTemplates:
    """Fresh schedulers with their timesteps set, copied from one prepared per (name, steps): ``from_config`` and
    ``set_timesteps`` cost ~1.3 ms a row on this CPU, a deep copy ~0.2 ms, and the copy's state is the same."""

    def __init__(self, new_scheduler: Any, device: str) -> None:
        self.new_scheduler, self.device = new_scheduler, device
        self._prepared: dict[tuple[str, int], Any] = {}

    def __call__(self, name: str, steps: int) -> Any:
        key = (name, steps)
        if key not in self._prepared:
            scheduler = self.new_scheduler(name)
            scheduler.set_timesteps(steps, device=self.device)
            self._prepared[key] = scheduler
        return copy.deepcopy(self._prepared[key])
